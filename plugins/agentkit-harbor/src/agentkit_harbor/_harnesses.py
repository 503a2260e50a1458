"""The ``oracle`` and ``nop`` harnesses, and :class:`StepwiseHarness` for any other harness.

``oracle`` runs the task's own ``solution/solve.sh`` (a step's
``steps/<name>/solution/solve.sh`` when it has one) in the rollout's sandbox
with the agent timeout and ``[solution].env``: it shows a task can be solved.
``nop`` does nothing: it shows a task's tests fail without work. Both drive
multi-step tasks step by step (see :mod:`agentkit_harbor._trial`).
"""

from __future__ import annotations

from typing import Any, ClassVar

import anyio

from agentkit import EventCallback, HarnessResult, RunContext, Task
from agentkit_harbor._envvars import resolve_env
from agentkit_harbor._errors import HarborTaskError
from agentkit_harbor._sandbox_io import exec_logged, upload_tree
from agentkit_harbor._steps import AgentStepOutcome, StepRun
from agentkit_harbor._trial import run_harbor_task

__all__ = ["NopHarness", "OracleHarness", "StepwiseHarness"]

SOLUTION_DIR = "/solution"


#: Why the Harbor harnesses refuse other tasks.
_NOT_HARBOR = (
    "the task is not a Harbor task (a task directory with tests/test.sh), and this harness "
    "runs only Harbor tasks"
)


def _is_harbor_task(task: Task) -> bool:
    info = task.metadata.get("harbor") if isinstance(task.metadata, dict) else None
    return isinstance(info, dict) and isinstance(info.get("task_dir"), str)


class OracleHarness:
    """Runs the task's reference solution (``solution/solve.sh``); needs a sandbox."""

    name: ClassVar[str] = "oracle"
    requires_sandbox: ClassVar[bool] = True

    def supports(self, task: Task) -> bool:
        """Only Harbor tasks have a solution to run."""
        return _is_harbor_task(task)

    def unsupported_reason(self, task: Task) -> str | None:
        """Why ``task`` cannot be run: it is not a Harbor task (None when it is)."""
        return None if _is_harbor_task(task) else _NOT_HARBOR

    async def run(
        self,
        task: Task,
        context: RunContext | None = None,
        on_event: EventCallback | None = None,
    ) -> HarnessResult:
        """Run solve.sh (per step for multi-step tasks) and report how it ended."""
        return await run_harbor_task(task, context, on_event, _solve, harness_name=self.name)


async def _solve(run: StepRun) -> AgentStepOutcome:
    spec, step = run.spec, run.step
    solution_dir = spec.solution_dir
    label = "solution/solve.sh"
    if step is not None and (step.solution_dir / "solve.sh").is_file():
        solution_dir = step.solution_dir
        label = f"steps/{step.name}/solution/solve.sh"
    if not (solution_dir / "solve.sh").is_file():
        where = f" (nor steps/{step.name}/solution/solve.sh)" if step is not None else ""
        return AgentStepOutcome(
            status="failed",
            error=f"the task has no solution/solve.sh{where}",
            error_kind="no_solution",
        )
    try:
        solution_env = resolve_env(
            spec.config.solution.env, source=str(spec.config_path), field="solution.env"
        )
    except HarborTaskError as exc:
        return AgentStepOutcome(status="failed", error=str(exc), error_kind="task_error")
    env = {"DEBIAN_FRONTEND": "noninteractive", **run.env, **solution_env}
    try:
        reset = await exec_logged(
            run.sandbox,
            ["bash", "-c", f"mkdir -p {SOLUTION_DIR} && find {SOLUTION_DIR} -mindepth 1 -delete"],
            recorder=run.recorder,
            purpose="oracle.prepare",
        )
        if not reset.ok:
            raise OSError(reset.stderr.strip() or f"exit code {reset.exit_code}")
        await upload_tree(run.sandbox, solution_dir, SOLUTION_DIR, root=spec.task_dir)
    except Exception as exc:
        return AgentStepOutcome(
            status="failed",
            error=f"could not place {label} at {SOLUTION_DIR}: {type(exc).__name__}: {exc}",
            error_kind="sandbox",
        )
    res = await exec_logged(
        run.sandbox,
        ["bash", f"{SOLUTION_DIR}/solve.sh"],
        recorder=run.recorder,
        purpose="oracle.solve",
        cwd=run.workdir,
        env=env,
        timeout=run.timeout_sec,
        user=run.user,
    )
    output = res.stdout + (("\n[stderr]\n" + res.stderr) if res.stderr.strip() else "")
    raw = {"solve_exit_code": res.exit_code, "solve_timed_out": res.timed_out}
    if res.timed_out:
        return AgentStepOutcome(
            status="timeout",
            output=output,
            error=f"{label} ran past the agent timeout of {run.timeout_sec:g} s",
            error_kind="agent_timeout",
            raw=raw,
        )
    if res.exit_code != 0:
        return AgentStepOutcome(
            status="failed",
            output=output,
            error=f"{label} exited with code {res.exit_code}",
            error_kind="agent_error",
            raw=raw,
        )
    return AgentStepOutcome(status="completed", output=output, raw=raw)


