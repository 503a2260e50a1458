"""The ``codex`` harness: the real Codex CLI, run non-interactively in a sandbox.

>>> result = await Codex(model="my-model").run(task, RunContext(base_url=url))  # doctest: +SKIP
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import attrs

from agentkit import EventRecorder, HarnessResult, RunContext, Task
from agentkit.programs import (
    ProgramBinary,
    ProgramHarness,
    ProgramRun,
    drive,
    kill_shielded,
    process_path,
    prompt_text,
    stderr_tail,
    timeout_error,
    write_text,
)
from agentkit_codex._binary import find_codex
from agentkit_codex._config import (
    CODEX_HOME,
    SAMPLING_KEYS,
    build_config,
    build_env,
    render_config,
)
from agentkit_codex._rollout import Rollout
from agentkit_codex._stream import CodexStream, classify_error, clean_error

if TYPE_CHECKING:
    from agentkit import EventCallback, ExecResult, Process, Sandbox

__all__ = ["Codex"]

#: Where the binary is copied when the sandbox cannot see it at its host path.
STAGED_BINARY = "/tmp/.agentkit-codex/codex"
#: Follows codex's session file from inside the sandbox (for the run's limits):
#: waits for ``rollout-*<thread id>.jsonl`` under ``$1``, then prints it as it grows.
_FOLLOW = (
    'while :; do f=$(find "$1" -name "rollout-*$2.jsonl" 2>/dev/null | head -n 1); '
    'if [ -n "$f" ]; then exec tail -n +1 -F -s 0.1 "$f"; fi; sleep 0.1; done'
)


class Codex(ProgramHarness):
    """Runs the ``codex`` CLI (``codex exec --json``) on a task, in its sandbox.

    Options (``-H name=value`` on the command line):

    - ``model``: the model served by the run's endpoint; overrides
      ``RunContext.model``.
    - ``config``: codex configuration (``config.toml`` keys) merged over the
      generated one; unknown keys are errors (``--strict-config``).
    - ``max_retries``: codex's ``request_max_retries`` and
      ``stream_max_retries`` for the endpoint (None: codex's defaults).
    - ``timeout``: seconds before codex's process tree is killed (the smaller
      of this and ``RunContext.limits.timeout_sec`` applies).
    - ``binary``: the codex executable (else ``$AGENTKIT_CODEX_BIN``, PATH,
      or ``node_modules/.bin`` in the working directory or a parent).
    """

    name: ClassVar[str] = "codex"
    description: ClassVar[str] = (
        "The real Codex CLI (codex exec), run non-interactively in the rollout's sandbox."
    )
    home_dir: ClassVar[str] = CODEX_HOME
    staged_binary: ClassVar[str] = STAGED_BINARY

    def __init__(
        self,
        model: str | None = None,
        config: dict[str, Any] | None = None,
        max_retries: int | None = None,
        timeout: float | None = None,
        binary: str | None = None,
    ) -> None:
        self.check_options(timeout=timeout, max_retries=max_retries, config=config)
        self.model = model
        self.config = dict(config) if config else None
        self.max_retries = max_retries
        self.timeout = timeout
        self.binary = binary

    def find_program(self) -> ProgramBinary:
        """The codex executable this harness runs (raises HarnessError when missing)."""
        return find_codex(self.binary)

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
        config = build_config(
            model=model,
            base_url=context.base_url,
            has_api_key=bool(run.api_key),
            max_retries=self.max_retries,
            sampling_args=context.sampling_args,
            extra=self.config,
            headers=context.headers,
        )
        env = build_env(
            codex_home=process_path(sandbox, CODEX_HOME),
            api_key=run.api_key,
            has_endpoint=context.base_url is not None,
            headers=context.headers,
        )
        max_turns = context.limits.max_turns
        await run.recorder.emit(
            "harness.start",
            harness="codex",
            model=model,
            codex_version=binary.version,
            timeout_sec=run.timeout,
            max_turns=max_turns,
        )
        await _note_ignored(run.recorder, context)
        executable = await run.stage(binary)
        await write_text(sandbox, f"{CODEX_HOME}/config.toml", render_config(config))
        argv = [executable, "exec", "--json", "--strict-config", "--skip-git-repo-check", "-"]
        stream = CodexStream(run.recorder, run.redact)
        limit: _LimitWatcher | None = None
        try:
            remaining = run.time_left()
            proc = await sandbox.start(argv, env=env)
            if _has_limits(context):
                limit = _LimitWatcher(sandbox, proc, context, prompt_text(task))
                stream.on_thread = limit.start
            outcome = await drive(
                proc,
                on_line=stream.feed,
                timeout=remaining,
                stdin=prompt_text(task).encode("utf-8"),
                recorder=run.recorder,
            )
            # read before the key is masked in codex's files: the transcript says ***
            rollout, rollout_file = await _read_rollout(sandbox, stream.session_id, run.redact)
        finally:
            if limit is not None:
                await limit.stop()
            await run.clean_up()
        return await self._result(
            task, stream, rollout, rollout_file, outcome, limit, run, binary, model
        )

    async def _result(
        self,
        task: Task,
        stream: CodexStream,
        rollout: Rollout,
        rollout_file: str | None,
        outcome: ExecResult,
        limit: _LimitWatcher | None,
        run: ProgramRun,
        binary: ProgramBinary,
        model: str,
    ) -> HarnessResult:
        recorder, redact = run.recorder, run.redact
        stderr = await stderr_tail(outcome, redact, recorder, source="codex.stderr")
        has_rollout = rollout.lines > 0
        cut = 0
        if limit is not None and limit.hit is not None and limit.hit[0] == "max_turns":
            cut = rollout.cut_after(limit.max_turns or 0)
        turns = len(rollout.all_calls()) if has_rollout else 0
        error: str | None = None
        error_kind: str | None = None
        if outcome.timed_out:
            status, error_kind = "timeout", "timeout"
            error = timeout_error("codex", run.timeout)
        elif limit is not None and limit.hit is not None:
            status = "timeout"
            error_kind, error = limit.hit
        elif stream.failure is not None:
            status = "failed"
            error = clean_error(stream.failure)
            error_kind = classify_error(stream.failure)
        elif outcome.exit_code != 0:
            status, error_kind = "failed", "agent_error"
            detail = clean_error(stream.errors[-1]) if stream.errors else _stderr_summary(stderr)
            error = f"codex exited with status {outcome.exit_code}: {detail}"
        else:
            status = "completed"
        if status != "completed" and stream.failure is None:
            await recorder.emit("error", source="harness", kind=error_kind, message=error)
        usage = rollout.usage if rollout.calls else (stream.usage or rollout.usage)
        if usage.requests == 0 and turns:
            usage = attrs.evolve(usage, requests=turns)
        tool_calls = rollout.tool_calls if has_rollout else stream.tool_calls
        await recorder.emit(
            "harness.end",
            status=status,
            exit_code=outcome.exit_code,
            turns=turns,
            tool_calls=tool_calls,
            usage=usage.to_json(),
        )
        messages = (
            rollout.messages(prompt_text(task))
            if has_rollout
            else _stream_messages(stream, redact(prompt_text(task)))
        )
        return HarnessResult(
            status=status,  # type: ignore[arg-type]
            output=stream.output if stream.output is not None else rollout.output,
            messages=messages,
            error=error,
            error_kind=error_kind,
            usage=usage,
            events=list(recorder.events),
            raw={
                "codex_version": binary.version,
                "session_id": stream.session_id or rollout.session_id,
                "model": model,
                "exit_code": outcome.exit_code,
                "binary": str(binary.path),
                "binary_staged": run.staged,
                "rollout_file": rollout_file,
                "turns": turns,
                "tool_calls": tool_calls,
                "tool_errors": stream.tool_errors,
                "retries": stream.retries,
                "calls_after_limit": cut,
            },
        )


def _has_limits(context: RunContext) -> bool:
    limits = context.limits
    return any(
        v is not None
        for v in (limits.max_turns, limits.token_limit, limits.cost_limit, limits.message_limit)
    )


class _LimitWatcher:
    """Stops codex when a limit of the run is reached, reading its session file as
    it grows (``tail -F`` inside the sandbox): codex itself has none of them.

    ``max_turns``: as model call ``max_turns + 1`` is about to begin; the token,
    cost and message limits: as soon as the finished calls reach them.
    """

    def __init__(self, sandbox: Sandbox, proc: Process, context: RunContext, prompt: str) -> None:
        self.sandbox = sandbox
        self.proc = proc
        self.context = context
        self.prompt = prompt
        self.max_turns = context.limits.max_turns
        #: ``(error_kind, message)`` of the limit that stopped codex.
        self.hit: tuple[str, str] | None = None
        self._follower: Process | None = None
        self._task: asyncio.Future[None] | None = None

    async def start(self, thread_id: str) -> None:
        if self._follower is not None:
            return
        self._follower = await self.sandbox.start(
            ["/bin/sh", "-c", _FOLLOW, "sh", f"{CODEX_HOME}/sessions", thread_id]
        )
        self._task = asyncio.ensure_future(self._read(self._follower))

    def _check(self, rollout: Rollout) -> tuple[str, str] | None:
        if self.max_turns is not None and rollout.turn_limit_reached(self.max_turns):
            return (
                "max_turns",
                f"stopped codex as it began model call {self.max_turns + 1} "
                f"(max_turns={self.max_turns})",
            )
        limits = self.context.limits
        if (limits.token_limit, limits.cost_limit, limits.message_limit) == (None, None, None):
            return None
        messages = len(rollout.messages(self.prompt)) if limits.message_limit is not None else None
        return self.context.limit_hit(rollout.usage, messages)

    async def _read(self, follower: Process) -> None:
        rollout = Rollout()
        async for line in follower.stdout_lines():
            rollout.feed(line)
            hit = self._check(rollout)
            if hit is not None and self.hit is None:
                self.hit = hit
                await self.proc.kill()
                return

    async def stop(self) -> None:
        """Stop following (even while the run is being cancelled)."""
        import anyio

        with anyio.CancelScope(shield=True):
            if self._task is not None:
                self._task.cancel()
                with contextlib.suppress(BaseException):
                    await self._task
            if self._follower is not None:
                await kill_shielded(self._follower)


async def _note_ignored(recorder: EventRecorder, context: RunContext) -> None:
    ignored = sorted(k for k in context.sampling_args if k not in SAMPLING_KEYS)
    if context.limits.max_tokens is not None:
        ignored.append("max_tokens")
    if ignored:
        await recorder.emit(
            "log",
            level="warning",
            message=f"codex does not take {', '.join(ignored)}: not applied "
            f"(it takes {', '.join(SAMPLING_KEYS)})",
        )


async def _read_rollout(
    sandbox: Sandbox, session_id: str | None, redact: Callable[[str], str]
) -> tuple[Rollout, str | None]:
    """codex's session file for ``session_id`` (copied out of the sandbox), parsed."""
    rollout = Rollout(redact)
    if not session_id:
        return rollout, None
    with tempfile.TemporaryDirectory(prefix="agentkit-codex-") as tmp:
        try:
            await sandbox.download(f"{CODEX_HOME}/sessions", tmp)
        except Exception:
            return rollout, None
        found = sorted(Path(tmp).rglob(f"rollout-*{session_id}.jsonl"))
        if not found:
            return rollout, None
        rollout.feed_text(found[-1].read_text(encoding="utf-8", errors="replace"))
        relative = found[-1].relative_to(tmp).as_posix()
    return rollout, f"{CODEX_HOME}/sessions/{relative}"


def _stderr_summary(stderr: str) -> str:
    """The useful part of codex's standard error: a configuration error and where it
    is, else the last line."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    for i, line in enumerate(lines):
        if line.startswith("Error loading config"):
            return " ".join(lines[i : i + 2])
    return lines[-1] if lines else "no error message"


def _stream_messages(stream: CodexStream, prompt: str) -> list[dict[str, Any]]:
    """A transcript from the live stream, when the session file cannot be read."""
    out: list[dict[str, Any]] = [{"role": "user", "content": prompt}]
    for item in stream.items:
        if item["kind"] == "text":
            out.append({"role": "assistant", "content": item["text"]})
        elif item["kind"] == "tool":
            out.append(
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": item["id"],
                            "type": "function",
                            "function": {
                                "name": item["name"],
                                "arguments": json.dumps(item["arguments"]),
                            },
                        }
                    ],
                }
            )
            out.append({"role": "tool", "tool_call_id": item["id"], "content": item["output"]})
    return out
