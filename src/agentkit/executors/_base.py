"""The executor seam: where the attempts of a run's rollouts run.

The runner (on the driver) plans, retries, persists and summarises; an
executor only runs attempts (:class:`agentkit.env._attempt.RolloutWork`) and
passes their events back live. Two implementations: the local executor
(anyio tasks in the driver's process) and the Ray executor (Ray tasks on a
cluster). Only the driver writes the run directory.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, runtime_checkable

from agentkit._errors import AgentkitError

if TYPE_CHECKING:
    from agentkit.env._attempt import Attempt, EventSink, RolloutWork
    from agentkit.env._runner import Job
    from agentkit.env._store import RunStore

__all__ = ["Executor", "ExecutorError"]

T = TypeVar("T")


class ExecutorError(AgentkitError):
    """The executor cannot run this run: no cluster, no node fit for its sandbox, ..."""


@runtime_checkable
class Executor(Protocol):
    """Where a run's rollouts run; the runner calls these in this order.

    1. :meth:`open` once, with what every attempt needs, before anything else;
    2. :meth:`check` to run the run's preflight where the rollouts will run;
    3. :meth:`prepare` with every job, before the first rollout;
    4. :meth:`attempt` once per attempt (the runner retries, with backoff);
    5. :meth:`close` at the end, also after an error or Ctrl-C.
    """

    #: ``local``, ``ray``: recorded in the manifest's options and the summary.
    name: str

    async def open(self, work: RolloutWork, *, run_dir: Path | None) -> None:
        """Get ready to run attempts of ``work`` (connect to a cluster, send ``work`` once)."""
        ...

    async def check(self, fn: Callable[[], Awaitable[T]], *, sandboxed: bool) -> T:
        """Run ``fn`` (a preflight) where the rollouts run; ``sandboxed``: where sandboxes do."""
        ...

    async def prepare(
        self,
        jobs: Sequence[Job],
        *,
        log_dir: Path | None,
        on_progress: Callable[[str], None] | None,
    ) -> None:
        """Prepare the tasks' environments (image builds) before the first rollout."""
        ...

    async def attempt(
        self, job: Job, events: EventSink, *, last_attempt: bool, store: RunStore | None
    ) -> Attempt:
        """Run one attempt of ``job``; its harness events go to ``events`` as they happen."""
        ...

    async def close(self) -> None:
        """Release what :meth:`open` took."""
        ...

    def describe(self) -> dict[str, Any]:
        """What the summary says about the executor (``name``, and where it ran)."""
        ...
