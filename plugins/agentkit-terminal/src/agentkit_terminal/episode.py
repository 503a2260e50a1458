"""One terminal episode: the policy's tool calls run in the task's sandbox, one reply at a time.

:class:`TerminalEpisode` is an :class:`agentkit.Episode`: ``init()``, then
``step(action)`` with each of the policy's replies until a step says
``done``, then ``close()``. ``TerminalHarness.run`` drives the same episode
with the run's model (through :meth:`TerminalEpisode.step_message`, for
native tool calls); a training loop drives it with its own sampler::

    episode = harness.episode(task, context, taskset=taskset)
    chat_history, metadata = await episode.init()
    try:
        while not episode.done:
            out = await episode.step(await my_policy(episode.chat_history))
    finally:
        await episode.close()

**State.** Everything an episode is, between two steps, is in these
attributes (a copy of them, with a copy of the sandbox's files, is a copy of
the episode): ``chat_history`` (the messages so far: system prompt, task,
then each reply and its observations), ``sandbox`` (where the commands ran;
``owns_sandbox`` says whether the episode opened it and closes it),
``turns`` (replies stepped), the counters ``tool_calls``, ``commands``,
``tool_errors`` and ``parse_errors``, ``started_at`` (the monotonic clock at
``init()``, from which the time limit counts), ``submitted``, ``time_up``,
``done``, ``done_reason``, and after the end ``reward``, ``grading`` and
``failure``.

**Forking.** :meth:`TerminalEpisode.fork` copies exactly that: ``n`` child
episodes with the chat history, the turn count, the counters and the clock
of this one, each in its own fork of the sandbox
(:func:`agentkit.sandbox.fork_sandboxes`: the local sandbox pauses and copies
once for all ``n``). See ``docs/branching.md``.
"""

from __future__ import annotations

import contextlib
import copy
import itertools
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any, Literal

from agentkit import (
    EpisodeForkError,
    EventRecorder,
    HarnessError,
    HarnessResult,
    RunContext,
    Sandbox,
    Status,
    StepOutput,
    Task,
    Usage,
)
from agentkit.sandbox import SandboxError, fork_sandboxes
from agentkit_terminal.grading import RubricGrader
from agentkit_terminal.limits import TerminalLimits
from agentkit_terminal.output import CommandResult, cap_output, result_text
from agentkit_terminal.parsing import CallAttempt, ToolCall, parse_message, parse_text
from agentkit_terminal.prompt import (
    NO_CALL_TEXT,
    NO_CALL_TOOLS,
    SHELL,
    SUBMITTED_TEXT,
    TOOLS,
    system_prompt,
)

__all__ = ["DoneReason", "SandboxOpener", "TerminalEpisode"]

#: Why an episode ended.
DoneReason = Literal["submitted", "max_turns", "parse_errors", "timeout", "stopped"]

#: Opens the sandbox an episode owns: an async context manager giving a started sandbox.
SandboxOpener = Callable[[], AbstractAsyncContextManager[Sandbox]]

#: The result of a call that follows ``submit`` in the same reply.
NOT_RUN_SUBMITTED = "Not run: the task was already submitted."
#: The result of a command when the episode's time is up.
NOT_RUN_TIME = "Not run: the episode's time limit is reached."


