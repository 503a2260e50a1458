"""Executors: where a run's rollouts run.

``local`` (the default) runs every rollout in this process; ``ray`` runs them
as Ray tasks across a cluster (``pip install 'agentkit[ray]'``; see
``docs/distributed.md``). Both share the runner's planning, retries,
persistence, resume and events: only the driver writes the run directory.
Importing this module never imports Ray.

The :class:`Executor` contract is written in the types re-exported here
(defined in :mod:`agentkit._executor`, below both the runner and the
executors): :class:`Job` and :class:`PlannedTask` (what to run),
:class:`Attempt` and :class:`ScoreResult` (what an attempt came to),
:class:`EventSink` (where its events go), :class:`AttemptWork` (what an
executor uses of the run's work) and :class:`RunFiles` (what it uses of the
run directory).
"""

from __future__ import annotations

from agentkit._errors import SpecError
from agentkit._executor import (
    Attempt,
    AttemptWork,
    EventSink,
    Executor,
    ExecutorError,
    Job,
    PlannedTask,
    RunFiles,
    ScoreResult,
)
from agentkit.executors._local import LocalExecutor
from agentkit.executors._ray import RayExecutor

__all__ = [
    "EXECUTORS",
    "Attempt",
    "AttemptWork",
    "EventSink",
    "Executor",
    "ExecutorError",
    "Job",
    "LocalExecutor",
    "PlannedTask",
    "RayExecutor",
    "RunFiles",
    "ScoreResult",
    "resolve_executor",
]

#: The executors ``executor=`` (``--executor``) names.
EXECUTORS: tuple[str, ...] = ("local", "ray")


def resolve_executor(executor: str | Executor, *, ray_address: str | None = None) -> Executor:
    """The executor named ``executor`` (``local`` or ``ray``), or ``executor`` itself.

    ``ray_address`` is the Ray cluster to join (``executor="ray"`` only).
    """
    if isinstance(executor, str):
        if executor == "local":
            if ray_address is not None:
                raise SpecError("ray_address (--ray-address) needs executor='ray' (--executor ray)")
            return LocalExecutor()
        if executor == "ray":
            return RayExecutor(address=ray_address)
        raise SpecError(f"unknown executor {executor!r}; choose one of: {', '.join(EXECUTORS)}")
    if not isinstance(executor, Executor):
        raise SpecError(
            f"executor must be 'local', 'ray' or an Executor; got {type(executor).__name__}"
        )
    if ray_address is not None:
        raise SpecError("give ray_address to RayExecutor(address=...), not beside an executor")
    return executor
