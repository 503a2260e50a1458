"""The ``mini-swe-agent`` harness: the real mini-swe-agent CLI, run non-interactively in a sandbox.

>>> harness = MiniSweAgent(model="my-model")
>>> result = await harness.run(task, RunContext(base_url=url))  # doctest: +SKIP
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from agentkit import EventRecorder, ExecutionHints, HarnessError, HarnessResult, RunContext, Task
from agentkit.programs import (
    MIN_SECRET_LEN,
    loads_bounded,
    process_path,
    prompt_text,
    redactor,
    stderr_tail,
    time_left,
    timeout_error,
)
from agentkit.sandbox import open_sandbox
from agentkit.secrets import is_secret_header
from agentkit_mini_swe_agent._config import build_config, build_env, litellm_model
from agentkit_mini_swe_agent._files import SandboxDir
from agentkit_mini_swe_agent._install import (
    MINI_SWE_AGENT_VERSION,
    MiniSweAgentInstall,
    find_mini_swe_agent,
)
from agentkit_mini_swe_agent._runtime import MiniSweAgentRuntime, portable_runtime
from agentkit_mini_swe_agent._telemetry import telemetry_rubric
from agentkit_mini_swe_agent._trajectory import TrajectoryState, classify_exit

if TYPE_CHECKING:
    from agentkit import EventCallback, ExecResult, Process, Rubric, Sandbox

__all__ = ["MiniSweAgent", "prompt_of"]

#: Where mini's files live inside the sandbox: the generated configuration,
#: the trajectory, and mini's global configuration directory.
AGENT_DIR = "/logs/agent/mini-swe-agent"
CONFIG_FILE = "config.yaml"
TRAJECTORY_FILE = "trajectory.json"
#: How often the trajectory is read while mini runs (seconds).
POLL_INTERVAL = 0.5
_TAIL_LINES = 200


def prompt_of(task: Task) -> str:
    """The task text mini receives: text input as is, chat messages' text joined, data as
    JSON (:func:`agentkit.programs.prompt_text`)."""
    return prompt_text(task)


class MiniSweAgent:
    """Runs mini-swe-agent's ``mini`` CLI on a task, in its sandbox, with its bash tool.

    Options (``-H name=value`` on the command line):

    - ``model``: the model served by the run's endpoint; overrides
      ``RunContext.model``. With a base URL mini gets ``openai/<model>``;
      without one the model is passed as given (a litellm ``provider/model``).
    - ``config``: mini configuration merged over the generated one
      (``{"agent": {"system_template": ...}, "environment": {...}}``).
    - ``base_config``: the configuration file mini starts from (default its
      own ``mini.yaml``; a builtin name or a path inside the sandbox).
    - ``cost_limit``: mini's ``agent.cost_limit`` in dollars (0: none); mini's
      default when unset.
    - ``command_timeout``: seconds each bash command may run (mini's
      ``environment.timeout``, 30 by default).
    - ``retry_attempts``: model-call attempts before mini gives up
      (``MSWEA_MODEL_RETRY_STOP_AFTER_ATTEMPT``; mini's default is 10, waiting
      4-60 s between them).
    - ``timeout``: seconds before mini's process tree is killed (the smaller
      of this and ``RunContext.limits.timeout_sec`` applies).
    - ``binary``: the installation (its ``mini`` script, its virtual
      environment or its python; else ``$AGENTKIT_MINI_SWE_AGENT``, ``mini``
      on PATH, or ``.cache/mini-swe-agent/venv`` here or in a parent).
    """

    name: ClassVar[str] = "mini-swe-agent"
    description: ClassVar[str] = (
        "The real mini-swe-agent CLI (bash tool only), run in the rollout's sandbox."
    )
    #: The runner gives this harness a sandbox even when the task asks for none.
    requires_sandbox: ClassVar[bool] = True
    #: It calls the run's model: the preflight checks the endpoint and the API key.
    uses_model: ClassVar[bool] = True

    def __init__(
        self,
        model: str | None = None,
        config: dict[str, Any] | None = None,
        base_config: str = "mini.yaml",
        cost_limit: float | None = None,
        command_timeout: int | None = None,
        retry_attempts: int | None = None,
        timeout: float | None = None,
        binary: str | None = None,
    ) -> None:
        if config is not None and not isinstance(config, dict):
            raise HarnessError(
                f"mini-swe-agent option config: expected an object, got {type(config).__name__}"
            )
        if timeout is not None and not timeout > 0:
            raise HarnessError(
                f"mini-swe-agent option timeout: expected seconds > 0, got {timeout!r}"
            )
        if cost_limit is not None and cost_limit < 0:
            raise HarnessError(
                f"mini-swe-agent option cost_limit: expected dollars >= 0, got {cost_limit!r}"
            )
        if command_timeout is not None and command_timeout < 1:
            raise HarnessError(
                "mini-swe-agent option command_timeout: expected seconds >= 1, "
                f"got {command_timeout!r}"
            )
        if retry_attempts is not None and retry_attempts < 1:
            raise HarnessError(
                f"mini-swe-agent option retry_attempts: expected >= 1, got {retry_attempts!r}"
            )
        self.model = model
        self.config = dict(config) if config else None
        self.base_config = base_config
        self.cost_limit = cost_limit
        self.command_timeout = command_timeout
        self.retry_attempts = retry_attempts
        self.timeout = timeout
        self.binary = binary

    def __repr__(self) -> str:
        return f"MiniSweAgent(model={self.model!r})"

    # -- optional Harness members -------------------------------------------

    def supports(self, task: Task) -> bool:
        """Tasks with a payload (its text is the task mini is given)."""
        return task.input is not None

    def compile_rubric(self, taskset: Any) -> Rubric:
        """Telemetry (weight 0): ``turns``, ``tool_calls``, ``tool_errors``, ``tokens``."""
        return telemetry_rubric()

    @property
    def sandbox_ro_binds(self) -> list[str]:
        """Host directories a sandbox must show read-only (at the same paths) to run mini:
        the portable runtime (built in the cache on first use) and the site-packages."""
        try:
            return list(self.find_runtime()[1].mount_dirs)
        except HarnessError:
            return []

    async def preflight(self, context: RunContext) -> None:
        """Before a run: the run gives what mini needs (:meth:`check_context`, once a model
        is known: the preflight reports a missing one itself), mini-swe-agent is installed
        (a HarnessError says how to) and its sandbox runtime is built (the first time, a
        few seconds)."""
        model = self.model or context.model
        if model:
            self.check_context(model, context)
        await asyncio.to_thread(self.find_runtime)

    def check_context(self, model: str, context: RunContext) -> None:
        """Without a base URL the model must be a litellm ``provider/model``; ``max_turns``
        must be at least 1 (mini's ``step_limit`` 0 means no limit)."""
        if context.base_url is None and "/" not in model:
            raise HarnessError(
                "the mini-swe-agent harness needs the model endpoint: pass "
                "RunContext(base_url='http://.../v1') (--base-url), or a litellm "
                "'provider/model' model"
            )
        if context.limits.max_turns is not None and context.limits.max_turns < 1:
            raise HarnessError(
                "mini-swe-agent needs max_turns >= 1 (its step_limit 0 means no limit)"
            )

    def find_install(self) -> MiniSweAgentInstall:
        """The mini-swe-agent installation this harness runs (raises HarnessError when missing)."""
        return find_mini_swe_agent(self.binary)

    def find_runtime(self) -> tuple[MiniSweAgentInstall, MiniSweAgentRuntime]:
        """The installation and its portable runtime (built on first use)."""
        install = self.find_install()
        return install, portable_runtime(install)

    # -- running ------------------------------------------------------------

    async def run(
        self,
        task: Task,
        context: RunContext | None = None,
        on_event: EventCallback | None = None,
    ) -> HarnessResult:
        """Run mini on ``task``; events reach ``on_event`` while it runs."""
        task.require_payload()
        context = context or RunContext()
        model = self.model or context.model
        if not model:
            raise HarnessError(
                "the mini-swe-agent harness needs a model: pass RunContext(model=...), "
                "MiniSweAgent(model=...) or -H model=NAME"
            )
        self.check_context(model, context)
        install, runtime = await asyncio.to_thread(self.find_runtime)
        if context.sandbox is not None:
            return await self._run_in(
                context.sandbox, task, context, model, install, runtime, on_event
            )
        hints = ExecutionHints(ro_binds=list(runtime.mount_dirs))
        async with open_sandbox(
            "local",
            hints=hints,
            model_endpoint=context.base_url,
            rollout_id=context.rollout_id or "mini-swe-agent",
        ) as sandbox:
            return await self._run_in(sandbox, task, context, model, install, runtime, on_event)

    def _timeout(self, context: RunContext) -> float | None:
        limits = [t for t in (self.timeout, context.limits.timeout_sec) if t is not None]
        return min(limits) if limits else None

    async def _run_in(
        self,
        sandbox: Sandbox,
        task: Task,
        context: RunContext,
        model: str,
        install: MiniSweAgentInstall,
        runtime: MiniSweAgentRuntime,
        on_event: EventCallback | None,
    ) -> HarnessResult:
        api_key = context.resolved_api_key
        headers = {**context.headers, **dict(context.sampling_args.get("extra_headers") or {})}
        secrets = [api_key, *(v for k, v in headers.items() if is_secret_header(k))]
        redact = redactor(secrets)
        recorder = EventRecorder(task.task_id, context.rollout_id, on_event)
        timeout = self._timeout(context)
        started = time.monotonic()
        model_name = litellm_model(model, base_url=context.base_url)
        await recorder.emit(
            "harness.start",
            harness=self.name,
            model=model_name,
            mini_swe_agent_version=install.version,
            python_version=install.python_version,
            runtime=str(runtime.root),
            found_via=install.found_via,
            timeout_sec=timeout,
        )
        if install.version != MINI_SWE_AGENT_VERSION:
            await recorder.emit(
                "log",
                level="warning",
                message=f"mini-swe-agent {install.version} is not the version agentkit is "
                f"tested with ({MINI_SWE_AGENT_VERSION})",
            )
        await self._check_runtime(sandbox, runtime)
        config = build_config(
            task=prompt_of(task),
            model=model,
            base_url=context.base_url,
            max_turns=context.limits.max_turns,
            cost_limit=self.cost_limit,
            command_timeout=self.command_timeout,
            sampling_args=context.sampling_args,
            max_tokens=context.limits.max_tokens,
            extra=self.config,
        )
        with tempfile.TemporaryDirectory(prefix="agentkit-mini-") as tmp:
            Path(tmp, CONFIG_FILE).write_text(json.dumps(config, indent=2) + "\n")
            await sandbox.upload(tmp, AGENT_DIR)
        env = build_env(
            config_dir=process_path(sandbox, f"{AGENT_DIR}/global"),
            api_key=api_key,
            retry_attempts=self.retry_attempts,
            headers=headers,
        )
        argv = runtime.argv(
            "-y",
            "--exit-immediately",
            "-c",
            self.base_config,
            "-c",
            process_path(sandbox, f"{AGENT_DIR}/{CONFIG_FILE}"),
            # unused by mini; names the task in `ps` (and lets tests find the process)
            "-c",
            f"agentkit.task_id={task.task_id}",
            "-o",
            process_path(sandbox, f"{AGENT_DIR}/{TRAJECTORY_FILE}"),
        )
        files = SandboxDir(sandbox, AGENT_DIR)
        files.open()
        state = TrajectoryState(recorder, redact)
        try:
            remaining = time_left(timeout, started)
            proc = await sandbox.start(argv, env=env)
            outcome, stdout_tail = await _drive(proc, files, state, remaining, context)
            data = _parse(await files.read(TRAJECTORY_FILE))
            if data is not None:
                await state.update(data)
        finally:
            import anyio

            with anyio.CancelScope(shield=True):
                await _scrub(files, secrets, recorder)
                files.close()
        return await self._result(
            state, outcome, stdout_tail, recorder, install, runtime, model_name, timeout, redact
        )

    async def _check_runtime(self, sandbox: Sandbox, runtime: MiniSweAgentRuntime) -> None:
        """Start the runtime's interpreter in the sandbox: a clear error when it cannot run."""
        code = (
            "import os, sys\n"
            f"missing = [d for d in {list(runtime.site_dirs)!r} if not os.path.isdir(d)]\n"
            "print(*missing, sep='\\n'); sys.exit(3 if missing else 0)\n"
        )
        try:
            check = await sandbox.exec(runtime.python_argv("-I", "-c", code), timeout=120)
        except Exception as exc:  # the sandbox could not even start it
            detail = f"{type(exc).__name__}: {exc}"
        else:
            if check.ok:
                return
            detail = (check.stderr or check.stdout).strip()[-500:]
        raise HarnessError(
            f"mini-swe-agent's runtime cannot run in this sandbox ({detail or 'no output'}): "
            f"the sandbox must show {', '.join(runtime.mount_dirs)} read-only at the same "
            "paths (MiniSweAgent().sandbox_ro_binds; under AgentEnv the runner adds them, "
            "or pass -S ro_binds='[...]'), on this machine's CPU architecture"
        )

    async def _result(
        self,
        state: TrajectoryState,
        outcome: ExecResult,
        stdout_tail: list[str],
        recorder: EventRecorder,
        install: MiniSweAgentInstall,
        runtime: MiniSweAgentRuntime,
        model_name: str,
        timeout: float | None,
        redact: Callable[[str], str],
    ) -> HarnessResult:
        stderr = await stderr_tail(outcome, redact, recorder, source="mini-swe-agent.stderr")
        exit_status = state.exit_status
        status, error_kind, error = _outcome(state, outcome, stderr, stdout_tail, timeout, redact)
        if status != "completed":
            await recorder.emit("error", source="harness", kind=error_kind, message=error)
        await recorder.emit(
            "harness.end",
            status=status,
            exit_code=outcome.exit_code,
            exit_status=exit_status,
            turns=state.api_calls,
            tool_calls=state.tool_calls,
        )
        usage = state.usage
        if state.cost and not usage.cost:
            import attrs

            usage = attrs.evolve(usage, cost=state.cost)
        return HarnessResult(
            status=status,  # type: ignore[arg-type]
            output=state.output,
            messages=state.messages,
            error=error,
            error_kind=error_kind,
            usage=usage,
            events=list(recorder.events),
            raw={
                "mini_swe_agent_version": state.mini_version or install.version,
                # mini has no session id: its trajectory file (below) is the session's record
                "session_id": None,
                "python_version": install.python_version,
                "litellm_version": install.litellm_version,
                "model": model_name,
                "exit_status": exit_status,
                "exit_code": outcome.exit_code,
                "submission": state.submission,
                "turns": state.api_calls,
                "tool_calls": state.tool_calls,
                "tool_errors": state.tool_errors,
                "format_errors": state.format_errors,
                "cost": state.cost,
                "trajectory": f"{AGENT_DIR}/{TRAJECTORY_FILE}",
                "runtime": str(runtime.root),
                "installation": str(install.python),
            },
        )


def _outcome(
    state: TrajectoryState,
    outcome: ExecResult,
    stderr: str,
    stdout_tail: list[str],
    timeout: float | None,
    redact: Callable[[str], str],
) -> tuple[str, str | None, str | None]:
    """(status, error_kind, error) of a finished mini-swe-agent: its exit status, a limit
    agentkit hit, or how its process ended."""
    exit_status = state.exit_status
    error: str | None = None
    error_kind: str | None = None
    step_limit = _obj_get(state.info, "config", "agent", "step_limit")
    if outcome.timed_out:
        status = "timeout"
        error_kind = "timeout"
        error = timeout_error("mini-swe-agent", timeout)
    elif state.limit_hit is not None:
        status = "timeout"
        error_kind, error = state.limit_hit
    elif exit_status == "Submitted":
        status = "completed"
    elif exit_status == "LimitsExceeded":
        status = "timeout"
        if isinstance(step_limit, int) and 0 < step_limit <= state.api_calls:
            error_kind = "max_turns"
            error = (
                f"mini-swe-agent stopped after {state.api_calls} model calls "
                f"(max_turns={step_limit})"
            )
        else:
            error_kind = "cost_limit"
            error = f"mini-swe-agent stopped at its cost limit (spent ${state.cost:.4f})"
    elif exit_status == "TimeExceeded":
        status = "timeout"
        error_kind = "timeout"
        error = "mini-swe-agent reached its wall_time_limit_seconds"
    elif exit_status == "RepeatedFormatError":
        status = "failed"
        error_kind = "agent_error"
        error = (
            f"the model answered {state.format_errors} times without a valid bash tool "
            "call; mini-swe-agent gave up (RepeatedFormatError)"
        )
    elif exit_status:
        status = "failed"
        error_kind = classify_exit(exit_status)
        error = state.exit_text or exit_status
    elif outcome.exit_code != 0:
        status = "failed"
        error_kind = "agent_error"
        lines = stderr.strip().splitlines() or [redact(x) for x in stdout_tail]
        last = lines[-1] if lines else "no error message"
        error = f"mini-swe-agent exited with status {outcome.exit_code}: {last}"
    else:
        status = "failed"
        error_kind = "agent_error"
        error = "mini-swe-agent exited without writing its trajectory"
    return status, error_kind, error


def _obj_get(data: Any, *keys: str) -> Any:
    for key in keys:
        if not isinstance(data, dict):
            return None
        data = data.get(key)
    return data


def _parse(raw: bytes | None) -> dict[str, Any] | None:
    if not raw:
        return None
    try:
        data = loads_bounded(raw)
    except ValueError:
        return None  # caught mid-write: the next read has it whole
    return data if isinstance(data, dict) else None


async def _drive(
    proc: Process,
    files: SandboxDir,
    state: TrajectoryState,
    timeout: float | None,
    context: RunContext | None = None,
) -> tuple[ExecResult, list[str]]:
    """Close stdin, drain stdout, read the trajectory as it grows, wait; kill the tree on
    any exit path, and when the trajectory shows a token, cost or message limit of the
    run reached (``context.limit_hit``)."""
    tail: collections.deque[str] = collections.deque(maxlen=_TAIL_LINES)
    done = asyncio.Event()

    async def pump() -> None:
        async for line in proc.stdout_lines():
            tail.append(line)

    async def watch() -> None:
        interval = POLL_INTERVAL if files.on_host else 4 * POLL_INTERVAL
        while not done.is_set():
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(done.wait(), interval)
            if done.is_set():
                return
            try:
                if files.on_host:  # read and parse off the event loop: it may be large
                    data = await asyncio.to_thread(
                        lambda: _parse(files.read_if_changed(TRAJECTORY_FILE))
                    )
                else:
                    data = _parse(await files.read(TRAJECTORY_FILE))
                if data is not None:
                    await state.update(data)
                    hit = (
                        context.limit_hit(state.usage, state.message_count)
                        if context is not None and state.limit_hit is None
                        else None
                    )
                    if hit is not None:  # stop mini: the rollout is over its limit
                        state.limit_hit = hit
                        await proc.kill()
            except Exception as exc:  # a reader bug must not leave mini running blind
                await state.recorder.emit(
                    "log",
                    level="warning",
                    message=f"could not read mini's trajectory: {type(exc).__name__}: {exc}",
                )

    reader = asyncio.ensure_future(pump())
    watcher = asyncio.ensure_future(watch())
    try:
        await proc.write_stdin(b"", close=True)
        outcome = await proc.wait(timeout)
        done.set()
        await reader
        await watcher
        return outcome, list(tail)
    except BaseException:
        done.set()
        reader.cancel()
        watcher.cancel()
        await _shielded_kill(proc)
        raise


async def _shielded_kill(proc: Process) -> None:
    """Kill ``proc``'s tree even while the surrounding task is being cancelled."""
    import anyio

    with anyio.CancelScope(shield=True), contextlib.suppress(Exception):
        await proc.kill()
        await proc.wait(5)  # reap it and close its pipes


async def _scrub(files: SandboxDir, secrets: list[str | None], recorder: EventRecorder) -> None:
    """Remove the API key and secret header values from mini's files (a server may echo
    them in an error that mini keeps in its trajectory; a failed rollout's files are kept)."""
    wanted = [s for s in secrets if s and len(s) >= MIN_SECRET_LEN]
    if not wanted:
        return
    try:
        changed = 0
        for secret in wanted:
            changed += await asyncio.to_thread(files.scrub, secret)
        if changed:
            await recorder.emit(
                "log",
                level="info",
                message=f"removed the API key from {changed} file(s) mini-swe-agent wrote",
            )
    except Exception as exc:  # never fail a finished run over the clean-up
        await recorder.emit(
            "log",
            level="warning",
            message=f"could not check mini-swe-agent's files for the API key: {type(exc).__name__}",
        )
