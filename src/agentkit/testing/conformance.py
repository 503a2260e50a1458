"""Conformance checks a taskset or harness plugin runs against itself.

Each check raises :class:`ConformanceError` (an ``AssertionError``, so pytest
shows it as a test failure) with one message per broken rule::

    from agentkit.testing.conformance import check_harness, check_taskset

    def test_my_taskset():
        check_taskset(MyTaskset(...))

    @pytest.mark.anyio
    async def test_my_harness(model_server):
        context = RunContext(model="m", base_url=model_server.base_url, api_key="k")
        await check_harness(MyHarness(), task, context)

A harness plugin opts in with one line, which makes a pytest test that runs
the registered harness against the scripted model server (in a sandbox when
asked) and checks every rule of :func:`check_harness`::

    test_conformance = harness_conformance_test("my-harness", script={...})

A step-capable harness also opts in to the step protocol's checks
(:func:`check_episode`), driving its episode with a fixed list of actions::

    test_episode_conformance = episode_conformance_test("my-harness", task=..., actions=[...])

:func:`harness_shape_problem` is the check the registry makes when a plugin
registers a harness (``run`` is ``async def`` with ``task``, ``context`` and
``on_event``), for a class or an instance, without running it.
"""

from __future__ import annotations

import inspect
import json
import math
import uuid
from collections.abc import Callable, Mapping, Sequence
from itertools import islice
from typing import Any

from agentkit import registry
from agentkit._context import Limits, RunContext
from agentkit._episode import Episode, StepOutput, is_step_capable, open_episode
from agentkit._errors import AgentkitError, TaskReferenceError
from agentkit._events import Event
from agentkit._harness import Harness
from agentkit._harness import check_harness as harness_shape_problem
from agentkit._result import HarnessResult
from agentkit._sandbox import ExecutionHints
from agentkit._task import Task, check_no_reserved_keys
from agentkit._taskset import Taskset

__all__ = [
    "CONFORMANCE_API_KEY",
    "ConformanceError",
    "check_episode",
    "check_harness",
    "check_taskset",
    "episode_conformance_test",
    "harness_conformance_test",
    "harness_shape_problem",
]

#: The API key :func:`harness_conformance_test` runs with (checked to appear nowhere).
CONFORMANCE_API_KEY = "sk-agentkit-conformance-7b3e9f1a"
_ROLES = {"system", "developer", "user", "assistant", "tool"}


class ConformanceError(AssertionError):
    """A plugin breaks one or more rules of its contract; the message lists them."""

    def __init__(self, what: str, problems: list[str]) -> None:
        self.problems = problems
        lines = "\n".join(f"  - {p}" for p in problems)
        super().__init__(f"{what} does not conform:\n{lines}")


