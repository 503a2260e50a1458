"""The ``opencode`` harness: the real opencode CLI, run non-interactively in a sandbox.

>>> result = await OpenCode(model="my-model").run(task, RunContext(base_url=url))  # doctest: +SKIP
"""

from __future__ import annotations

import shutil
from typing import TYPE_CHECKING, Any, ClassVar

from agentkit import (
    EventRecorder,
    HarnessError,
    HarnessResult,
    RunContext,
    Task,
)
from agentkit.programs import (
    ProgramHarness,
    ProgramRun,
    drive,
    process_path,
    prompt_text,
    stderr_tail,
    timeout_error,
)
from agentkit_opencode._binary import OpenCodeBinary, find_opencode
from agentkit_opencode._config import (
    DEFAULT_AGENT,
    build_config,
    build_env,
    model_reference,
)
from agentkit_opencode._stream import StreamState
from agentkit_opencode._telemetry import telemetry_rubric

if TYPE_CHECKING:
    from agentkit import EventCallback, ExecResult, Process, Rubric, Sandbox

__all__ = ["OpenCode", "prompt_of"]

#: Where opencode keeps its data, state, config and cache inside the sandbox
#: (so its database and log stay with the rollout).
XDG_ROOT = "/logs/agent/opencode"
#: Where the binary is copied when the sandbox cannot see it at its host path.
STAGED_BINARY = "/tmp/.agentkit-opencode/opencode"


def prompt_of(task: Task) -> str:
    """The text opencode receives: text input as is, chat messages' text joined, data as JSON."""
    return prompt_text(task)


class OpenCode(ProgramHarness):
    """Runs the ``opencode`` CLI (``opencode run --format json``) on a task, in its sandbox.

    Options (``-H name=value`` on the command line):

    - ``model``: the model name served by the run's endpoint; overrides
      ``RunContext.model``. Without a base URL it is passed to opencode as is
      (``provider/model``) and ``config`` must configure that provider.
    - ``agent``: the opencode agent (default: opencode's ``build``).
    - ``variant``: the model variant (provider-specific reasoning effort).
    - ``config``: opencode configuration merged over the generated one.
    - ``timeout``: seconds before opencode's process tree is killed (the
      smaller of this and ``RunContext.limits.timeout_sec`` applies).
    - ``binary``: the opencode executable (else ``$AGENTKIT_OPENCODE_BIN``,
      PATH, or ``node_modules/.bin`` in the working directory or a parent).
    """

    name: ClassVar[str] = "opencode"
    description: ClassVar[str] = (
        "The real opencode CLI, run non-interactively in the rollout's sandbox."
    )
    home_dir: ClassVar[str] = XDG_ROOT
    staged_binary: ClassVar[str] = STAGED_BINARY

    def __init__(
        self,
        model: str | None = None,
        agent: str | None = None,
        variant: str | None = None,
        config: dict[str, Any] | None = None,
        timeout: float | None = None,
        binary: str | None = None,
    ) -> None:
        self.check_options(timeout=timeout, config=config)
        self.model = model
        self.agent = agent
        self.variant = variant
        self.config = dict(config) if config else None
        self.timeout = timeout
        self.binary = binary

    def __repr__(self) -> str:
        return f"OpenCode(model={self.model!r}, agent={self.agent!r})"

    def compile_rubric(self, taskset: Any) -> Rubric:
        """Telemetry (weight 0): ``turns``, ``tool_calls``, ``tool_errors``, ``tokens``."""
        return telemetry_rubric()

    def find_program(self) -> OpenCodeBinary:
        """The opencode executable this harness runs (raises HarnessError when missing)."""
        return find_opencode(self.binary)

    def check_context(self, model: str, context: RunContext) -> None:
        """Without a base URL the model must be ``provider/model`` (configured)."""
        if context.base_url is None and "/" not in model:
            raise HarnessError(
                "the opencode harness needs the model endpoint: pass "
                "RunContext(base_url='http://.../v1') (--base-url), or a 'provider/model' model "
                "with that provider in the config option"
            )

    async def run_in(
        self,
        sandbox: Sandbox,
        task: Task,
        context: RunContext,
        model: str,
        binary: OpenCodeBinary,
        on_event: EventCallback | None,
    ) -> HarnessResult:
        run = self.start_run(sandbox, task, context, on_event)
        prompt = prompt_of(task)
        ref = model_reference(model, generated_provider=context.base_url is not None)
        config = build_config(
            model=model,
            base_url=context.base_url,
            has_api_key=bool(run.api_key),
            agent=self.agent,
            max_turns=context.limits.max_turns,
            sampling_args=context.sampling_args,
            extra=self.config,
            headers=context.headers,
            max_tokens=context.limits.max_tokens,
        )
        env = build_env(config, xdg_root=process_path(sandbox, XDG_ROOT), api_key=run.api_key)
        await run.recorder.emit(
            "harness.start",
            harness="opencode",
            model=ref,
            agent=self.agent or DEFAULT_AGENT,
            variant=self.variant,
            opencode_version=binary.version,
            timeout_sec=run.timeout,
        )
        executable = await run.stage(binary)
        await _provide_ripgrep(sandbox, run.recorder)
        argv = [executable, "run", "--format", "json", "--thinking", "--model", ref]
        argv += ["--title", f"agentkit {task.task_id}"]
        if self.agent:
            argv += ["--agent", self.agent]
        if self.variant:
            argv += ["--variant", self.variant]
        state = StreamState(run.recorder, prompt, run.redact)
        try:
            remaining = run.time_left()
            proc = await sandbox.start(argv, env=env)
            outcome = await _drive(
                proc, prompt, state, remaining, context.limits.max_turns, context
            )
        finally:
            # opencode's database keeps error bodies, and some servers echo the key
            await run.clean_up()
        return await self._result(state, outcome, run, binary, ref)

    async def _result(
        self,
        state: StreamState,
        outcome: ExecResult,
        run: ProgramRun,
        binary: OpenCodeBinary,
        ref: str,
    ) -> HarnessResult:
        recorder = run.recorder
        stderr = await stderr_tail(outcome, run.redact, recorder, source="opencode.stderr")
        error: str | None = None
        error_kind: str | None = None
        if outcome.timed_out:
            status = "timeout"
            error_kind = "timeout"
            error = timeout_error("opencode", run.timeout)
        elif state.limit_hit is not None:
            status = "timeout"
            error_kind, error = state.limit_hit
        elif state.turn_limit_hit:
            status = "timeout"
            error_kind = "max_turns"
            error = (
                f"stopped opencode when it began model call {state.turns} "
                f"(max_turns={state.max_turns})"
            )
        elif state.errors:
            status = "failed"
            error = "\n".join(e["message"] for e in state.errors)
            error_kind = state.errors[-1]["kind"]
        elif outcome.exit_code != 0:
            status = "failed"
            error_kind = "agent_error"
            last = stderr.strip().splitlines()[-1] if stderr.strip() else "no error message"
            error = f"opencode exited with status {outcome.exit_code}: {last}"
        else:
            status = "completed"
        if status != "completed" and not state.errors:
            await recorder.emit("error", source="harness", kind=error_kind, message=error)
        await recorder.emit(
            "harness.end",
            status=status,
            exit_code=outcome.exit_code,
            turns=state.turns,
            tool_calls=state.tool_calls,
        )
        return HarnessResult(
            status=status,  # type: ignore[arg-type]
            output=state.output,
            messages=state.messages,
            error=error,
            error_kind=error_kind,
            usage=state.usage,
            events=list(recorder.events),
            raw={
                "opencode_version": binary.version,
                "session_id": state.session_id,
                "model": ref,
                "agent": self.agent or DEFAULT_AGENT,
                "variant": self.variant,
                "exit_code": outcome.exit_code,
                "binary": str(binary.path),
                "binary_staged": run.staged,
                "turns": state.turns,
                "tool_calls": state.tool_calls,
                "tool_errors": state.tool_errors,
            },
        )


