"""The ``terminal`` harness: a tool-call loop with a shell, for tasks that need a sandbox.

Two ways to drive one loop (:class:`~agentkit_terminal.episode.TerminalEpisode`):

- :meth:`TerminalHarness.run` calls the run's model itself, through
  :mod:`agentkit.chat` (native tool calls by default; token ids recorded as
  the chat harness records them), in the sandbox the run gives; the run's
  rubric grades the rollout afterwards, in that sandbox;
- :meth:`TerminalHarness.episode` is agentkit's step protocol for a caller
  that samples the policy itself (the SkyRL bridge, a Tinker-style loop): the
  episode opens its own sandbox from the task's execution hints and, when it
  ends, grades itself with the task's taskset's rubric.

See ``docs/terminal.md`` for the prompt, the formats and the limits.
"""

from __future__ import annotations

import asyncio
import functools
from typing import Any, ClassVar, Literal

from agentkit import (
    EventCallback,
    EventRecorder,
    ExecutionHints,
    HarnessError,
    HarnessResult,
    OptionError,
    Rubric,
    RunContext,
    Status,
    Task,
    Usage,
    reward,
)
from agentkit.chat import (
    MAX_REPLY_CHARS,
    ChatClient,
    ConnectionCache,
    ModelCallError,
    TokenTrace,
)
from agentkit.sandbox import open_sandbox
from agentkit_terminal.episode import SandboxOpener, TerminalEpisode
from agentkit_terminal.grading import RubricGrader
from agentkit_terminal.limits import (
    DEFAULT_COMMAND_TIMEOUT,
    DEFAULT_MAX_COMMAND_TIMEOUT,
    DEFAULT_MAX_PARSE_ERRORS,
    DEFAULT_MAX_TURNS,
    DEFAULT_OUTPUT_LIMIT,
    TerminalLimits,
)
from agentkit_terminal.prompt import TOOLS, ActionFormat

__all__ = ["TerminalHarness"]

#: How ``run()`` ends for each way an episode can end other than ``submit``:
#: ``(status, error_kind)``. The rollout is scored in every case.
_ENDINGS: dict[str, tuple[Status, str]] = {
    "max_turns": ("timeout", "max_turns"),
    "timeout": ("timeout", "timeout"),
    "parse_errors": ("failed", "parse_errors"),
}