def check_taskset(taskset: Any, *, limit: int | None = 1000) -> list[Task]:
    """Check the taskset contract on (up to ``limit``) tasks; return the tasks checked.

    Rules: it is a :class:`~agentkit.Taskset`; ``taskset_id`` is a valid id
    part; every task id is canonical (``parse``/``format`` round trip), starts
    with the taskset id and is unique; ``get_task(id)`` returns an equal task
    and an unknown id raises ``KeyError``; tasks carry a payload and no
    reserved agent keys; every task survives a JSON round trip; ``len()``,
    when defined, matches the iteration.
    """
    problems: list[str] = []
    name = f"taskset {getattr(taskset, 'taskset_id', type(taskset).__name__)!r}"
    if not isinstance(taskset, Taskset):
        raise ConformanceError(name, ["is not a Taskset (needs taskset_id, __iter__, get_task)"])
    taskset_id = taskset.taskset_id
    if not isinstance(taskset_id, str) or ":" in taskset_id:
        problems.append(f"taskset_id {taskset_id!r} must be a string without ':'")
    else:
        try:
            Task.format_task_id(taskset_id, "probe")
        except AgentkitError as exc:
            problems.append(f"taskset_id {taskset_id!r} is not a valid id part: {exc}")
    tasks: list[Task] = []
    seen: set[str] = set()
    iterator = iter(taskset)
    for task in islice(iterator, limit) if limit is not None else iterator:
        tasks.append(task)
        if not isinstance(task, Task):
            problems.append(f"iteration yielded {type(task).__name__}, not a Task")
            continue
        problems.extend(_task_problems(taskset, task, seen))
    exhausted = limit is None or len(tasks) < limit
    if exhausted and hasattr(type(taskset), "__len__"):
        try:
            size = len(taskset)  # type: ignore[arg-type]
        except TypeError:
            size = None
        if size is not None and size != len(tasks):
            problems.append(f"len() is {size} but iteration yields {len(tasks)} tasks")
    missing = (
        Task.format_task_id(taskset_id, "agentkit-conformance-no-such-item")
        if (isinstance(taskset_id, str) and ":" not in taskset_id and taskset_id)
        else None
    )
    if missing is not None:
        try:
            taskset.get_task(missing)
            problems.append(f"get_task({missing!r}) returned a task for an id that does not exist")
        except KeyError:
            pass
        except Exception as exc:
            problems.append(
                f"get_task of an unknown id raised {type(exc).__name__}, expected KeyError"
            )
    if problems:
        raise ConformanceError(name, problems)
    return tasks


def _task_problems(taskset: Taskset, task: Task, seen: set[str]) -> list[str]:
    problems: list[str] = []
    tid = task.task_id
    try:
        parsed = Task.parse_task_id(tid)
        if Task.format_task_id(*parsed) != tid:
            problems.append(f"{tid!r}: parse/format round trip gives a different id")
    except AgentkitError as exc:
        problems.append(f"{tid!r}: not a canonical task id: {exc}")
    if task.taskset_id != taskset.taskset_id:
        problems.append(f"{tid!r}: id does not start with the taskset id {taskset.taskset_id!r}")
    if tid in seen:
        problems.append(f"{tid!r}: duplicate task id")
    seen.add(tid)
    if task.is_reference:
        problems.append(f"{tid!r}: yielded as a bare reference (no input)")
    try:
        check_no_reserved_keys(task.metadata)
    except AgentkitError as exc:
        problems.append(f"{tid!r}: {exc}")
    try:
        fetched = taskset.get_task(tid)
        if fetched != task:
            problems.append(f"{tid!r}: get_task returns a task different from the iterated one")
    except Exception as exc:
        problems.append(f"{tid!r}: get_task raised {type(exc).__name__}: {exc}")
    try:
        again = Task.from_json(json.loads(json.dumps(task.to_json())))
        if again != task:
            problems.append(f"{tid!r}: the JSON round trip changes the task")
    except Exception as exc:
        problems.append(f"{tid!r}: not JSON-serializable: {type(exc).__name__}: {exc}")
    return problems


