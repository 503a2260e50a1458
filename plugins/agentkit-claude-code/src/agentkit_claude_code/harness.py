"""The ``claude-code`` harness: the real Claude Code CLI, run non-interactively in a sandbox.

>>> harness = ClaudeCode(model="my-model")
>>> result = await harness.run(task, RunContext(base_url=url))  # doctest: +SKIP
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, ClassVar

from agentkit import HarnessResult, RunContext, Task
from agentkit.programs import (
    ProgramBinary,
    ProgramHarness,
    ProgramRun,
    drive,
    process_path,
    prompt_text,
    stderr_tail,
    timeout_error,
    write_text,
)
from agentkit_claude_code._binary import find_claude
from agentkit_claude_code._settings import (
    BASH_ENV_FILE,
    CONFIG_DIR,
    bash_env_script,
    build_env,
    build_settings,
    render_settings,
)
from agentkit_claude_code._stream import ClaudeStream, classify_error

if TYPE_CHECKING:
    from agentkit import EventCallback, ExecResult, Process, Sandbox

__all__ = ["ClaudeCode"]

#: Where the binary is copied when the sandbox cannot see it at its host path.
STAGED_BINARY = "/tmp/.agentkit-claude-code/claude"


class ClaudeCode(ProgramHarness):
    """Runs the ``claude`` CLI (``claude -p --output-format stream-json``) on a task,
    in its sandbox.

    Options (``-H name=value`` on the command line):

    - ``model``: the model served by the run's endpoint; overrides
      ``RunContext.model``.
    - ``settings``: Claude Code settings (``settings.json`` keys) merged over
      the generated ones.
    - ``append_system_prompt``: text added to the end of Claude Code's system
      prompt (``--append-system-prompt``).
    - ``max_retries``: ``CLAUDE_CODE_MAX_RETRIES``, how often Claude Code
      retries a failed model call (None: its default, 10, with backoff).
    - ``timeout``: seconds before Claude Code's process tree is killed (the
      smaller of this and ``RunContext.limits.timeout_sec`` applies).
    - ``binary``: the claude executable (else ``$AGENTKIT_CLAUDE_CODE_BIN``,
      PATH, or ``node_modules/.bin`` in the working directory or a parent).
    """

    name: ClassVar[str] = "claude-code"
    description: ClassVar[str] = (
        "The real Claude Code CLI (claude -p), run non-interactively in the rollout's sandbox."
    )
    home_dir: ClassVar[str] = CONFIG_DIR
    staged_binary: ClassVar[str] = STAGED_BINARY

    def __init__(
        self,
        model: str | None = None,
        settings: dict[str, Any] | None = None,
        append_system_prompt: str | None = None,
        max_retries: int | None = None,
        timeout: float | None = None,
        binary: str | None = None,
    ) -> None:
        self.check_options(timeout=timeout, max_retries=max_retries, settings=settings)
        self.model = model
        self.settings = dict(settings) if settings else None
        self.append_system_prompt = append_system_prompt
        self.max_retries = max_retries
        self.timeout = timeout
        self.binary = binary

    def find_program(self) -> ProgramBinary:
        """The claude executable this harness runs (raises HarnessError when missing)."""
        return find_claude(self.binary)

    async def run_in(
        self,
        sandbox: Sandbox,
        task: Task,
        context: RunContext,
        model: str,
        binary: ProgramBinary,
        on_event: EventCallback | None,
    ) -> HarnessResult:
        run = self.start_run(sandbox, task, context, on_event)
        prompt = prompt_text(task)
        env = build_env(
            config_dir=process_path(sandbox, CONFIG_DIR),
            model=model,
            base_url=context.base_url,
            api_key=run.api_key,
            max_retries=self.max_retries,
            max_output_tokens=context.limits.max_tokens,
            headers=context.headers,
        )
        session_id = str(uuid.uuid4())
        max_turns = context.limits.max_turns
        await run.recorder.emit(
            "harness.start",
            harness="claude-code",
            model=model,
            claude_code_version=binary.version,
            session_id=session_id,
            timeout_sec=run.timeout,
            max_turns=max_turns,
        )
        if context.sampling_args:
            await run.recorder.emit(
                "log",
                level="warning",
                message="Claude Code does not take sampling arguments: "
                f"{', '.join(sorted(context.sampling_args))} not applied",
            )
        executable = await run.stage(binary)
        settings = build_settings(model=model, extra=self.settings)
        await write_text(sandbox, f"{CONFIG_DIR}/settings.json", render_settings(settings))
        await write_text(sandbox, f"{CONFIG_DIR}/{BASH_ENV_FILE}", bash_env_script())
        argv = [
            executable,
            "-p",
            "--output-format",
            "stream-json",
            "--verbose",
            "--include-partial-messages",
            "--session-id",
            session_id,
        ]
        if max_turns is not None:
            argv += ["--max-turns", str(max_turns)]
        if self.append_system_prompt:
            argv += ["--append-system-prompt", self.append_system_prompt]
        stream = ClaudeStream(run.recorder, prompt, run.redact)
        try:
            remaining = run.time_left()
            proc = await sandbox.start(argv, env=env)
            outcome = await drive(
                proc,
                on_line=_with_limits(stream, proc, context),
                timeout=remaining,
                stdin=prompt.encode("utf-8"),
                recorder=run.recorder,
            )
        finally:
            await run.clean_up()
        return await self._result(stream, outcome, run, binary, model, session_id, max_turns)

    async def _result(
        self,
        stream: ClaudeStream,
        outcome: ExecResult,
        run: ProgramRun,
        binary: ProgramBinary,
        model: str,
        session_id: str,
        max_turns: int | None,
    ) -> HarnessResult:
        recorder, redact = run.recorder, run.redact
        stderr = await stderr_tail(outcome, redact, recorder, source="claude-code.stderr")
        result = stream.result or {}
        error: str | None = None
        error_kind: str | None = None
        reported = False
        if outcome.timed_out:
            status, error_kind = "timeout", "timeout"
            error = timeout_error("Claude Code", run.timeout)
        elif stream.limit_hit is not None:
            status = "timeout"
            error_kind, error = stream.limit_hit
        elif result.get("subtype") == "error_max_turns" or result.get("terminal_reason") == (
            "max_turns"
        ):
            status, error_kind = "timeout", "max_turns"
            error = f"Claude Code stopped after {stream.turns} model calls (max_turns={max_turns})"
        elif result.get("is_error") or (not result and stream.api_error is not None):
            status = "failed"
            api_error = stream.api_error or {}
            texts = [t for t in (result.get("result"), api_error.get("message")) if t]
            errors = [str(e) for e in result.get("errors") or []]
            error = (
                redact(str(texts[0]))
                if texts
                else redact("; ".join(errors))
                or (f"Claude Code failed ({result.get('subtype') or 'error'})")
            )
            http = result.get("api_error_status") or api_error.get("status")
            error_kind = classify_error(http, api_error.get("error"), error)
            await recorder.emit(
                "error", source="claude-code", kind=error_kind, message=error, status_code=http
            )
            reported = True
        elif outcome.exit_code != 0:
            status, error_kind = "failed", "agent_error"
            lines = [line for line in stderr.splitlines() if line.strip()]
            error = (
                f"Claude Code exited with status {outcome.exit_code}: "
                f"{lines[-1].strip() if lines else 'no error message'}"
            )
        else:
            status = "completed"
        if status != "completed" and not reported:
            await recorder.emit("error", source="harness", kind=error_kind, message=error)
        usage = stream.usage
        await recorder.emit(
            "harness.end",
            status=status,
            exit_code=outcome.exit_code,
            turns=stream.turns,
            tool_calls=stream.tool_calls,
            usage=usage.to_json(),
        )
        return HarnessResult(
            status=status,  # type: ignore[arg-type]
            output=stream.output,
            messages=stream.messages,
            error=error,
            error_kind=error_kind,
            usage=usage,
            events=list(recorder.events),
            raw={
                "claude_code_version": stream.version or binary.version,
                "session_id": stream.session_id or session_id,
                "model": model,
                "exit_code": outcome.exit_code,
                "binary": str(binary.path),
                "binary_staged": run.staged,
                "turns": stream.turns,
                "tool_calls": stream.tool_calls,
                "tool_errors": stream.tool_errors,
                "retries": stream.retries,
                "num_turns": result.get("num_turns"),
                "subtype": result.get("subtype"),
                "terminal_reason": result.get("terminal_reason"),
                "stop_reason": result.get("stop_reason"),
                "duration_api_ms": result.get("duration_api_ms"),
            },
        )


def _with_limits(
    stream: ClaudeStream, proc: Process, context: RunContext
) -> Callable[[str], Awaitable[None]]:
    """``stream.feed``, then Claude Code stopped when a token, cost or message limit of
    the run is reached (``max_turns`` is Claude Code's own ``--max-turns``).

    The limits are checked after every line, so a model call's input counts as soon
    as it begins (``message_start``); lines after the stop are not read, so the
    usage is what had been counted when the limit was reached."""
    limits = context.limits
    if (limits.token_limit, limits.cost_limit, limits.message_limit) == (None, None, None):
        return stream.feed

    async def on_line(line: str) -> None:
        if stream.limit_hit is not None:
            return  # stopped: what was already on its way is not counted
        try:
            await stream.feed(line)
        finally:
            messages = len(stream.messages) if limits.message_limit is not None else None
            hit = context.limit_hit(stream.usage, messages)
            if hit is not None:
                stream.limit_hit = hit
                await proc.kill()

    return on_line