class NopHarness:
    """Does nothing (status ``completed``): a task's tests should then fail."""

    name: ClassVar[str] = "nop"
    requires_sandbox: ClassVar[bool] = True

    def supports(self, task: Task) -> bool:
        """Only Harbor tasks have tests that a run of nothing should fail."""
        return _is_harbor_task(task)

    def unsupported_reason(self, task: Task) -> str | None:
        """Why ``task`` cannot be run: it is not a Harbor task (None when it is)."""
        return None if _is_harbor_task(task) else _NOT_HARBOR

    async def run(
        self,
        task: Task,
        context: RunContext | None = None,
        on_event: EventCallback | None = None,
    ) -> HarnessResult:
        """Prepare each step (multi-step tasks) and verify it, running no agent at all."""
        return await run_harbor_task(task, context, on_event, _nothing, harness_name=self.name)


async def _nothing(run: StepRun) -> AgentStepOutcome:
    return AgentStepOutcome(status="completed", output="")


class StepwiseHarness:
    """Runs any harness on a Harbor task step by step, as the oracle does.

    Each step's instruction becomes the inner harness's input (with the
    step's timeout as ``Limits.timeout_sec``); workdir/, setup.sh, the
    healthcheck and per-step verification happen around it. Single-step
    tasks pass straight through.
    """

    requires_sandbox: ClassVar[bool] = True

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.name = f"stepwise-{getattr(inner, 'name', type(inner).__name__)}"

    def supports(self, task: Task) -> bool:
        """Only Harbor tasks have steps to run."""
        return _is_harbor_task(task)

    def unsupported_reason(self, task: Task) -> str | None:
        """Why ``task`` cannot be run: it is not a Harbor task (None when it is)."""
        return None if _is_harbor_task(task) else _NOT_HARBOR

    async def run(
        self,
        task: Task,
        context: RunContext | None = None,
        on_event: EventCallback | None = None,
    ) -> HarnessResult:
        """Run the inner harness once per step of ``task``."""

        async def one(run: StepRun) -> AgentStepOutcome:
            import attrs

            step_task = attrs.evolve(task, input=run.instruction)
            limits = attrs.evolve(run.context.limits, timeout_sec=run.timeout_sec)
            ctx = run.context.evolve(limits=limits)

            async def forward(event: Any) -> None:
                await run.recorder.emit(event.type, **event.data)

            try:
                with anyio.fail_after(run.timeout_sec):
                    result = await self.inner.run(step_task, ctx, forward)
            except TimeoutError:
                return AgentStepOutcome(
                    status="timeout",
                    error=f"ran past the agent timeout of {run.timeout_sec:g} s",
                    error_kind="agent_timeout",
                )
            return AgentStepOutcome(
                status=result.status,
                output=result.output,
                error=result.error,
                error_kind=result.error_kind,
                messages=list(result.messages),
                usage=result.usage,
            )

        return await run_harbor_task(task, context, on_event, one, harness_name=self.name)
