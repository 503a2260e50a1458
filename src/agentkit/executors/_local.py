"""The local executor: every attempt runs as an anyio task in the driver's process."""

from __future__ import annotations

import tempfile
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from agentkit._executor import Attempt, AttemptWork, EventSink, Job, PlannedTask, RunFiles

__all__ = ["LocalExecutor"]

T = TypeVar("T")


class LocalExecutor:
    """Run every rollout in this process (the default): ``env.run(executor="local")``.

    Sandboxes are made on this machine, under the run directory's
    ``rollouts/`` (or a temporary directory when nothing is persisted).
    """

    name = "local"

    def __init__(self) -> None:
        self._work: AttemptWork | None = None
        self._tmp: tempfile.TemporaryDirectory[str] | None = None

    @property
    def work(self) -> AttemptWork:
        """What the attempts run (set by :meth:`open`)."""
        assert self._work is not None, "LocalExecutor.open() first"
        return self._work

    async def open(self, work: AttemptWork, *, run_dir: Path | None) -> None:
        """Keep ``work``; nothing to connect to."""
        self._work = work

    async def check(self, fn: Callable[[], Awaitable[T]], *, sandboxed: bool) -> T:
        """Run ``fn`` here."""
        return await fn()

    async def prepare(
        self,
        jobs: Sequence[Job],
        *,
        log_dir: Path | None,
        on_progress: Callable[[str], None] | None,
    ) -> None:
        """Call the sandbox kind's optional ``prepare(hints, log_dir=, on_progress=, **options)``.

        Once, with the hints of every task still to run (see
        ``docs/sandboxes.md``); a task whose entry is an exception fails all
        its rollouts with it (``error_kind`` from the exception, not retried).
        """
        work = self.work
        factory = work.sandbox_factory
        prepare = getattr(getattr(factory, "func", factory), "prepare", None)
        if factory is None or not callable(prepare):
            return
        tasks: dict[str, PlannedTask] = {}
        for job in jobs:
            if work.needs_sandbox(job.planned):
                tasks.setdefault(job.planned.task.task_id, job.planned)
        if not tasks:
            return
        planned = list(tasks.values())
        options = dict(getattr(factory, "keywords", None) or {})
        results = await prepare(
            [work.hints_for(p) for p in planned],
            log_dir=log_dir,
            on_progress=on_progress,
            **options,
        )
        for p, outcome in zip(planned, results, strict=True):
            if isinstance(outcome, BaseException):
                work.prepare_errors[p.task.task_id] = outcome

    async def attempt(
        self, job: Job, events: EventSink, *, last_attempt: bool, store: RunFiles | None
    ) -> Attempt:
        """One attempt in this process: its sandbox under the run directory's ``rollouts/``."""
        work = self.work
        root = None
        if work.needs_sandbox(job.planned):
            if store is not None:
                root = store.sandbox_root(job.rollout_id)
            else:
                if self._tmp is None:
                    self._tmp = tempfile.TemporaryDirectory(prefix="agentkit-run-")
                root = Path(self._tmp.name) / job.rollout_id
        artifacts = None if store is None else str(store.artifacts_dir(job.rollout_id))
        return await work.attempt(
            job, events, last_attempt=last_attempt, root=root, artifacts_dir=artifacts
        )

    async def close(self) -> None:
        """Remove the temporary sandbox directory, if one was made."""
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    def describe(self) -> dict[str, Any]:
        """``{"name": "local"}``."""
        return {"name": self.name}