class TerminalHarness:
    """A shell tool and a submit tool in the task's sandbox; step-capable.

    Options (``-H name=value``):

    - ``action_format``: ``auto`` (default: ``run()`` uses native tool calls,
      ``episode()`` the text format), ``tools`` or ``text`` for both.
    - ``max_turns``: the policy's replies per episode (``RunContext.limits.max_turns`` wins).
    - ``command_timeout``: seconds a command runs when it names no ``timeout``;
      ``max_command_timeout``: the most it may ask for.
    - ``output_limit``: bytes of a command's output the policy sees (head and tail).
    - ``max_parse_errors``: calls it could not read before the episode ends (0: no bound).
    - ``timeout``: seconds the whole episode may take (with ``RunContext.limits.timeout_sec``,
      the smaller wins).
    - ``sandbox``, ``sandbox_options``: the sandbox an episode opens for itself
      (``run()`` uses the run's): ``local`` by default, with options as ``-S``.
    - ``model``, ``base_url``: override the run context's model endpoint (``run()``).
    - ``request_timeout``: seconds one model call may take, start to end.
    - ``token_ids``: ask the server for token ids and logprobs (vLLM's
      ``return_token_ids`` and ``logprobs``); token data a server returns is
      recorded either way.
    """

    name: ClassVar[str] = "terminal"
    description: ClassVar[str] = (
        "A tool-call loop with a shell in the task's sandbox (shell and submit tools); "
        "step-capable."
    )
    #: ``run()`` calls the run's model: the preflight checks the endpoint and the key.
    uses_model: ClassVar[bool] = True
    #: The runner gives this harness a sandbox even when the task asks for none.
    requires_sandbox: ClassVar[bool] = True

    def __init__(
        self,
        action_format: Literal["auto", "tools", "text"] = "auto",
        max_turns: int = DEFAULT_MAX_TURNS,
        command_timeout: float = DEFAULT_COMMAND_TIMEOUT,
        max_command_timeout: float = DEFAULT_MAX_COMMAND_TIMEOUT,
        output_limit: int = DEFAULT_OUTPUT_LIMIT,
        max_parse_errors: int = DEFAULT_MAX_PARSE_ERRORS,
        timeout: float | None = None,
        sandbox: str = "local",
        sandbox_options: dict[str, Any] | None = None,
        model: str | None = None,
        base_url: str | None = None,
        request_timeout: float = 600.0,
        token_ids: bool = False,
    ) -> None:
        if action_format not in ("auto", "tools", "text"):
            raise OptionError(
                f"harness 'terminal': action_format must be auto, tools or text, "
                f"got {action_format!r}"
            )
        if not request_timeout > 0:
            raise OptionError(
                f"harness 'terminal': request_timeout must be positive, got {request_timeout}"
            )
        self.action_format = action_format
        self.max_turns = max_turns
        self.command_timeout = command_timeout
        self.max_command_timeout = max_command_timeout
        self.output_limit = output_limit
        self.max_parse_errors = max_parse_errors
        self.timeout = timeout
        self.sandbox = sandbox
        self.sandbox_options = dict(sandbox_options or {})
        self.model = model
        self.base_url = base_url
        self.request_timeout = request_timeout
        self.token_ids = token_ids
        self.limits(None, "text")  # the options are checked now, not at the first rollout
        # the model endpoint's connections, per event loop, shared by every rollout
        self._connections = ConnectionCache()

    def __repr__(self) -> str:
        return f"TerminalHarness(action_format={self.action_format!r}, max_turns={self.max_turns})"

    async def aclose(self) -> None:
        """Close the model endpoint's connections opened on the running event loop."""
        await self._connections.aclose()

    def limits(self, context: RunContext | None, action_format: ActionFormat) -> TerminalLimits:
        """The limits of one episode: the options, with the context's ``max_turns`` and
        ``timeout_sec`` (the smaller of it and the ``timeout`` option)."""
        run_limits = (context or RunContext()).limits
        times = [t for t in (self.timeout, run_limits.timeout_sec) if t is not None]
        return TerminalLimits(
            max_turns=run_limits.max_turns or self.max_turns,
            command_timeout=self.command_timeout,
            max_command_timeout=self.max_command_timeout,
            output_limit=self.output_limit,
            max_parse_errors=self.max_parse_errors or None,
            time_limit=min(times) if times else None,
            action_format=action_format,
        )

    # -- which tasks -------------------------------------------------------------

    def supports(self, task: Task) -> bool:
        """Tasks whose input is a text prompt (the task's instruction)."""
        return self.unsupported_reason(task) is None

    def unsupported_reason(self, task: Task) -> str | None:
        """Why ``task`` cannot be run: its input is not text (None when it can)."""
        if not isinstance(task.input, str):
            return "the task's input is not a text prompt (the terminal harness sends it as one)"
        return None

    # -- the step protocol ---------------------------------------------------------

    def episode(
        self,
        task: Task,
        context: RunContext | None = None,
        on_event: EventCallback | None = None,
        *,
        taskset: Any = None,
    ) -> TerminalEpisode:
        """A fresh, not yet started episode of ``task`` (agentkit's step protocol).

        ``taskset`` is the task's taskset: the sandbox the episode opens at
        ``init()`` is made from its ``execution_hints(task)`` (with the
        ``sandbox`` and ``sandbox_options`` options), and the episode grades
        itself with its rubric when it ends (:mod:`agentkit_terminal.grading`).
        A ``context.sandbox`` is used instead of opening one (the episode
        then does not close it). ``max_turns`` and the time limit come from
        the context's limits, else the options. Raises
        :class:`~agentkit.HarnessError` without a taskset.
        """
        task.require_payload()
        context = context or RunContext()
        reason = self.unsupported_reason(task)
        if reason is not None:
            raise HarnessError(f"harness 'terminal' cannot run {task.task_id}: {reason}")
        if taskset is None:
            raise HarnessError(
                "TerminalHarness.episode() needs the task's taskset (taskset=...): the episode's "
                "sandbox is made from its execution hints and its reward is the taskset's "
                "grading; agentkit.open_episode(harness, task, context, taskset=...) passes it"
            )
        action_format: ActionFormat = "text" if self.action_format == "auto" else self.action_format
        opener = None if context.sandbox is not None else self._opener(task, taskset, context)
        return TerminalEpisode(
            task,
            limits=self.limits(context, action_format),
            sandbox=context.sandbox,
            open_sandbox=opener,
            grader=RubricGrader(taskset, self),
            context=context,
            recorder=EventRecorder(task.task_id, context.rollout_id, on_event),
        )

    def _opener(self, task: Task, taskset: Any, context: RunContext) -> SandboxOpener:
        hints_of = getattr(taskset, "execution_hints", None)
        hints = hints_of(task) if callable(hints_of) else None
        hints = hints if isinstance(hints, ExecutionHints) else ExecutionHints()
        return functools.partial(
            open_sandbox,
            self.sandbox,
            hints,
            rollout_id=context.rollout_id or "terminal-episode",
            **self.sandbox_options,
        )

    # -- run: the same episode with the run's model ------------------------------------

    async def run(
        self,
        task: Task,
        context: RunContext | None = None,
        on_event: EventCallback | None = None,
    ) -> HarnessResult:
        """One rollout in the run's sandbox with the run's model; the run grades it."""
        task.require_payload()
        context = context or RunContext()
        model = self.model or context.model
        recorder = EventRecorder(task.task_id, context.rollout_id, on_event)
        await recorder.emit("harness.start", harness=self.name, model=model)
        if not model:
            return await _failed(
                recorder,
                "the terminal harness needs a model: set RunContext.model (--model) or -H model",
                "harness_setup",
            )
        if context.sandbox is None:
            return await _failed(
                recorder,
                "the terminal harness runs commands in the run's sandbox (RunContext.sandbox), "
                "and none was given: run it through AgentEnv or agentkit run",
                "sandbox_missing",
            )
        action_format: ActionFormat = (
            "tools" if self.action_format == "auto" else self.action_format
        )
        limits = self.limits(context, action_format)
        episode = TerminalEpisode(
            task, limits=limits, sandbox=context.sandbox, context=context, recorder=recorder
        )
        calls = _Calls()
        try:
            await episode.init()
            status, error, error_kind = await self._loop(episode, context, model, calls)
        finally:
            await episode.close()
        if status == "completed" and episode.done_reason in _ENDINGS:
            status, error_kind = _ENDINGS[episode.done_reason]
            error = _ending_message(episode)
        if error is not None:
            await recorder.emit("error", kind=error_kind, message=error)
        await recorder.emit("harness.end", status=status, done_reason=episode.done_reason)
        return episode.result(
            status, error=error, error_kind=error_kind, usage=calls.usage, raw=calls.raw()
        )

    async def _loop(
        self, episode: TerminalEpisode, context: RunContext, model: str, calls: _Calls
    ) -> tuple[Status, str | None, str | None]:
        """Model call, step, until the episode is done; checks the token, cost and
        message limits before each call, and gives each call what is left of the
        episode's time (past it, the episode ends as ``timeout``)."""
        recorder = episode.recorder
        native = episode.limits.action_format == "tools"
        try:
            # the tools are this harness's own (the run's are not sent)
            client = ChatClient.for_run(
                context,
                model=model,
                base_url=self.base_url,
                token_ids=self.token_ids,
                request_timeout=self.request_timeout,
                connections=self._connections,
            )
        except ModelCallError as exc:
            return "failed", str(exc), exc.kind
        while not episode.done:
            hit = context.limit_hit(calls.usage, len(episode.chat_history))
            if hit is not None:
                return "timeout", hit[1], hit[0]
            turn = episode.turns
            await recorder.emit(
                "model.request", turn=turn, model=model, n_messages=len(episode.chat_history)
            )
            try:
                # the call gets what is left of the episode's time
                async with asyncio.timeout(episode.time_left()):
                    response = await client.complete(
                        episode.chat_history, tools=TOOLS if native else None
                    )
            except ModelCallError as exc:  # its message never holds the API key
                if exc.retry_after is not None:
                    calls.retry_after = exc.retry_after
                return "failed", str(exc), exc.kind
            except TimeoutError:
                episode.time_up = True
                await episode.finish("timeout")
                break
            calls.add(response, turn)
            for cut in response.cuts:
                await recorder.emit(
                    "log",
                    level="warning",
                    message=f"the model's {cut['field']} had {cut['chars']} characters; "
                    f"cut to {MAX_REPLY_CHARS} (MAX_REPLY_CHARS)",
                )
            await recorder.emit(
                "model.response",
                turn=turn,
                message=response.message,
                reasoning=response.reasoning,
                finish_reason=response.finish_reason,
                usage={
                    "input_tokens": response.usage.input_tokens,
                    "output_tokens": response.usage.output_tokens,
                    "cached_tokens": response.usage.cached_tokens,
                    "reasoning_tokens": response.usage.reasoning_tokens,
                },
                latency_sec=round(response.duration_s, 6),
            )
            if native:
                await episode.step_message(response.message)
            else:
                await episode.step(response.text)
        return "completed", None, None

    # -- scoring --------------------------------------------------------------------

    def compile_rubric(self, taskset: Any) -> Rubric:
        """The 0-weight ``harness.*`` metrics: turns, tool_calls, tool_errors, parse_errors."""
        return Rubric(
            [
                reward(
                    _metric(key),
                    name=key,
                    weight=0.0,
                    description=description,
                )
                for key, description in (
                    ("turns", "policy replies in the episode"),
                    ("tool_calls", "shell and submit calls run"),
                    ("tool_errors", "commands the sandbox could not run"),
                    ("parse_errors", "replies without a call, and calls that could not be read"),
                )
            ]
        )