async def check_harness(
    harness: Any,
    task: Task,
    context: RunContext | None = None,
    *,
    expect_status: str | None = None,
) -> HarnessResult:
    """Run ``harness`` on ``task`` and check the harness contract; return the result.

    Rules: ``run`` has the right signature; it returns a valid
    :class:`~agentkit.HarnessResult` (JSON round trip included) with the
    expected status (when ``expect_status`` is given) and an ``error`` and
    an ``error_kind`` when it did not complete; its messages are OpenAI-style
    chat messages (a known ``role``; assistant ``tool_calls`` with an
    ``id``, ``type: function`` and ``function.name``/``arguments`` text;
    every ``tool`` message answers an earlier call); its usage has no
    negative count, cached tokens within the input tokens and reasoning
    tokens within the output tokens; its events are numbered 0..n-1, belong
    to the task and the rollout, were all delivered to ``on_event`` in that
    order before ``run`` returned; the API key of ``context`` appears nowhere
    in the result; and a bare reference ``Task(task_id=...)`` is rejected
    with :class:`~agentkit.TaskReferenceError`.
    """
    name = f"harness {type(harness).__name__}"
    shape = harness_shape_problem(harness)
    if shape is not None or not isinstance(harness, Harness):
        raise ConformanceError(name, [shape or "is not a Harness"])
    problems: list[str] = []
    context = context or RunContext()
    delivered: list[Event] = []
    returned = False
    late: list[int] = []

    async def on_event(event: Event) -> None:
        if returned:
            late.append(event.seq)
        delivered.append(event)

    result = await harness.run(task, context, on_event)
    returned = True
    if not isinstance(result, HarnessResult):
        raise ConformanceError(name, [f"run() returned {type(result).__name__}, not HarnessResult"])
    if expect_status is not None and result.status != expect_status:
        problems.append(
            f"status is {result.status!r} (error: {result.error!r}), expected {expect_status!r}"
        )
    if result.status != "completed" and not result.error:
        problems.append(f"status {result.status!r} without an error message")
    if result.status != "completed" and not result.error_kind:
        problems.append(f"status {result.status!r} without an error_kind")
    problems.extend(_message_problems(result.messages))
    problems.extend(_usage_problems(result))
    try:
        data = json.loads(json.dumps(result.to_json()))
        if HarnessResult.from_json(data) != result:
            problems.append("the JSON round trip changes the result")
    except Exception as exc:
        problems.append(f"the result is not JSON-serializable: {type(exc).__name__}: {exc}")
        data = None
    seqs = [e.seq for e in result.events]
    if seqs != list(range(len(seqs))):
        problems.append(f"event sequence numbers are {seqs}, expected 0..{len(seqs) - 1}")
    for event in result.events:
        if event.task_id != task.task_id:
            problems.append(f"event {event.seq} has task_id {event.task_id!r}")
        if event.rollout_id != context.rollout_id:
            problems.append(f"event {event.seq} has rollout_id {event.rollout_id!r}")
    got = [e.seq for e in delivered]
    if got != seqs:
        problems.append(f"on_event received events {got}, result.events has {seqs}")
    elif delivered != list(result.events):
        problems.append("the events delivered to on_event differ from result.events")
    if late:
        problems.append(f"events {late} reached on_event after run() returned")
    if not delivered and result.events:
        problems.append("no event was delivered to on_event")
    key = context.resolved_api_key
    if key and data is not None and key in json.dumps(data):
        problems.append("the API key appears in the result (events, error, messages or raw)")
    await _check_reference_rejected(harness, task, context, problems)
    if problems:
        raise ConformanceError(name, problems)
    return result


async def _check_reference_rejected(
    harness: Any, task: Task, context: RunContext, problems: list[str]
) -> None:
    reference = Task(task_id=task.task_id)
    try:
        outcome = harness.run(reference, context, None)
        if inspect.isawaitable(outcome):
            await outcome
        problems.append(
            "a bare reference task (no input) ran instead of raising TaskReferenceError"
        )
    except TaskReferenceError:
        pass
    except Exception as exc:
        problems.append(
            f"a bare reference task raised {type(exc).__name__}, expected TaskReferenceError"
        )


