"""One Harbor task run in one sandbox, in the shape of Harbor's own ``Trial``.

Harbor 0.24 runs a task as a trial: **start** the environment (and its
healthcheck), **run the agent** (for a multi-step task, step by step: the
step's ``workdir/`` and ``setup.sh``, its healthcheck, the agent, its
artifacts and its verifier, stopping at a missed ``min_reward``),
**verify**, and **stop**. :class:`HarborTrial` holds what every phase needs
(the task, its parsed directory, the sandbox, the working directory, the
resolved env, the event recorder, the run context and where logs go), so
each phase is one method call.

The harnesses drive the agent side (:func:`run_harbor_task`: ``start``,
``run_agent`` or ``run_steps``, ``stop``); the rubric drives grading
(:meth:`HarborTrial.grade`) on the same sandbox afterwards. Stopping the
sandbox itself is the runner's: it owns and closes it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs

from agentkit import (
    EventCallback,
    EventRecorder,
    GradingUnavailable,
    HarnessResult,
    RunContext,
    Sandbox,
    Status,
    Task,
    Usage,
)
from agentkit.sandbox import SandboxError, reset_dir
from agentkit_harbor._errors import HarborGradingError, HarborTaskError, StepSetupError
from agentkit_harbor._isolation import DEFAULT_ISOLATION, check_isolation, protects, strongest
from agentkit_harbor._rewards import VERIFIER_DIR, main_reward
from agentkit_harbor._sandbox_io import exec_logged, tail, upload_tree
from agentkit_harbor._spec import HarborStepSpec, HarborTaskSpec
from agentkit_harbor._steps import (
    RECORD_MARK,
    AgentStep,
    AgentStepOutcome,
    StepRun,
    harbor_dir,
    run_healthcheck,
    spec_for_task,
)
from agentkit_harbor._verify import (
    TESTS_DIR,
    VerifierOutcome,
    aggregate_steps,
    collect_artifacts,
    min_reward_failure,
    reset_verifier_dirs,
    task_env,
    verify,
)

__all__ = ["ISOLATION_KEY", "HarborTrial", "isolation_of", "run_harbor_task"]

_KINDS = {
    cls.kind: cls
    for cls in HarborGradingError.__subclasses__()  # one level: all are direct subclasses
}
#: The metadata key the taskset sets to the run's ``-T verifier_isolation``.
ISOLATION_KEY = "verifier_isolation"


@attrs.define(kw_only=True)
class HarborTrial:
    """One Harbor task in one sandbox: start, run the agent, verify, stop.

    Build it with :meth:`open`. The agent side accumulates into the trial
    (status, output, messages, usage, per-step records) and :meth:`stop`
    turns that into the :class:`~agentkit.HarnessResult`.
    """

    task: Task
    spec: HarborTaskSpec
    sandbox: Sandbox
    context: RunContext
    recorder: EventRecorder
    workdir: str
    out_dir: Path | None
    env: dict[str, str] = attrs.field(factory=dict)
    harness_name: str = "harbor"
    #: Where the verifier runs: ``shared``, ``fork`` or ``separate`` (see ``_isolation``).
    isolation: str = DEFAULT_ISOLATION
    # -- what the agent side produced ----------------------------------------
    status: Status = "completed"
    error: str | None = None
    error_kind: str | None = None
    outputs: list[str] = attrs.field(factory=list)
    messages: list[dict[str, Any]] = attrs.field(factory=list)
    usage: Usage = attrs.field(factory=Usage)
    raw: dict[str, Any] = attrs.field(factory=dict)
    records: list[dict[str, Any]] | None = None
    stopped: str | None = None
    _dirty_verifier_dirs: bool = False

    @classmethod
    def open(
        cls,
        task: Task,
        sandbox: Sandbox,
        context: RunContext | None = None,
        *,
        recorder: EventRecorder | None = None,
        harness_name: str = "harbor",
    ) -> HarborTrial:
        """The trial of ``task`` in ``sandbox``; a non-Harbor task raises HarborTaskError."""
        context = context or RunContext()
        spec = spec_for_task(task.require_payload())
        return cls(
            task=task,
            spec=spec,
            sandbox=sandbox,
            context=context,
            recorder=recorder or EventRecorder(task.task_id, context.rollout_id, None),
            workdir=str(getattr(sandbox, "workdir", None) or spec.workdir),
            out_dir=harbor_dir(sandbox, context),
            harness_name=harness_name,
            isolation=isolation_of(task, spec),
            raw={"harbor": {"task_dir": str(spec.task_dir), "mark": RECORD_MARK}},
        )

    # -- start ----------------------------------------------------------------

    def fail(self, error: str, kind: str) -> None:
        """Record that the agent side failed (the first failure is the one reported)."""
        if self.status == "completed":
            self.status, self.error, self.error_kind = "failed", error, kind

    async def start(self) -> bool:
        """Resolve the env, make the working directory and ``/logs/agent``, run the healthcheck.

        False (with the failure recorded) when the trial cannot go on.
        """
        try:
            self.env = task_env(self.spec)
        except HarborTaskError as exc:
            self.fail(str(exc), "task_error")
            return False
        mk = await exec_logged(
            self.sandbox,
            ["mkdir", "-p", self.workdir, "/logs/agent"],
            recorder=self.recorder,
            purpose="prepare",
        )
        if not mk.ok:
            self.fail(f"cannot create {self.workdir}: {mk.stderr.strip()}", "sandbox")
            return False
        hc = self.spec.config.environment.healthcheck
        if hc is not None:
            problem = await run_healthcheck(
                self.sandbox,
                hc,
                cwd=self.workdir,
                env=self.env,
                recorder=self.recorder,
                purpose="healthcheck",
            )
            if problem:
                self.fail(problem, "healthcheck_failed")
                return False
        return True

    # -- run the agent ----------------------------------------------------------

    def step_run(self, step: HarborStepSpec | None) -> StepRun:
        """What the agent gets for ``step`` (None: the whole single-step task)."""
        agent_cfg = self.spec.config.agent
        timeout, user = agent_cfg.timeout_sec, agent_cfg.user
        if step is not None:
            if step.config.agent.timeout_sec is not None:
                timeout = step.config.agent.timeout_sec
            if step.config.agent.user is not None:
                user = step.config.agent.user
        return StepRun(
            task=self.task,
            spec=self.spec,
            step=step,
            instruction=step.instruction if step else self.spec.instruction,
            sandbox=self.sandbox,
            workdir=self.workdir,
            env=self.env,
            timeout_sec=timeout,
            user=user,
            recorder=self.recorder,
            context=self.context,
        )

    async def run_agent(
        self, agent_step: AgentStep, step: HarborStepSpec | None = None
    ) -> AgentStepOutcome:
        """Run the agent once (on ``step``, or on the whole task) and keep what it produced."""
        outcome = await agent_step(self.step_run(step))
        if outcome.output:
            self.outputs.append(f"## {step.name}\n{outcome.output}" if step else outcome.output)
        self.messages.extend(outcome.messages)
        if outcome.usage is not None:
            self.usage = self.usage + outcome.usage
        if step is None:
            self.raw["harbor"].update(outcome.raw)
        if outcome.status != "completed" and self.status == "completed":
            error = outcome.error
            if step is not None and error:
                error = f"step {step.name!r}: {error}"
            self.status, self.error, self.error_kind = outcome.status, error, outcome.error_kind
        return outcome

    async def prepare_step(self, step: HarborStepSpec) -> str | None:
        """Before a step's agent: clear the last verifier's files, upload workdir/, setup, check.

        Returns why the step cannot run, or None.
        """
        if self._dirty_verifier_dirs:
            # Harbor empties /tests and /logs/verifier after a shared verifier,
            # before the next agent phase can see them.
            try:
                if protects(self.sandbox):
                    await reset_dir(self.sandbox, VERIFIER_DIR, mode=0o777)
                    await reset_dir(self.sandbox, TESTS_DIR, mode=0o755)
                else:
                    await reset_verifier_dirs(self.sandbox, recorder=self.recorder, step=step.name)
            except (HarborGradingError, SandboxError, OSError) as exc:
                return str(exc)
            self._dirty_verifier_dirs = False
        run = self.step_run(step)
        if step.workdir_dir.is_dir():
            try:
                await upload_tree(
                    self.sandbox, step.workdir_dir, self.workdir, root=self.spec.task_dir
                )
            except Exception as exc:
                return f"uploading steps/{step.name}/workdir/ failed: {type(exc).__name__}: {exc}"
            await self.recorder.emit(
                "log",
                level="info",
                message=f"uploaded steps/{step.name}/workdir/ to {self.workdir}",
            )
            if (step.workdir_dir / "setup.sh").is_file():
                res = await exec_logged(
                    self.sandbox,
                    ["bash", f"{self.workdir.rstrip('/')}/setup.sh"],
                    recorder=self.recorder,
                    purpose="step.setup",
                    cwd=self.workdir,
                    env=self.env,
                    user=run.user,
                )
                if not res.ok:
                    return (
                        f"setup.sh exited with code {res.exit_code}: "
                        f"{(res.stderr or res.stdout).strip()[-500:]}"
                    )
        if step.config.healthcheck is not None:
            return await run_healthcheck(
                self.sandbox,
                step.config.healthcheck,
                cwd=self.workdir,
                env=self.env,
                recorder=self.recorder,
                purpose="step.healthcheck",
            )
        return None

    async def run_steps(self, agent_step: AgentStep) -> None:
        """Each step in order: prepare, agent, artifacts, verifier; stop as Harbor stops."""
        self.records = []
        for index, step in enumerate(self.spec.steps):
            record: dict[str, Any] = {"name": step.name, "index": index}
            self.records.append(record)
            await self.recorder.emit("harbor.step", step=step.name, index=index, phase="start")
            problem = await self.prepare_step(step)
            if problem:
                record["setup_error"] = problem
                self.status, self.error, self.error_kind = "failed", problem, "step_setup_failed"
                self.stopped = f"step {step.name!r}: {problem}"
                break
            outcome = await self.run_agent(agent_step, step)
            record["agent_status"] = outcome.status
            if outcome.error:
                record["agent_error"] = outcome.error
            rewards = await self.verify_step(step, record)
            await self.recorder.emit(
                "harbor.step", step=step.name, index=index, phase="end", rewards=rewards
            )
            why = self._stop_reason(step, record)
            if why:
                self.stopped = why
                break

    # -- verify ---------------------------------------------------------------

    async def collect_artifacts(self, step: HarborStepSpec | None = None) -> None:
        """Copy the task's (and the step's) artifacts into the run directory, within caps."""
        if self.out_dir is None:
            return
        where = self.out_dir / "steps" / step.name if step else self.out_dir
        declared = [*self.spec.config.artifacts, *(step.config.artifacts if step else [])]
        await collect_artifacts(self.sandbox, declared, where / "artifacts", recorder=self.recorder)

    async def verify(
        self,
        step: HarborStepSpec | None = None,
        *,
        require_main: bool = False,
        main_reward_strategy: str = "mean",
        final: bool = False,
    ) -> VerifierOutcome:
        """Run the verifier (of ``step``, or of the task) where :attr:`isolation` says;
        raise a :class:`HarborGradingError` (or :class:`~agentkit.GradingUnavailable`).
        ``final``: the sandbox is not used after it (see :func:`~agentkit_harbor.verify`)."""
        if step is not None and self.isolation == "shared":
            self._dirty_verifier_dirs = True
        logs = None
        if self.out_dir is not None:
            logs = (self.out_dir / "steps" / step.name if step else self.out_dir) / "verifier"
        return await verify(
            self.sandbox,
            self.spec,
            step=step,
            workdir=self.workdir,
            out_dir=logs,
            recorder=self.recorder,
            require_main=require_main,
            main_reward_strategy=main_reward_strategy,
            isolation=self.isolation,
            final=final,
        )

    async def verify_step(
        self, step: HarborStepSpec, record: dict[str, Any]
    ) -> dict[str, float] | None:
        """Artifacts then the verifier of ``step``, written into ``record``; its rewards or None."""
        await self.collect_artifacts(step)
        try:
            result = await self.verify(step)
        except HarborGradingError as exc:
            record["grading_error"] = {"kind": exc.kind, "message": str(exc)}
            if exc.agent_broke:
                # the state the agent left broke this step's grading: a failed step
                record["grading_error"]["scored"] = True
                zero = {"reward": 0.0}
                record["rewards"] = zero
                return zero
            record["rewards"] = None
            return None
        except GradingUnavailable as exc:
            record["rewards"] = None
            record["grading_error"] = {"kind": exc.kind, "message": str(exc), "unavailable": True}
            return None
        record["rewards"] = dict(result.rewards)
        record["verifier"] = result.to_json()
        return result.rewards

    @staticmethod
    def _stop_reason(step: HarborStepSpec, record: dict[str, Any]) -> str | None:
        """Why no further step runs after this one (Harbor's rule), or None."""
        rewards = record.get("rewards")
        if isinstance(record.get("grading_error"), dict):
            # Harbor stops after a step that ends with an exception and no verifier result.
            why = record["grading_error"]["message"].splitlines()[0]
            return f"step {step.name!r} has no verifier result: {why}"
        if step.config.min_reward is not None:
            missed = min_reward_failure(rewards, step.config.min_reward)
            if missed:
                return f"step {step.name!r}: {missed}"
        return None

    async def grade(
        self, result: HarnessResult | None = None, *, main_reward_strategy: str = "mean"
    ) -> dict[str, float]:
        """The rubric's side: verify (or aggregate the steps) and return the metrics.

        Single-step: artifacts, the verifier, then the total reward
        (:func:`~agentkit_harbor.main_reward` with ``main_reward_strategy``)
        beside every key. Multi-step: the harness's step records, or, when
        the harness ran the task in one go, every step verified now in order.
        """
        if not self.spec.is_multi_step:
            await self.collect_artifacts()
            try:
                # the rubric's grading is the rollout's last use of its sandbox
                outcome = await self.verify(
                    require_main=True, main_reward_strategy=main_reward_strategy, final=True
                )
            except HarborGradingError as exc:
                error = {"kind": exc.kind, "message": str(exc)}
                _keep(result, "verifier", {"error": error, "stdout": tail(exc.stdout)})
                raise
            _keep(result, "verifier", outcome.to_json())
            return _with_main(outcome.rewards, main_reward_strategy)
        records = _step_records(self.spec, result)
        if records is None:
            records = await self._verify_steps_now()
            _keep(result, "graded_steps", records)
        aggregated = aggregate_steps(
            [r.get("rewards") for r in records], self.spec.config.reward_strategy
        )
        if aggregated is None:
            failing = next((r for r in records if r.get("rewards") is None), None)
            if failing is None:
                raise HarborGradingError("no step of this multi-step task ran")
            _raise_from_record(failing)
        assert aggregated is not None
        _raise_unavailable(records)
        metrics = _with_main(aggregated, main_reward_strategy)
        for r in records:
            rewards = r.get("rewards")
            if isinstance(rewards, dict) and rewards:
                try:
                    metrics[f"step.{r['name']}.reward"] = main_reward(rewards, main_reward_strategy)
                except HarborGradingError:
                    pass
        metrics["steps_completed"] = float(
            sum(1 for r in records if r.get("rewards") is not None and "grading_error" not in r)
        )
        _raise_scored(records, metrics)
        return metrics

    async def _verify_steps_now(self) -> list[dict[str, Any]]:
        """Verify every step in order on the final state (a harness that ignored the steps)."""
        records: list[dict[str, Any]] = []
        for index, step in enumerate(self.spec.steps):
            record: dict[str, Any] = {"name": step.name, "index": index}
            records.append(record)
            await self.verify_step(step, record)
            if self._stop_reason(step, record):
                break
        return records

    # -- stop -----------------------------------------------------------------

    async def stop(self) -> HarnessResult:
        """End the agent side: the :class:`~agentkit.HarnessResult` of what ran."""
        if self.records is not None:
            self.raw["harbor"].update(
                {
                    "multi_step": True,
                    "strategy": self.spec.config.reward_strategy,
                    "steps": self.records,
                    "stopped": self.stopped,
                    "steps_total": len(self.spec.steps),
                }
            )
            if self.stopped:
                await self.recorder.emit(
                    "log", level="info", message=f"remaining steps skipped: {self.stopped}"
                )
        await self.recorder.emit("harness.end", status=self.status)
        return HarnessResult(
            status=self.status,
            output="\n\n".join(self.outputs) or None,
            error=self.error,
            error_kind=self.error_kind,
            messages=list(self.messages),
            usage=self.usage,
            events=list(self.recorder.events),
            raw=self.raw,
        )


def _with_main(rewards: dict[str, float], strategy: str) -> dict[str, float]:
    total = main_reward(rewards, strategy)
    return {"reward": total, **{k: v for k, v in rewards.items() if k != "reward"}}


def _step_records(
    spec: HarborTaskSpec, result: HarnessResult | None
) -> list[dict[str, Any]] | None:
    info = result.raw.get("harbor") if result is not None else None
    if not isinstance(info, dict) or info.get("mark") != RECORD_MARK:
        return None
    if info.get("task_dir") != str(spec.task_dir) or not isinstance(info.get("steps"), list):
        return None
    return [r for r in info["steps"] if isinstance(r, dict)]


def _keep(result: HarnessResult | None, key: str, value: Any) -> None:
    """Keep verifier details in the rollout's record (``raw["harbor"]``, saved with it)."""
    if result is not None and isinstance(result.raw, dict):
        info = result.raw.setdefault("harbor", {})
        if isinstance(info, dict):
            info[key] = value


def _raise_unavailable(records: list[dict[str, Any]]) -> None:
    """A step whose verifier's own sandbox could not be made: the rollout could not run."""
    for r in records:
        err = r.get("grading_error")
        if isinstance(err, dict) and err.get("unavailable"):
            raise GradingUnavailable(str(err.get("message")), kind=str(err.get("kind")))


def _raise_scored(records: list[dict[str, Any]], metrics: dict[str, float]) -> None:
    """A step whose grading the agent broke: the task is scored with ``metrics`` (that
    step counted 0), as a failure of that step's kind."""
    for r in records:
        err = r.get("grading_error")
        if isinstance(err, dict) and err.get("scored"):
            cls = _KINDS.get(str(err.get("kind")), HarborGradingError)
            exc = cls(str(err.get("message")))
            exc.value = dict(metrics)
            raise exc


def isolation_of(task: Task, spec: HarborTaskSpec) -> str:
    """Where ``task``'s verifier runs: the run's ``-T verifier_isolation`` (kept in its
    metadata by the taskset; the default otherwise), ``separate`` at least when its
    ``task.toml`` says ``[verifier] environment_mode = "separate"``."""
    info = task.metadata.get("harbor") if isinstance(task.metadata, dict) else None
    chosen = info.get(ISOLATION_KEY) if isinstance(info, dict) else None
    level = check_isolation(chosen) if isinstance(chosen, str) else DEFAULT_ISOLATION
    if spec.config.verifier.environment_mode == "separate":
        level = strongest(level, "separate")
    return level


def _raise_from_record(record: dict[str, Any]) -> None:
    err = record.get("grading_error")
    if isinstance(err, dict):
        cls = _KINDS.get(str(err.get("kind")), HarborGradingError)
        raise cls(str(err.get("message")))
    if record.get("setup_error"):
        raise StepSetupError(f"step {record.get('name')!r} never ran: {record['setup_error']}")
    raise HarborGradingError(f"step {record.get('name')!r} has no verifier result")


async def run_harbor_task(
    task: Task,
    context: RunContext | None,
    on_event: EventCallback | None,
    agent_step: AgentStep,
    *,
    harness_name: str,
) -> HarnessResult:
    """Run ``task`` with ``agent_step`` as one :class:`HarborTrial` (the harnesses' side).

    Start, then the agent once (a single-step task) or step by step (each
    step verified in turn), then stop. Never raises for a task problem: the
    result says what failed.
    """
    context = context or RunContext()
    recorder = EventRecorder(task.task_id, context.rollout_id, on_event)
    await recorder.emit("harness.start", harness=harness_name)
    try:
        spec_for_task(task.require_payload())
    except HarborTaskError as exc:
        return HarnessResult(
            status="failed",
            error=str(exc),
            error_kind="task_error",
            events=list(recorder.events),
        )
    sandbox = context.sandbox
    if sandbox is None:
        raw = {"harbor": {"task_dir": str(spec_for_task(task).task_dir), "mark": RECORD_MARK}}
        return HarnessResult(
            status="failed",
            error=f"the {harness_name!r} harness needs a sandbox (RunContext.sandbox); run it "
            "through AgentEnv or open one with agentkit.sandbox.open_sandbox",
            error_kind="sandbox_missing",
            events=list(recorder.events),
            raw=raw,
        )
    trial = HarborTrial.open(task, sandbox, context, recorder=recorder, harness_name=harness_name)
    if await trial.start():
        if trial.spec.is_multi_step:
            await trial.run_steps(agent_step)
        else:
            await trial.run_agent(agent_step)
    return await trial.stop()
