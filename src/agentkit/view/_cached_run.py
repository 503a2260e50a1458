"""One run as the viewer keeps it open: what is derived from it, recomputed only when its
files change.

The catalog (:mod:`agentkit.view._catalog`) keeps one :class:`CachedRun` per
run it serves, around one :class:`agentkit.runs.Run` (lazy: a page of a
10,000-rollout run parses 50 lines; filters and sorting parse the small
fields of every rollout once, then only new lines). What the pages derive
from it (its rows in task order, its summary, its per-task scores, its
charts' values) is kept while the run's files do not change.
"""

from __future__ import annotations

import contextlib
import gc
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import agentkit.runs
from agentkit.rundir import LOCK, MANIFEST, ROLLOUTS, SUMMARY, lock_held
from agentkit.runs import Rollout, Run
from agentkit.stats import RunStats, Scores, scores_of_run, scores_stats
from agentkit.view._charts import Values, values_of

__all__ = ["SUMMARY_EVERY_S", "CachedRun", "mtime", "size"]

#: While a run is written, its summary is recomputed at most this often (seconds), and
#: never more than a fifth of the time (a large run's summary takes a while).
SUMMARY_EVERY_S = 2.0


@contextlib.contextmanager
def _bulk() -> Iterator[None]:
    """No garbage collection while a large run is read: the reader makes an object or
    more per rollout, and each collection on the way would walk all of those made so far
    (it halves the time to read 100,000 rollouts). What is dropped meanwhile is collected
    after."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def mtime(path: Path) -> float:
    """The file's modification time (0 when it is not there)."""
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def size(path: Path) -> int:
    """The file's size (0 when it is not there)."""
    try:
        return path.stat().st_size
    except OSError:
        return 0


class CachedRun:
    """One run and what is derived from it, recomputed only when its files change."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.manifest_mtime = mtime(path / MANIFEST)
        self.run: Run = agentkit.runs.open(path)
        self._rows: list[Rollout] | None = None
        self._by_task: dict[str, list[Rollout]] | None = None
        self._summary: dict[str, Any] | None = None
        self._summary_len = -1
        self._summary_at = 0.0
        self._summary_cost = 0.0
        self._tasks: dict[str, Any] | None = None
        self._scores: tuple[Any, Scores] | None = None
        self._settled: tuple[Any, dict[str, Any] | None] | None = None
        self._values: tuple[int, Values] | None = None

    def refresh(self) -> None:
        """Index the lines appended since the last look."""
        with _bulk():
            new = self.run.refresh()
        if new:
            self._rows = None
            self._by_task = None

    def rows(self) -> list[Rollout]:
        """Every finished rollout, in task order (small fields only)."""
        if self._rows is None:
            with _bulk():
                rows = self.run.rollouts()
            rows.sort(key=lambda r: (r.group, r.rollout_index))
            self._rows = rows
        return self._rows

    def by_task(self) -> dict[str, list[Rollout]]:
        """Every finished rollout, by task."""
        if self._by_task is None:
            out: dict[str, list[Rollout]] = {}
            for r in self.rows():
                out.setdefault(r.task_id, []).append(r)
            self._by_task = out
        return self._by_task

    def task_rollouts(self, task_id: str) -> list[Rollout]:
        """One task's rollouts in rollout-index order (only its lines are parsed)."""
        if task_id in self.run.info.task_ids:
            return [self.run.rollout(r) for r in self.run.rollout_ids(task_id=task_id)]
        return self.by_task().get(task_id, [])

    def summary(self, *, running: bool) -> dict[str, Any]:
        """summary.json when it is current, else recomputed (throttled while running)."""
        n = len(self.run)
        if self._summary is not None and self._summary_len == n:
            return self._summary
        wait = max(SUMMARY_EVERY_S, 5 * self._summary_cost)
        if self._summary is not None and running and time.monotonic() - self._summary_at < wait:
            return self._summary
        start = time.monotonic()
        stored = self.run.stored_summary()
        if stored is not None and stored.get("finished") == n and "tasks" in stored:
            summary = stored
        else:
            summary = self.run.summary()
        self._summary, self._summary_len = summary, n
        self._summary_at = time.monotonic()
        self._summary_cost = self._summary_at - start
        return summary

    def tasks(self) -> dict[str, Any]:
        """The run's tasks, by id."""
        if self._tasks is None:
            self._tasks = self.run.tasks()
        return self._tasks

    def metrics(self) -> list[dict[str, Any]]:
        """The compiled rubric's metrics (from the manifest): name, weight, origin,
        description."""
        rubric = self.run.info.manifest.get("rubric") or {}
        return [
            {
                "name": str(m.get("name")),
                "weight": float(m.get("weight") or 0.0),
                "origin": str(m.get("origin", "")),
                "description": str(m.get("description", "")),
            }
            for m in rubric.get("metrics") or []
            if isinstance(m, dict)
        ]

    def settled(self) -> dict[str, Any] | None:
        """summary.json when no process writes the run and the summary counts every line of
        rollouts.jsonl (:meth:`agentkit.runs.Run.current_summary`), else None: then what a
        job's page shows of the run comes from the summary, without indexing its rollouts
        (a newline count instead of a scan of every line)."""
        key = (size(self.path / ROLLOUTS), mtime(self.path / SUMMARY))
        if self._settled is not None and self._settled[0] == key:
            return self._settled[1]
        found = None
        if lock_held(self.path / LOCK) is False:
            stored = self.run.current_summary()
            if stored is not None and isinstance(stored.get("tasks"), list):
                found = stored
        self._settled = (key, found)
        return found

    def scores(self) -> Scores:
        """The run's per-task scores (:func:`agentkit.stats.scores_of_run`: from a current
        summary.json, else from the rollouts), kept while the run does not change."""
        key = (size(self.path / ROLLOUTS), mtime(self.path / SUMMARY))
        if self._scores is None or self._scores[0] != key:
            with _bulk():
                self._scores = (key, scores_of_run(self.run))
        return self._scores[1]

    def row(self, label: str) -> RunStats:
        """The run's leaderboard row (as :func:`agentkit.stats.run_stats` makes it)."""
        info = self.run.info
        return scores_stats(
            self.scores(),
            label=label,
            path=str(self.path),
            taskset=info.taskset,
            harness=info.harness,
            model=info.model,
            planned=info.planned,
        )

    def values(self) -> Values:
        """The values the charts draw (every finished rollout read once), kept while the
        run does not change."""
        n = len(self.run)
        if self._values is None or self._values[0] != n:
            self._values = (n, values_of(self.rows()))
        return self._values[1]