def _message_problems(messages: Any) -> list[str]:
    """Rules of the OpenAI-style transcript every harness returns."""
    problems: list[str] = []
    calls: set[str] = set()
    for i, message in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(message, dict):
            problems.append(f"{where} is {type(message).__name__}, not an object")
            continue
        role = message.get("role")
        if role not in _ROLES:
            problems.append(f"{where}.role is {role!r}, expected one of {sorted(_ROLES)}")
        for j, call in enumerate(message.get("tool_calls") or []):
            at = f"{where}.tool_calls[{j}]"
            function = call.get("function") if isinstance(call, dict) else None
            if role != "assistant":
                problems.append(f"{at}: only assistant messages carry tool calls")
            if not isinstance(call, dict) or not isinstance(call.get("id"), str):
                problems.append(f"{at}.id must be a string")
            elif call.get("type") != "function":
                problems.append(f"{at}.type is {call.get('type')!r}, expected 'function'")
            if not isinstance(function, dict) or not isinstance(function.get("name"), str):
                problems.append(f"{at}.function.name must be a string")
            elif not isinstance(function.get("arguments"), str):
                problems.append(f"{at}.function.arguments must be JSON text (a string)")
            if isinstance(call, dict) and isinstance(call.get("id"), str):
                calls.add(call["id"])
        if role == "tool":
            call_id = message.get("tool_call_id")
            if not isinstance(call_id, str) or call_id not in calls:
                problems.append(f"{where}.tool_call_id {call_id!r} answers no earlier tool call")
    return problems


def _usage_problems(result: HarnessResult) -> list[str]:
    usage = result.usage
    problems = [
        f"usage.{name} is negative ({value})"
        for name, value in (
            ("input_tokens", usage.input_tokens),
            ("output_tokens", usage.output_tokens),
            ("cached_tokens", usage.cached_tokens),
            ("reasoning_tokens", usage.reasoning_tokens),
            ("cost", usage.cost),
            ("requests", usage.requests),
        )
        if value < 0
    ]
    if usage.cached_tokens > usage.input_tokens:
        problems.append(
            f"usage.cached_tokens ({usage.cached_tokens}) exceeds input_tokens "
            f"({usage.input_tokens}): input_tokens counts every prompt token, cache reads included"
        )
    if usage.reasoning_tokens > usage.output_tokens:
        problems.append(
            f"usage.reasoning_tokens ({usage.reasoning_tokens}) exceeds output_tokens "
            f"({usage.output_tokens}): output_tokens counts reasoning tokens too"
        )
    return problems


def harness_conformance_test(
    harness: str | Callable[[], Any],
    *,
    task: Task | Callable[[], Task] | None = None,
    script: Any = None,
    options: Mapping[str, Any] | None = None,
    sandbox: str | None = None,
    hints: ExecutionHints | Callable[[Task], ExecutionHints] | None = None,
    sandbox_options: Mapping[str, Any] | None = None,
    expect_status: str | None = "completed",
    model: str = "scripted-model",
    fixtures: tuple[str, ...] | list[str] = (),
    check: Callable[[HarnessResult], Any] | None = None,
) -> Callable[..., Any]:
    """A pytest test running :func:`check_harness` on a harness; assign it to a ``test_`` name.

    ``harness`` is a registered name (built with ``options``, as ``-H`` would)
    or a function returning a harness. The test starts agentkit's scripted
    model server with ``script`` (its default answers "ok"), runs ``task``
    (default: a one-line text task; a function is called when the test runs)
    with a context holding the server's URL, ``model``, an API key and a
    fresh rollout id, and checks the rules and ``expect_status``. With
    ``sandbox`` (``"local"``, ``"docker"``...) the run gets a sandbox of that
    kind, made from ``hints`` (or a function of the task giving them) plus
    the harness's ``sandbox_ro_binds``, as the runner would, with
    ``sandbox_options`` (``-S``); without it the harness is on its own (agent
    CLIs open a sandbox themselves). ``fixtures`` are (synchronous) pytest fixtures to
    set up first (the plugin's own: one that finds its program, or skips saying
    how to install it). ``check`` is called with the result for
    harness-specific assertions::

        test_conformance = harness_conformance_test("opencode", script=SCRIPT)
    """
    label = harness if isinstance(harness, str) else getattr(harness, "__name__", "harness")

    async def body(model_server: Any, request: Any, factory: Any) -> None:
        for name in fixtures:
            request.getfixturevalue(name)
        if script is not None:
            model_server.set_script(script)
        made = _harness_of(harness, options)
        the_task = task() if callable(task) else task
        if the_task is None:
            the_task = Task(task_id="conformance:hello", input="Say hello, then stop.")
        context = RunContext(
            model=model,
            base_url=model_server.base_url,
            api_key=CONFORMANCE_API_KEY,
            rollout_id=f"conformance-{uuid.uuid4().hex[:12]}",
        )
        if sandbox is not None:
            import attrs

            base = hints(the_task) if callable(hints) else hints
            base = base or ExecutionHints()
            binds = [str(b) for b in getattr(made, "sandbox_ro_binds", None) or ()]
            base = attrs.evolve(base, ro_binds=[*base.ro_binds, *binds])
            box = await factory(
                sandbox,
                hints=base,
                model_endpoint=model_server.base_url,
                **dict(sandbox_options or {}),
            )
            context = context.evolve(sandbox=box)
        result = await check_harness(made, the_task, context, expect_status=expect_status)
        await _checked(check, result)

    if sandbox is None:

        async def test_harness_conformance(model_server: Any, request: Any) -> None:
            await body(model_server, request, None)

    else:

        async def test_harness_conformance(  # type: ignore[misc]
            model_server: Any, request: Any, sandbox_factory: Any
        ) -> None:
            await body(model_server, request, sandbox_factory)

    test_harness_conformance.__name__ = f"test_{label}_conforms".replace("-", "_")
    test_harness_conformance.__doc__ = f"The {label} harness passes agentkit's conformance checks."
    import pytest

    marked: Callable[..., Any] = pytest.mark.anyio(test_harness_conformance)
    return marked