class TerminalEpisode:
    """One rollout of a task in a sandbox, advanced by the policy's replies.

    Build it with :meth:`TerminalHarness.episode
    <agentkit_terminal.harness.TerminalHarness.episode>`, which picks the
    sandbox, the limits and the grading. ``sandbox`` is a started sandbox
    the episode borrows (never closed by it); without one, ``open_sandbox``
    opens the sandbox the episode owns, at ``init()``, closed at
    ``close()``. ``grader`` scores the final state when the episode ends
    (None: no grading, as under ``run()``, where the runner scores).
    """

    #: The harness, as :func:`agentkit.fork_episode` names it in errors.
    harness_name = "terminal"

    def __init__(
        self,
        task: Task,
        *,
        limits: TerminalLimits | None = None,
        sandbox: Sandbox | None = None,
        open_sandbox: SandboxOpener | None = None,
        grader: RubricGrader | None = None,
        context: RunContext | None = None,
        recorder: EventRecorder | None = None,
    ) -> None:
        task.require_payload()
        if sandbox is None and open_sandbox is None:
            raise HarnessError("TerminalEpisode needs a sandbox or a way to open one")
        self.task = task
        self.limits = limits or TerminalLimits()
        self.context = context or RunContext()
        self.recorder = recorder or EventRecorder(task.task_id, self.context.rollout_id)
        self.grader = grader
        self._open_sandbox = open_sandbox
        self.sandbox: Sandbox | None = sandbox
        self.owns_sandbox = sandbox is None
        self.workdir = ""
        self.chat_history: list[dict[str, Any]] = []
        self.turns = 0
        self.tool_calls = 0
        self.commands = 0
        self.tool_errors = 0
        self.parse_errors = 0
        self.started_at: float | None = None
        self.submitted = False
        #: The time limit was reached (a command killed by it, or a step after it).
        self.time_up = False
        self.done = False
        self.done_reason: DoneReason | None = None
        self.reward = 0.0
        #: The rubric's scores once graded: ``rewards``, ``total``, ``errors``.
        self.grading: dict[str, Any] | None = None
        #: Why grading could not give a reward (None: it did, or there was none to give).
        self.failure: str | None = None
        self._stack = contextlib.AsyncExitStack()
        self._started = False
        self._closed = False
        self._branches = itertools.count()

    # -- lifecycle -------------------------------------------------------------

    async def init(self) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        """Open the sandbox (when the episode owns one) and build ``[system, user]``.

        Returns ``(chat_history, metadata)``; metadata: ``task_id``,
        ``workdir``, ``sandbox`` (its kind), ``action_format``, ``tools``
        (OpenAI function definitions, for a caller that samples with native
        tools), ``max_turns``, ``time_limit``. A sandbox that fails to start
        raises (the episode is closed then).
        """
        if self._started:
            raise HarnessError("TerminalEpisode.init() was already called")
        self._started = True
        if self.sandbox is None:
            assert self._open_sandbox is not None
            try:
                self.sandbox = await self._stack.enter_async_context(self._open_sandbox())
            except BaseException:
                await self.close()
                raise
        self.workdir = str(self.sandbox.workdir)
        self.started_at = time.monotonic()
        lim = self.limits
        prompt = system_prompt(
            lim.action_format,
            workdir=self.workdir,
            max_turns=lim.max_turns,
            command_timeout=lim.command_timeout,
            max_command_timeout=lim.max_command_timeout,
            output_limit=lim.output_limit,
        )
        self.chat_history = [
            {"role": "system", "content": prompt},
            {"role": "user", "content": str(self.task.input)},
        ]
        await self.recorder.emit(
            "terminal.start",
            sandbox=self.sandbox.name,
            workdir=self.workdir,
            action_format=lim.action_format,
            max_turns=lim.max_turns,
            time_limit=lim.time_limit,
            graded=self.grader is not None,
        )
        return list(self.chat_history), self.metadata()

    def metadata(self) -> dict[str, Any]:
        """What ``init()`` returns beside the chat history."""
        return {
            "task_id": self.task.task_id,
            "workdir": self.workdir,
            "sandbox": getattr(self.sandbox, "name", None),
            "action_format": self.limits.action_format,
            "tools": [dict(t) for t in TOOLS],
            "max_turns": self.limits.max_turns,
            "time_limit": self.limits.time_limit,
        }

    async def close(self) -> None:
        """Close the sandbox the episode opened (idempotent; always call it)."""
        if self._closed:
            return
        self._closed = True
        try:
            await self._stack.aclose()
        finally:
            await self.recorder.emit("terminal.closed", owned_sandbox=self.owns_sandbox)

    # -- forking -----------------------------------------------------------------

    async def fork(
        self, n: int, *, rollout_ids: Sequence[str] | None = None
    ) -> list[TerminalEpisode]:
        """``n`` episodes continuing from this one now (:class:`agentkit.ForkableEpisode`).

        Each child has a copy of the chat history, the turn count, the
        counters (``tool_calls``, ``commands``, ``tool_errors``,
        ``parse_errors``) and ``started_at`` (the time limit keeps counting
        from this episode's ``init()``), the same limits and grading, and its
        own fork of the sandbox (its files as they are now; no process
        carries over), which it owns and closes. Its rollout id is
        ``rollout_ids[i]``, else this one's with ``.b<i>`` (numbered on
        across several forks). This episode goes on unchanged. Children and
        parent are independent: what one runs, none of the others sees, and
        closing one closes only its own sandbox.

        Raises :class:`~agentkit.EpisodeForkError` before ``init()``, after
        the episode ended or closed, or when the sandbox cannot fork (the
        ``host`` sandbox, a compose project); nothing is left behind then.
        """
        rid = self.context.rollout_id or "terminal-episode"
        if not self._started or self._closed or self.sandbox is None:
            state = "closed" if self._closed else "not started (call init() first)"
            raise EpisodeForkError(f"terminal episode ({rid}) cannot fork: it is {state}")
        if self.done:
            raise EpisodeForkError(
                f"terminal episode ({rid}) cannot fork: it is over ({self.done_reason}); "
                "fork before the step that ends it"
            )
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise EpisodeForkError(f"terminal episode ({rid}): n must be a positive integer")
        ids = (
            list(rollout_ids)
            if rollout_ids is not None
            else [f"{rid}.b{next(self._branches)}" for _ in range(n)]
        )
        if len(ids) != n:
            raise EpisodeForkError(f"terminal episode ({rid}): {len(ids)} ids for {n} children")
        try:
            sandboxes = await fork_sandboxes(self.sandbox, n, rollout_ids=ids)
        except SandboxError as exc:
            raise EpisodeForkError(f"terminal episode ({rid}) cannot fork: {exc}") from None
        children = [self._child(sb, child_id) for sb, child_id in zip(sandboxes, ids, strict=True)]
        await self.recorder.emit("terminal.fork", turn=self.turns, children=ids)
        for child in children:
            await child.recorder.emit("terminal.forked", parent=rid, turn=self.turns)
        return children

    def _child(self, sandbox: Sandbox, rollout_id: str) -> TerminalEpisode:
        """A started episode with this one's state, in ``sandbox`` (which it then owns)."""
        child = TerminalEpisode(
            self.task,
            limits=self.limits,
            sandbox=sandbox,
            grader=self.grader,
            context=self.context.evolve(rollout_id=rollout_id, sandbox=sandbox),
            recorder=EventRecorder(self.task.task_id, rollout_id, self.recorder.on_event),
        )
        child.owns_sandbox = True
        child._stack.push_async_callback(sandbox.close)
        child._started = True
        child.workdir = self.workdir
        child.chat_history = copy.deepcopy(self.chat_history)
        child.turns = self.turns
        child.tool_calls = self.tool_calls
        child.commands = self.commands
        child.tool_errors = self.tool_errors
        child.parse_errors = self.parse_errors
        child.started_at = self.started_at
        child.time_up = self.time_up
        return child

    # -- stepping ----------------------------------------------------------------

    async def step(self, action: str) -> StepOutput:
        """Apply a reply written as text: its ``<tool_call>`` blocks run in order.

        The observation is one user message: each call's result in
        ``<tool_response>`` tags, or the format reminder when the reply has no
        call.
        """
        self._check_steppable()
        step_start = time.monotonic()
        self.turns += 1
        self.chat_history.append({"role": "assistant", "content": action})
        attempts = parse_text(action)
        records, texts = await self._run(attempts)
        if attempts:
            body = "\n".join(f"<tool_response>\n{t}\n</tool_response>" for t in texts)
        else:
            body = NO_CALL_TEXT
        observations = [{"role": "user", "content": body}]
        return await self._after(observations, records, not attempts, step_start)

    async def step_message(self, message: Mapping[str, Any]) -> StepOutput:
        """Apply a reply given as an assistant message with native ``tool_calls``.

        The message is recorded as it came (a call without an id gets
        ``call_<turn>_<n>``); the observations are one ``tool`` message per
        call, or a user message with the reminder when it has none.
        """
        self._check_steppable()
        step_start = time.monotonic()
        self.turns += 1
        recorded = _with_call_ids(message, self.turns)
        self.chat_history.append(recorded)
        attempts = parse_message(recorded)
        records, texts = await self._run(attempts)
        if attempts:
            observations = [
                {"role": "tool", "tool_call_id": a.id, "content": text}
                for a, text in zip(attempts, texts, strict=True)
            ]
        else:
            observations = [{"role": "user", "content": NO_CALL_TOOLS}]
        return await self._after(observations, records, not attempts, step_start)

    def _check_steppable(self) -> None:
        if not self._started or self._closed or self.sandbox is None:
            raise HarnessError("step() needs init() first and must not follow close()")
        if self.done:
            raise HarnessError(f"the episode is over ({self.done_reason}); start a new one")

    async def _after(
        self,
        observations: list[dict[str, Any]],
        records: list[dict[str, Any]],
        no_call: bool,
        step_start: float,
    ) -> StepOutput:
        """Append the observations, end the episode when a bound is reached, and report."""
        if no_call:
            self.parse_errors += 1
            await self.recorder.emit("terminal.parse_error", turn=self.turns, error="no tool call")
        self.chat_history.extend(observations)
        reason = self._end_reason()
        if reason is not None:
            await self._finish(reason)
        metadata: dict[str, Any] = {
            "turn": self.turns,
            "calls": records,
            "no_call": no_call,
            "done_reason": self.done_reason,
            "elapsed_s": round(self.elapsed(), 6),
            "step_time": round(time.monotonic() - step_start, 6),
        }
        if self.done:
            metadata["grading"] = self.grading
        return StepOutput(
            observations=observations,
            reward=self.reward if self.done else 0.0,
            done=self.done,
            metadata=metadata,
        )

    def _end_reason(self) -> DoneReason | None:
        lim = self.limits
        if self.submitted:
            return "submitted"
        if lim.max_parse_errors is not None and self.parse_errors >= lim.max_parse_errors:
            return "parse_errors"
        if self.time_up or self.time_left() == 0.0:
            self.time_up = True
            return "timeout"
        if self.turns >= lim.max_turns:
            return "max_turns"
        return None

    def elapsed(self) -> float:
        """Seconds since ``init()`` (0 before it)."""
        return 0.0 if self.started_at is None else time.monotonic() - self.started_at

    def time_left(self) -> float | None:
        """Seconds left of the time limit (None: no limit; never negative)."""
        if self.limits.time_limit is None:
            return None
        return max(0.0, self.limits.time_limit - self.elapsed())

    async def _run(self, attempts: list[CallAttempt]) -> tuple[list[dict[str, Any]], list[str]]:
        """Run the reply's calls in order; each one's record and the text the policy sees."""
        records: list[dict[str, Any]] = []
        texts: list[str] = []
        for attempt in attempts:
            record: dict[str, Any] = {
                "call": attempt.call.to_json() if attempt.call is not None else None,
                "error": attempt.error,
                "result": None,
            }
            if attempt.id is not None:
                record["id"] = attempt.id
            call = attempt.call
            if self.submitted:
                text = NOT_RUN_SUBMITTED
                record["not_run"] = "submitted"
            elif call is None:
                self.parse_errors += 1
                text = f"Error: {attempt.error}"
                await self.recorder.emit(
                    "terminal.parse_error", turn=self.turns, error=attempt.error
                )
            elif call.name == SHELL:
                text = await self._shell(call, record)
            else:
                self.tool_calls += 1
                self.submitted = True
                text = SUBMITTED_TEXT
                await self.recorder.emit("tool.call", turn=self.turns, **call.to_json())
            records.append(record)
            texts.append(text)
        return records, texts

    async def _shell(self, call: ToolCall, record: dict[str, Any]) -> str:
        """Run one command in the working directory; the text the policy sees."""
        assert self.sandbox is not None and call.command is not None
        left = self.time_left()
        if self.time_up or left == 0.0:
            self.time_up = True
            record["not_run"] = "timeout"
            return NOT_RUN_TIME
        self.tool_calls += 1
        timeout = self.limits.command_seconds(call.timeout, left)
        await self.recorder.emit(
            "tool.call", turn=self.turns, **call.to_json(), effective_timeout=timeout
        )
        started = time.monotonic()
        bounded_by_time = left is not None and timeout >= left
        try:
            # stderr joins stdout, so the policy reads them in the order they came
            res = await self.sandbox.exec(
                "exec 2>&1\n" + call.command, cwd=self.workdir, timeout=timeout
            )
        except Exception as exc:  # the sandbox could not run it: the episode goes on
            self.tool_errors += 1
            error = f"the command could not be run: {type(exc).__name__}: {exc}"
            record["error"] = error
            await self.recorder.emit(
                "tool.result", turn=self.turns, name=SHELL, is_error=True, content=error
            )
            return f"Error: {error}"
        self.commands += 1
        if res.timed_out and bounded_by_time:
            self.time_up = True  # it ran until the episode's time was up
        output, omitted = cap_output(res.stdout + res.stderr, self.limits.output_limit)
        result = CommandResult(
            exit_code=None if res.timed_out else res.exit_code,
            output=output,
            omitted_bytes=omitted,
            timed_out=res.timed_out,
            timeout=timeout,
            duration_s=time.monotonic() - started,
        )
        record["result"] = result.to_json()
        await self.recorder.emit(
            "tool.result",
            turn=self.turns,
            name=SHELL,
            is_error=res.timed_out,
            **result.to_json(),
            content=output,
        )
        return result_text(result)

    # -- the end --------------------------------------------------------------------

    async def finish(self, reason: DoneReason = "stopped") -> float:
        """End the episode now (a caller that stops early) and grade it; returns the reward."""
        if not self._started or self._closed or self.sandbox is None:
            raise HarnessError("finish() needs init() first and must not follow close()")
        if not self.done:
            await self._finish(reason)
        return self.reward

    async def _finish(self, reason: DoneReason) -> None:
        self.done = True
        self.done_reason = reason
        await self.recorder.emit("terminal.end", done_reason=reason, turns=self.turns)
        if self.grader is None:
            return
        assert self.sandbox is not None
        await self.recorder.emit("terminal.grade.start", taskset=self.grader.taskset_id)
        context = self.context.evolve(sandbox=self.sandbox)
        try:
            score = await self.grader.grade(self.task, self.result(), self.sandbox, context)
        except Exception as exc:  # the rubric itself broke: no reward to give
            self.failure = f"grading failed: {type(exc).__name__}: {exc}"
            self.grading = {"rewards": {}, "total": None, "errors": [{"error": self.failure}]}
        else:
            self.grading = {
                "rewards": dict(score.rewards),
                "total": score.total,
                "errors": list(score.errors),
            }
            if score.total is None:
                failed = "; ".join(f"{e.get('metric')}: {e.get('error')}" for e in score.errors)
                self.failure = f"grading gave no reward: {failed}"
            else:
                self.reward = float(score.total)
        await self.recorder.emit(
            "terminal.grade.end", reward=self.reward, failure=self.failure, **self.grading
        )

    def counters(self) -> dict[str, Any]:
        """The episode's numbers, as ``HarnessResult.raw`` records them."""
        return {
            "done_reason": self.done_reason,
            "turns": self.turns,
            "tool_calls": self.tool_calls,
            "commands": self.commands,
            "tool_errors": self.tool_errors,
            "parse_errors": self.parse_errors,
            "elapsed_sec": round(self.elapsed(), 3),
            "action_format": self.limits.action_format,
            "sandbox": getattr(self.sandbox, "name", None),
            "workdir": self.workdir,
        }

    def result(
        self,
        status: Status = "completed",
        *,
        error: str | None = None,
        error_kind: str | None = None,
        usage: Usage | None = None,
        raw: Mapping[str, Any] | None = None,
    ) -> HarnessResult:
        """The episode as a :class:`~agentkit.HarnessResult` (what grading and ``run()`` read).

        ``output`` is the last reply with text (None when none had any);
        ``messages`` the chat history; ``raw`` the :meth:`counters`, the
        reward and grading once graded, and ``raw`` given here.
        """
        texts = [_text(m) for m in self.chat_history if m.get("role") == "assistant"]
        output = next((t for t in reversed(texts) if t.strip()), None)
        record: dict[str, Any] = {"harness": "terminal", **self.counters()}
        if self.grading is not None:
            record.update(reward=self.reward, grading=self.grading)
        record.update(raw or {})
        return HarnessResult(
            status=status,
            output=output,
            messages=[dict(m) for m in self.chat_history],
            error=error,
            error_kind=error_kind,
            usage=usage or Usage(),
            events=list(self.recorder.events),
            raw=record,
        )


def _text(message: Mapping[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return content if isinstance(content, str) else ""


def _with_call_ids(message: Mapping[str, Any], turn: int) -> dict[str, Any]:
    """``message`` as the transcript keeps it: every tool call with an id."""
    recorded = dict(message)
    recorded.setdefault("role", "assistant")
    calls = recorded.get("tool_calls")
    if isinstance(calls, list):
        fixed = []
        for index, call in enumerate(calls):
            if isinstance(call, dict) and not (isinstance(call.get("id"), str) and call["id"]):
                call = {**call, "id": f"call_{turn}_{index}"}
            fixed.append(call)
        recorded["tool_calls"] = fixed
    return recorded