class _Calls:
    """What ``run()`` gathers from its model calls: usage, finish reasons, token ids."""

    def __init__(self) -> None:
        self.usage = Usage()
        self.finish_reasons: list[str | None] = []
        self.tokens = TokenTrace()
        self.retry_after: float | None = None
        self.cuts: list[dict[str, Any]] = []

    def add(self, response: Any, turn: int) -> None:
        self.usage = self.usage + response.usage
        self.finish_reasons.append(response.finish_reason)
        self.tokens.add(
            response.prompt_token_ids,
            response.token_ids,
            response.logprobs,
            gap=response.token_gap,
        )
        self.cuts.extend({**cut, "turn": turn} for cut in response.cuts)

    def raw(self) -> dict[str, Any]:
        """``finish_reasons``, ``stop_reason`` (the last, read by the DAPO filter), the
        token fields, ``replies_cut`` and ``retry_after`` when there are any."""
        raw: dict[str, Any] = {
            "finish_reasons": list(self.finish_reasons),
            "stop_reason": self.finish_reasons[-1] if self.finish_reasons else None,
            **self.tokens.to_raw(),
        }
        if self.cuts:
            raw["replies_cut"] = list(self.cuts)
        if self.retry_after is not None:
            raw["retry_after"] = self.retry_after
        return raw


def _ending_message(episode: TerminalEpisode) -> str:
    lim = episode.limits
    if episode.done_reason == "max_turns":
        return f"stopped after max_turns={lim.max_turns} replies without submit"
    if episode.done_reason == "parse_errors":
        return (
            f"stopped after {episode.parse_errors} replies or calls that could not be read "
            f"(max_parse_errors={lim.max_parse_errors})"
        )
    return f"the episode reached its time limit of {lim.time_limit:g} s"


async def _failed(recorder: EventRecorder, error: str, kind: str) -> HarnessResult:
    await recorder.emit("error", kind=kind, message=error)
    await recorder.emit("harness.end", status="failed")
    return HarnessResult(
        status="failed",
        error=error,
        error_kind=kind,
        events=list(recorder.events),
        raw={"harness": "terminal"},
    )


def _metric(key: str) -> Any:
    def metric(result: HarnessResult) -> float:
        value = result.raw.get(key, 0)
        return float(value) if isinstance(value, (int, float)) else 0.0

    metric.__name__ = key
    metric.__qualname__ = f"terminal_metric_{key}"
    return metric