def _harness_of(harness: str | Callable[[], Any], options: Mapping[str, Any] | None) -> Any:
    """A conformance test's harness: the registered one built with ``options`` (as ``-H``
    would), or the one the function makes."""
    if isinstance(harness, str):
        return registry.resolve_harness(harness, **dict(options or {}))
    return harness()


async def _checked(check: Callable[[Any], Any] | None, value: Any) -> None:
    """Call a conformance test's own ``check`` with ``value`` (awaited when it is async)."""
    if check is not None:
        outcome = check(value)
        if inspect.isawaitable(outcome):
            await outcome


async def check_episode(
    harness: Any,
    task: Task,
    actions: Sequence[str],
    context: RunContext | None = None,
    *,
    taskset: Any = None,
    expect_done: bool = True,
) -> list[StepOutput]:
    """Drive ``harness``'s episode of ``task`` with ``actions`` and check the step protocol.

    The episode is opened with :func:`~agentkit.open_episode` (``taskset``
    goes to a harness that takes one) and stepped with ``actions`` in order
    until a step says ``done``; the outputs are returned. Rules: the harness
    is step-capable and ``episode`` returns an :class:`~agentkit.Episode`
    without starting it (a bare reference ``Task(task_id=...)`` raises
    :class:`~agentkit.TaskReferenceError`; ``step`` before ``init`` raises an
    :class:`~agentkit.AgentkitError`; ``close`` of an episode never started
    is fine); ``init`` returns OpenAI-style chat messages and a metadata
    dict, both JSON; every step returns a :class:`~agentkit.StepOutput` whose
    observations are chat messages, whose reward is a finite number, whose
    ``done`` is a bool and whose metadata is a JSON object; with
    ``expect_done``, a step says done within ``actions`` and a step after it
    raises an :class:`~agentkit.AgentkitError`; ``close`` may be called
    twice; the events reach ``on_event`` numbered ``0..n-1`` in order, with
    the task's id and the context's ``rollout_id``; and the context's API key
    appears in no output or event.
    """
    name = f"harness {type(harness).__name__}"
    if not is_step_capable(harness):
        raise ConformanceError(name, ["is not step-capable: it has no episode() method"])
    problems: list[str] = []
    context = context or RunContext(rollout_id=f"conformance-{uuid.uuid4().hex[:12]}")
    delivered: list[Event] = []

    async def on_event(event: Event) -> None:
        delivered.append(event)

    await _check_episode_preconditions(harness, task, context, taskset, problems)
    episode = open_episode(harness, task, context, on_event, taskset=taskset)
    if not isinstance(episode, Episode):
        raise ConformanceError(name, [f"episode() returned {type(episode).__name__}, not Episode"])
    outputs: list[StepOutput] = []
    try:
        started = await episode.init()
        problems.extend(_init_problems(started))
        for index, action in enumerate(actions):
            out = await episode.step(action)
            problems.extend(_step_problems(index, out))
            if not isinstance(out, StepOutput):
                break
            outputs.append(out)
            if out.done:
                break
        done = bool(outputs) and outputs[-1].done
        if expect_done and not done:
            problems.append(f"no step said done within the {len(actions)} actions given")
        if done:
            try:
                await episode.step(actions[-1] if actions else "")
                problems.append("step() after a step that said done did not raise")
            except AgentkitError:
                pass
            except Exception as exc:
                problems.append(
                    f"step() after done raised {type(exc).__name__}, expected an AgentkitError"
                )
    finally:
        await episode.close()
    try:
        await episode.close()
    except Exception as exc:
        problems.append(f"a second close() raised {type(exc).__name__}: {exc}")
    seqs = [e.seq for e in delivered]
    if seqs != list(range(len(seqs))):
        problems.append(f"events reached on_event numbered {seqs}, expected 0..{len(seqs) - 1}")
    for event in delivered:
        if event.task_id != task.task_id or event.rollout_id != context.rollout_id:
            problems.append(
                f"event {event.seq} has task_id {event.task_id!r} and rollout_id "
                f"{event.rollout_id!r}, expected {task.task_id!r} and {context.rollout_id!r}"
            )
    key = context.resolved_api_key
    if key:
        record = [o.observations for o in outputs] + [o.metadata for o in outputs]
        text = json.dumps(record, default=str) + json.dumps(
            [e.data for e in delivered], default=str
        )
        if key in text:
            problems.append("the API key appears in a step's output or an event")
    if problems:
        raise ConformanceError(name, problems)
    return outputs


