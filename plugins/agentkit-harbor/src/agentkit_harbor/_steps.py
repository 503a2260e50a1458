"""The agent-step contract of a Harbor trial: what a harness gets for one agent run, and returns.

* every Harbor task carries ``metadata["harbor"]["task_dir"]``; harnesses
  and the rubric load the task directory from there (:func:`spec_for_task`);
* an agent step is ``async (StepRun) -> AgentStepOutcome``: one agent run on
  a whole single-step task or on one step of a multi-step task, with that
  step's instruction, sandbox, working directory, env, timeout and user;
* :class:`agentkit_harbor.HarborTrial` (``_trial.py``) calls it between
  Harbor's other phases (start, step preparation, verification) and leaves
  per-step records in ``HarnessResult.raw["harbor"]["steps"]``, which the
  rubric aggregates with ``multi_step_reward_strategy``.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import attrs

from agentkit import EventRecorder, RunContext, Sandbox, Status, Task, Usage
from agentkit_harbor._config import HealthcheckConfig
from agentkit_harbor._errors import HarborTaskError
from agentkit_harbor._sandbox_io import exec_logged, rollout_dir_of
from agentkit_harbor._spec import HarborStepSpec, HarborTaskSpec, load_task_dir_cached

__all__ = [
    "RECORD_MARK",
    "AgentStep",
    "AgentStepOutcome",
    "StepRun",
    "harbor_dir",
    "run_healthcheck",
    "spec_for_task",
]

#: Marks step records written by this plugin (the rubric trusts only these).
RECORD_MARK = "agentkit_harbor"


def spec_for_task(task: Task) -> HarborTaskSpec:
    """The Harbor task directory behind ``task`` (from ``metadata["harbor"]["task_dir"]``)."""
    info = task.metadata.get("harbor") if isinstance(task.metadata, dict) else None
    task_dir = info.get("task_dir") if isinstance(info, dict) else None
    if not isinstance(task_dir, str):
        raise HarborTaskError(
            f"task {task.task_id!r} is not a Harbor task: its metadata has no harbor.task_dir "
            "(load it with the 'harbor' taskset)"
        )
    return load_task_dir_cached(task_dir)


@attrs.frozen(kw_only=True)
class StepRun:
    """What an agent step gets: the instruction, the sandbox and the limits of this step."""

    task: Task
    spec: HarborTaskSpec
    step: HarborStepSpec | None
    instruction: str
    sandbox: Sandbox
    workdir: str
    env: dict[str, str]
    timeout_sec: float | None
    user: str | int | None
    recorder: EventRecorder
    context: RunContext


@attrs.frozen(kw_only=True)
class AgentStepOutcome:
    """How one agent run (a whole task, or one step) ended."""

    status: Status
    output: str | None = None
    error: str | None = None
    error_kind: str | None = None
    messages: list[dict[str, Any]] = attrs.field(factory=list)
    usage: Usage | None = None
    raw: dict[str, Any] = attrs.field(factory=dict)


AgentStep = Callable[[StepRun], Awaitable[AgentStepOutcome]]


async def run_healthcheck(
    sandbox: Sandbox,
    check: HealthcheckConfig,
    *,
    cwd: str,
    env: dict[str, str],
    recorder: EventRecorder,
    purpose: str,
) -> str | None:
    """Run a Docker-style healthcheck; None when healthy, else why not.

    During ``start_period_sec`` failures do not count; after it, ``retries``
    consecutive failures mean unhealthy.
    """
    started = time.monotonic()
    failures = 0
    last = ""
    while True:
        res = await exec_logged(
            sandbox,
            ["bash", "-c", check.command],
            recorder=recorder,
            purpose=purpose,
            cwd=cwd,
            env=env,
            timeout=check.timeout_sec,
        )
        if res.ok:
            return None
        last = (res.stderr or res.stdout).strip()[-300:] or f"exit code {res.exit_code}"
        in_grace = time.monotonic() - started < check.start_period_sec
        if not in_grace:
            failures += 1
            if failures >= max(1, check.retries):
                return f"healthcheck {check.command!r} failed {failures} time(s): {last}"
        await anyio.sleep(check.start_interval_sec if in_grace else check.interval_sec)


def harbor_dir(sandbox: Sandbox | None, context: RunContext | None = None) -> Path | None:
    """Where artifacts and verifier logs are kept: ``<artifacts_dir>/harbor``.

    The run's ``artifacts_dir`` outlives the rollout; without one (a harness
    run on its own), the sandbox's own directory is used.
    """
    if context is not None and context.artifacts_dir:
        return Path(context.artifacts_dir) / "harbor"
    root = rollout_dir_of(sandbox)
    return root / "harbor" if root else None