async def _provide_ripgrep(sandbox: Sandbox, recorder: EventRecorder) -> None:
    """Make ``rg`` available: opencode's grep and glob tools need it, and offline
    opencode cannot download it. A host ``rg`` the sandbox cannot see is copied
    where opencode looks (its cache's ``bin``)."""
    visible = await sandbox.exec(["/bin/sh", "-c", "command -v rg"], timeout=30)
    if visible.ok:
        return
    host_rg = shutil.which("rg")
    if host_rg is None:
        await recorder.emit(
            "log",
            level="warning",
            message="ripgrep (rg) is not installed: opencode's grep and glob tools will fail "
            "without network; install it (apt-get install ripgrep)",
        )
        return
    target = f"{XDG_ROOT}/cache/opencode/bin/rg"
    await sandbox.upload(host_rg, target)
    await sandbox.exec(["chmod", "0755", target], timeout=30)


async def _drive(
    proc: Process,
    prompt: str,
    state: StreamState,
    timeout: float | None,
    max_turns: int | None = None,
    context: RunContext | None = None,
) -> ExecResult:
    """Send the prompt, feed stdout to ``state`` live, wait; the tree is killed on any
    exit path (:func:`agentkit.programs.drive`).

    opencode's own ``steps`` limit only asks the model to stop; with
    ``max_turns`` the process is killed when model call ``max_turns + 1`` begins.
    """
    state.max_turns = max_turns

    async def on_line(line: str) -> None:
        try:
            await state.feed(line)
        finally:
            if max_turns is not None and state.turns > max_turns and not state.turn_limit_hit:
                state.turn_limit_hit = True
                await proc.kill()
            if context is not None and state.limit_hit is None and not state.turn_limit_hit:
                hit = context.limit_hit(state.usage, len(state.messages))
                if hit is not None:  # a token, cost or message limit: stop opencode
                    state.limit_hit = hit
                    await proc.kill()

    return await drive(
        proc,
        on_line=on_line,
        timeout=timeout,
        stdin=prompt.encode("utf-8"),
        recorder=state.recorder,
    )
