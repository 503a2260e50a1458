"""One progress display for all of a job's cells, on stderr.

On a terminal (``live``): one row per cell and a total row, redrawn in place
by rich: the cell's name, rollouts done of planned, running (``run``),
errors (``err``), mean reward so far, elapsed time and time remaining.
Elsewhere (``lines``, a log file or a pipe): one plain line when a cell
starts, when it finishes (or fails) and then the job's total, so that logs
stay readable.
"""

from __future__ import annotations

import sys
from typing import Any, Literal

import attrs
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from agentkit.rundir import RolloutRecord

__all__ = ["CellCounts", "JobProgress", "ProgressMode"]

#: ``live``: rows redrawn in place; ``lines``: plain lines; None: nothing.
ProgressMode = Literal["live", "lines"] | None


@attrs.define
class CellCounts:
    """What a cell has done so far (this session's rollouts and those done before)."""

    planned: int
    done: int
    running: int = 0
    errors: int = 0
    reward_sum: float = 0.0
    scored: int = 0

    @property
    def mean(self) -> str:
        return f"{self.reward_sum / self.scored:.3f}" if self.scored else "-"


class _CellSink:
    """The progress sink one cell's runner reports to."""

    def __init__(self, display: JobProgress, name: str) -> None:
        self.display = display
        self.name = name

    def started(self) -> None:
        self.display.rollout_started(self.name)

    def finished(self, record: RolloutRecord) -> None:
        self.display.rollout_finished(self.name, record)


class JobProgress:
    """The job's display: add every cell, enter it, then report through :meth:`sink`."""

    def __init__(self, mode: ProgressMode, *, console: Console | None = None) -> None:
        self.mode = mode
        self.console = console or Console(stderr=True)
        self.cells: dict[str, CellCounts] = {}
        self.total = CellCounts(planned=0, done=0)
        self.finished_cells = 0
        self._progress: Progress | None = None
        self._tasks: dict[str, TaskID] = {}

    @staticmethod
    def mode_for(progress: bool | None) -> ProgressMode:
        """True: ``live`` on a terminal, else ``lines``; None: ``live`` on a terminal,
        else nothing; False: nothing."""
        if progress is False:
            return None
        if sys.stderr.isatty():
            return "live"
        return "lines" if progress else None

    def add_cell(self, name: str, *, planned: int, done: int) -> None:
        """A cell of the job, with its planned rollouts and those already finished."""
        self.cells[name] = CellCounts(planned=planned, done=done)
        self.total.planned += planned
        self.total.done += done

    def sink(self, name: str) -> _CellSink:
        """Where cell ``name``'s runner reports its rollouts."""
        return _CellSink(self, name)

    def __enter__(self) -> JobProgress:
        if self.mode == "live":
            width = min(max([len(n) for n in self.cells] + [5]), 48)
            self._progress = Progress(
                TextColumn(f"{{task.description:<{width}.{width}}}"),
                BarColumn(bar_width=20),
                MofNCompleteColumn(),
                TextColumn("run {task.fields[running]}"),
                TextColumn("err {task.fields[errors]}"),
                TextColumn("reward {task.fields[reward]}"),
                TimeElapsedColumn(),
                TimeRemainingColumn(),
                console=self.console,
                transient=False,
            )
            for name, counts in self.cells.items():
                self._tasks[name] = self._add(name, counts)
            self._tasks[""] = self._add("total", self.total)
            self._progress.start()
        return self

    def _add(self, description: str, counts: CellCounts) -> TaskID:
        assert self._progress is not None
        return self._progress.add_task(
            description,
            total=counts.planned,
            completed=counts.done,
            running=0,
            errors=0,
            reward="-",
        )

    def __exit__(self, *exc: object) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None

    # -- what the cells report ----------------------------------------------------
    def cell_started(self, name: str, info: dict[str, Any]) -> None:
        """A cell's run began (after its preflight): ``info`` is its ``on_start`` plan."""
        if self.mode != "lines":
            return
        to_run = info.get("to_run", 0)
        line = f"cell {name}: {to_run} rollout{'' if to_run == 1 else 's'} to run"
        if info.get("already_finished"):
            line += f" ({info['already_finished']} of {info.get('planned')} already finished)"
        self._line(line)

    def rollout_started(self, name: str) -> None:
        self._count(name, running=1)

    def rollout_finished(self, name: str, record: RolloutRecord) -> None:
        reward = record.reward
        self._count(
            name,
            running=-1,
            done=1,
            errors=0 if record.ok else 1,
            reward=reward,
        )

    def cell_finished(self, name: str, summary: dict[str, Any]) -> None:
        """A cell's run ended (complete or not)."""
        self.finished_cells += 1
        if self.mode != "lines":
            return
        mean = summary.get("mean_reward")
        reward = "-" if not isinstance(mean, (int, float)) else f"{mean:.3f}"
        errors = summary.get("errors") or 0
        self._line(
            f"cell {name}: finished {summary.get('finished', 0)}/{summary.get('planned', 0)} "
            f"rollouts, mean reward {reward}, {errors} error{'' if errors == 1 else 's'}"
            + self._job_line()
        )

    def cell_failed(self, name: str, error: str) -> None:
        """A cell's run stopped with an error; the other cells go on."""
        self.finished_cells += 1
        counts = self.cells.get(name)
        if counts is not None:
            self.total.running -= counts.running
            counts.running = 0
        if self.mode == "live" and self._progress is not None:
            self._progress.console.print(f"cell {name} failed: {error}", markup=False)
            return
        if self.mode == "lines":
            self._line(f"cell {name}: failed: {error}" + self._job_line())

    # -- drawing ---------------------------------------------------------------
    def _job_line(self) -> str:
        t = self.total
        return (
            f" (job: {self.finished_cells}/{len(self.cells)} cells, {t.done}/{t.planned} rollouts)"
        )

    def _line(self, text: str) -> None:
        self.console.print(text, markup=False, highlight=False, soft_wrap=True)

    def _count(
        self,
        name: str,
        *,
        running: int = 0,
        done: int = 0,
        errors: int = 0,
        reward: float | None = None,
    ) -> None:
        counts = self.cells[name]
        for c in (counts, self.total):
            c.running += running
            c.done += done
            c.errors += errors
            if reward is not None:
                c.reward_sum += reward
                c.scored += 1
        if self._progress is None:
            return
        for key, c in ((name, counts), ("", self.total)):
            self._progress.update(
                self._tasks[key],
                completed=c.done,
                running=c.running,
                errors=c.errors,
                reward=c.mean,
            )