async def _check_episode_preconditions(
    harness: Any, task: Task, context: RunContext, taskset: Any, problems: list[str]
) -> None:
    """A bare reference is refused; step() before init() raises; close() needs no init()."""
    try:
        stray = open_episode(harness, Task(task_id=task.task_id), context, taskset=taskset)
        problems.append("episode() of a bare reference task (no input) did not raise")
        await stray.close()
    except TaskReferenceError:
        pass
    except Exception as exc:
        problems.append(
            f"episode() of a bare reference task raised {type(exc).__name__}, "
            "expected TaskReferenceError"
        )
    fresh = open_episode(harness, task, context, taskset=taskset)
    try:
        await fresh.step("")
        problems.append("step() before init() did not raise")
    except AgentkitError:
        pass
    except Exception as exc:
        problems.append(f"step() before init() raised {type(exc).__name__}, not an AgentkitError")
    try:
        await fresh.close()
    except Exception as exc:
        problems.append(f"close() of an episode never started raised {type(exc).__name__}: {exc}")


def _json_problem(value: Any, what: str) -> list[str]:
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError) as exc:
        return [f"{what} is not JSON: {exc}"]
    return []


def _init_problems(started: Any) -> list[str]:
    if not (isinstance(started, tuple) and len(started) == 2):
        return [f"init() returned {type(started).__name__}, expected (chat_history, metadata)"]
    history, metadata = started
    problems: list[str] = []
    if not isinstance(history, list) or not history:
        problems.append("init()'s chat history is not a non-empty list of messages")
    else:
        problems.extend(f"init(): {p}" for p in _message_problems(history))
        problems.extend(_json_problem(history, "init()'s chat history"))
    if not isinstance(metadata, dict):
        problems.append(f"init()'s metadata is {type(metadata).__name__}, not a dict")
    else:
        problems.extend(_json_problem(metadata, "init()'s metadata"))
    return problems


