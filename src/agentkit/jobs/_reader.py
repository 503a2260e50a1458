"""Reading job directories: the job, its cells, their run directories, its leaderboard.

``agentkit.jobs.open(JOBDIR)`` reads ``job.json`` only; each cell's run
directory is opened with :mod:`agentkit.runs` when asked for, so a job of
many cells opens at once. Statistics come from :mod:`agentkit.stats`, the
same rows and comparisons ``agentkit runs --compare`` and ``agentkit
compare`` print.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

import attrs

from agentkit._errors import SpecError
from agentkit.jobs._layout import CELLS_DIR, JOB_FILE, LOCK
from agentkit.jobs._store import read_job_json
from agentkit.rundir import MANIFEST, lock_held
from agentkit.runs import Run, RunState, open_run
from agentkit.stats import DEFAULT_CONFIDENCE, Comparison, RunStats, compare_runs, run_stats

__all__ = ["CellState", "JobCell", "JobDir", "JobState", "is_job_dir", "open_job"]

#: A cell's state: its run's (:data:`agentkit.runs.RunState`), or ``not started``.
CellState = RunState | Literal["not started"]
#: A job's state: ``running`` (a process holds its lock), ``complete`` (every cell
#: complete), ``not started`` (no cell has a run yet), else ``incomplete``.
JobState = Literal["running", "complete", "incomplete", "not started"]


@attrs.frozen(kw_only=True)
class JobCell:
    """One cell of a job directory: its name, where it sits on the axes, its settings
    and its run directory (an ordinary run directory, once started)."""

    name: str
    #: The cell's run directory (``JOBDIR/cells/<name>``).
    run_dir: Path
    #: Axis -> the cell's label on it (``taskset``, ``harness``, ``model``, matrix keys).
    axes: dict[str, str]
    #: The taskset spec and its options (secrets ``***``).
    taskset: dict[str, Any]
    #: The harness name and its options (secrets ``***``).
    harness: dict[str, Any]
    #: The run options the cell was given, as job.json stores them (secrets ``***``).
    settings: dict[str, Any]
    #: From ``[[cells]]`` rather than the cross product.
    explicit: bool = False

    @property
    def started(self) -> bool:
        """Whether the cell's run directory holds a run (its manifest was written)."""
        return (self.run_dir / MANIFEST).is_file()

    def open(self) -> Run:
        """The cell's run (:class:`agentkit.runs.Run`); a
        :class:`~agentkit.SpecError` when it was never started."""
        if not self.started:
            raise SpecError(f"cell {self.name} has not started: {self.run_dir} holds no run yet")
        return open_run(self.run_dir)

    def state(self) -> CellState:
        """Its run's :meth:`~agentkit.runs.Run.state`, or ``not started``."""
        if not self.started:
            return "not started"
        return self.open().state()


class JobDir:
    """A job directory, read: ``job.json`` and the cells' run directories.

    >>> job = agentkit.jobs.open("jobs/sweep")                        # doctest: +SKIP
    >>> [(c.name, c.axes, c.state()) for c in job.cells]              # doctest: +SKIP
    >>> job.cell("arith.chat.gpt-4o-mini").open().summary()           # doctest: +SKIP
    >>> rows = job.leaderboard()                                      # doctest: +SKIP
    >>> c = job.compare("arith.chat.gpt-4o", "arith.chat.gpt-4o-mini")  # doctest: +SKIP
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        #: ``job.json`` as stored.
        self.data: dict[str, Any] = read_job_json(self.path)
        self.cells: list[JobCell] = [self._cell(c) for c in self.data.get("cells") or []]

    def _cell(self, entry: dict[str, Any]) -> JobCell:
        # read_job_json checked each cell: a name, its run directory inside the job's
        name: str = entry["name"]
        run_dir = entry.get("run_dir") or f"{CELLS_DIR}/{name}"
        return JobCell(
            name=name,
            run_dir=self.path / run_dir,
            axes=dict(entry.get("axes") or {}),
            taskset=dict(entry.get("taskset") or {}),
            harness=dict(entry.get("harness") or {}),
            settings=dict(entry.get("settings") or {}),
            explicit=bool(entry.get("explicit")),
        )

    @property
    def name(self) -> str:
        """The job's name."""
        return str(self.data.get("name"))

    @property
    def created_at(self) -> float | None:
        """When the job started (Unix time)."""
        value = self.data.get("created_at")
        return float(value) if isinstance(value, (int, float)) else None

    @property
    def concurrency(self) -> int | None:
        """The budget of running rollouts the cells shared (the last session's)."""
        value = self.data.get("concurrency")
        return value if isinstance(value, int) else None

    @property
    def axes(self) -> dict[str, list[str]]:
        """The job's axes and their labels, in order: ``taskset``, ``harness``,
        ``model`` (when the job has models), then each matrix key."""
        return {str(k): list(v) for k, v in (self.data.get("axes") or {}).items()}

    @property
    def spec(self) -> dict[str, Any]:
        """The job file as read, normalised (labels filled in, secrets ``***``)."""
        spec: dict[str, Any] = self.data.get("spec") or {}
        return spec

    def cell(self, name: str) -> JobCell:
        """One cell, by name (a :class:`~agentkit.SpecError` lists the cells)."""
        for c in self.cells:
            if c.name == name:
                return c
        names = ", ".join(c.name for c in self.cells)
        raise SpecError(f"{self.path}: the job has no cell {name!r}; its cells: {names}")

    def running(self) -> bool:
        """Whether a process (``agentkit job run``) holds the job's lock now, read from
        /proc/locks without taking it; false when that cannot be known. Its cells' runs
        say whether they run (:meth:`agentkit.runs.Run.state`)."""
        return bool(lock_held(self.path / LOCK))

    def state(self) -> JobState:
        """``running``, ``complete``, ``incomplete`` or ``not started`` (see :data:`JobState`)."""
        if self.running():
            return "running"
        states = [c.state() for c in self.cells]
        if all(s == "not started" for s in states):
            return "not started"
        return "complete" if all(s == "complete" for s in states) else "incomplete"

    def leaderboard(self, *, confidence: float = DEFAULT_CONFIDENCE) -> list[RunStats]:
        """One :class:`~agentkit.stats.RunStats` row per started cell, labelled with the
        cell's name, in the job's order (:func:`agentkit.stats.ranked` sorts them)."""
        return [
            run_stats(c.open(), label=c.name, confidence=confidence)
            for c in self.cells
            if c.started
        ]

    def compare(self, cell_a: str, cell_b: str) -> Comparison:
        """Cell A against cell B, paired on the tasks both scored
        (:func:`agentkit.stats.compare_runs`)."""
        return compare_runs(self.cell(cell_a).open(), self.cell(cell_b).open())

    def __repr__(self) -> str:
        return f"JobDir({str(self.path)!r}, cells={len(self.cells)})"


def open_job(path: str | os.PathLike[str]) -> JobDir:
    """Open a job directory (reads ``job.json``; a :class:`~agentkit.AgentkitError`
    when it is not one, or of a format this agentkit does not read)."""
    return JobDir(path)


def is_job_dir(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` holds a ``job.json``."""
    return (Path(path) / JOB_FILE).is_file()
