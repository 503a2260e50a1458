"""The executor contract: where the attempts of a run's rollouts run, and what they run.

The runner (``agentkit.env``, on the driver) plans, retries, persists and
summarises; an :class:`Executor` only runs attempts and passes their events
back live. This module holds the contract and every type it is written in,
so that executors (``agentkit.executors``) never import the runner above
them:

- :class:`PlannedTask` and :class:`Job`: what to run (a task of the plan, one
  rollout of it);
- :class:`Attempt` and :class:`ScoreResult`: what one attempt came to;
- :class:`EventSink`: where an attempt's harness events go;
- :class:`AttemptWork`: what an executor uses of the run's work (the
  runner's ``RolloutWork`` is the one implementation: the harness, rubric,
  context and sandbox kind, and the attempt itself);
- :class:`RunFiles`: what an executor uses of the run directory (the
  runner's run store): where a rollout's sandbox and kept files go.

``agentkit.executors`` re-exports them all.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, Protocol, TypeVar, runtime_checkable

import attrs

from agentkit._calls import ModelCall
from agentkit._context import RunContext
from agentkit._errors import AgentkitError
from agentkit._events import Event
from agentkit._policy import PolicyBoard
from agentkit._result import HarnessResult
from agentkit._rubric import ScoreResult
from agentkit._sandbox import ExecutionHints
from agentkit._task import Task

__all__ = [
    "Attempt",
    "AttemptWork",
    "EventSink",
    "Executor",
    "ExecutorError",
    "Job",
    "PlannedTask",
    "RunFiles",
    "ScoreResult",
]

T = TypeVar("T")


class ExecutorError(AgentkitError):
    """The executor cannot run this run: no cluster, no node fit for its sandbox, ..."""


@attrs.define(slots=True)
class PlannedTask:
    """A task in the run's plan, with its group number."""

    task: Task
    group: int
    example_id: str
    hints: ExecutionHints | None = None


@attrs.define(slots=True)
class Job:
    """One rollout to run: a task and its rollout index."""

    planned: PlannedTask
    rollout_index: int
    rollout_id: str


@attrs.define(slots=True)
class Attempt:
    """What one attempt came to: a final result and its scores, or a failure to retry.

    ``retry`` is True when the runner should back off and try again
    (``result`` says why). ``score`` is None when nothing was scored: the
    rollout could not run (an infrastructure failure: no reward, not a zero)
    or it is retried. ``harness_s`` and ``scoring_s`` are the seconds the
    harness and the rubric took.
    """

    result: HarnessResult
    score: ScoreResult | None
    harness_s: float = 0.0
    scoring_s: float = 0.0
    retry: bool = False
    #: Where it ran, when not in the driver's process (the record's ``worker``).
    worker: dict[str, Any] | None = None
    calls: list[ModelCall] = attrs.field(factory=list)


class EventSink(Protocol):
    """Where an attempt's harness events go: kept in ``events``, passed on live."""

    events: list[Event]

    def on_event(self, event: Event) -> None:
        """The harness's ``on_event``: never blocks, never raises."""
        ...


class AttemptWork(Protocol):
    """What an executor uses of the run's work: the attempt, and what it needs.

    The runner's ``RolloutWork`` (:mod:`agentkit.env`) is the implementation:
    picklable (with a picklable harness, rubric and sandbox options), so the
    Ray executor sends it to worker processes once per run.
    """

    #: The harness, the compiled rubric and the run's context (named when the
    #: Ray executor cannot send one of them to its workers).
    harness: Any
    rubric: Any
    context: RunContext
    #: The sandbox kind with its options (a ``functools.partial`` of its class),
    #: or None when no rollout needs a sandbox.
    sandbox_factory: Callable[..., Any] | None
    sandbox_close_timeout: float
    keep_sandboxes: bool
    #: Tasks whose environment could not be prepared, by task id.
    prepare_errors: dict[str, BaseException]
    #: The policy versions a trainer announces (the rollout service), or None: an
    #: executor whose rollouts run elsewhere gives them a board that reads it there.
    policy: PolicyBoard | None

    def needs_sandbox(self, planned: PlannedTask) -> bool:
        """Whether rollouts of this task run in a sandbox."""
        ...

    def hints_for(self, planned: PlannedTask) -> ExecutionHints:
        """The task's hints plus what the harness needs to see."""
        ...

    async def attempt(
        self,
        job: Job,
        events: EventSink,
        *,
        last_attempt: bool,
        root: Path | None,
        artifacts_dir: str | None,
    ) -> Attempt:
        """Run one attempt of ``job``; ``root`` is its sandbox directory (when it needs one)."""
        ...


class RunFiles(Protocol):
    """What an executor uses of the run directory (the runner's run store)."""

    def sandbox_root(self, rollout_id: str) -> Path:
        """Where a rollout's sandbox directory goes."""
        ...

    def artifacts_dir(self, rollout_id: str) -> Path:
        """Where a rollout's kept files go."""
        ...

    def clear_artifacts(self, rollout_id: str) -> None:
        """Remove an earlier attempt's kept files."""
        ...

    def write_artifact_chunk(
        self,
        rollout_id: str,
        rel_path: str,
        data: bytes,
        *,
        offset: int,
        mode: int = 0o644,
        is_dir: bool = False,
    ) -> None:
        """Write one piece of a kept file (sent back from a worker)."""
        ...

    def link_artifacts(self, rollout_id: str, target: str) -> None:
        """Point the rollout's kept files at ``target`` (a directory every node sees)."""
        ...


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

    async def open(self, work: AttemptWork, *, run_dir: Path | None) -> None:
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
        self, job: Job, events: EventSink, *, last_attempt: bool, store: RunFiles | None
    ) -> Attempt:
        """Run one attempt of ``job``; its harness events go to ``events`` as they happen."""
        ...

    async def close(self) -> None:
        """Release what :meth:`open` took."""
        ...

    def describe(self) -> dict[str, Any]:
        """What the summary says about the executor (``name``, and where it ran)."""
        ...