def _step_problems(index: int, out: Any) -> list[str]:
    where = f"step {index + 1}"
    if not isinstance(out, StepOutput):
        return [f"{where} returned {type(out).__name__}, not StepOutput"]
    problems: list[str] = []
    if not isinstance(out.observations, list):
        problems.append(f"{where}: observations is {type(out.observations).__name__}, not a list")
    else:
        for i, message in enumerate(out.observations):
            role = message.get("role") if isinstance(message, dict) else None
            if role not in _ROLES:
                problems.append(f"{where}: observations[{i}] has role {role!r}")
        problems.extend(_json_problem(out.observations, f"{where}'s observations"))
    reward = out.reward
    if (
        isinstance(reward, bool)
        or not isinstance(reward, (int, float))
        or not math.isfinite(reward)
    ):
        problems.append(f"{where}: reward {reward!r} is not a finite number")
    if not isinstance(out.done, bool):
        problems.append(f"{where}: done is {type(out.done).__name__}, not a bool")
    if not isinstance(out.metadata, dict):
        problems.append(f"{where}: metadata is {type(out.metadata).__name__}, not a dict")
    else:
        problems.extend(_json_problem(out.metadata, f"{where}'s metadata"))
    return problems


def episode_conformance_test(
    harness: str | Callable[[], Any],
    *,
    task: Task | Callable[[], Task],
    actions: Sequence[str],
    taskset: Any = None,
    options: Mapping[str, Any] | None = None,
    max_turns: int | None = None,
    expect_reward: float | None = None,
    fixtures: tuple[str, ...] | list[str] = (),
    check: Callable[[list[StepOutput]], Any] | None = None,
) -> Callable[..., Any]:
    """A pytest test running :func:`check_episode`; assign it to a ``test_`` name.

    ``harness`` is a registered name (built with ``options``, as ``-H`` would)
    or a function returning a harness; ``task`` a task or a function returning
    one; ``taskset`` the task's taskset (or a function returning it), given to
    a harness that takes one. The episode gets a context with a fresh rollout
    id (and ``max_turns`` when given) and is stepped with ``actions``; with
    ``expect_reward`` the last step's reward must be it. ``fixtures`` are
    (synchronous) pytest fixtures to set up first; ``check`` is called with
    the step outputs::

        test_episode = episode_conformance_test(
            "fleet-tool-call", task=TASK, actions=SOLUTION, expect_reward=1.0
        )
    """
    label = harness if isinstance(harness, str) else getattr(harness, "__name__", "harness")

    async def test_episode_conformance(request: Any) -> None:
        for fixture in fixtures:
            request.getfixturevalue(fixture)
        made = _harness_of(harness, options)
        the_task = task() if callable(task) else task
        the_taskset = taskset() if callable(taskset) else taskset
        context = RunContext(
            api_key=CONFORMANCE_API_KEY,
            rollout_id=f"conformance-{uuid.uuid4().hex[:12]}",
            limits=Limits(max_turns=max_turns),
        )
        outputs = await check_episode(made, the_task, actions, context, taskset=the_taskset)
        if expect_reward is not None:
            got = outputs[-1].reward if outputs else None
            assert got == expect_reward, (
                f"the episode's last reward is {got}, expected {expect_reward}"
            )
        await _checked(check, outputs)

    test_episode_conformance.__name__ = f"test_{label}_episode_conforms".replace("-", "_")
    test_episode_conformance.__doc__ = (
        f"The {label} harness's episode passes agentkit's step-protocol checks."
    )
    import pytest

    marked: Callable[..., Any] = pytest.mark.anyio(test_episode_conformance)
    return marked
