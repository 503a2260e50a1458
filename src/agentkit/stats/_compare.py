"""Two runs (or two job cells) compared on the tasks both scored: a paired comparison.

Each side's rollouts of a task are averaged first (its mean reward on the
task), so every shared task counts once whatever its number of rollouts;
the difference of the two runs is the mean over tasks of ``A - B``, tested
with a paired t-test (:func:`~agentkit.stats.paired_t_test`). Tasks only
one side scored are listed and left out.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import attrs

from agentkit._errors import SpecError
from agentkit.rundir import SUMMARY, RunReader
from agentkit.stats._estimate import DEFAULT_CONFIDENCE, PairedTest, paired_t_test
from agentkit.stats._leaderboard import RunStats, run_row, scores_stats
from agentkit.stats._scores import Scores, scores_of_run

__all__ = ["Comparison", "TaskDifference", "compare_runs", "compare_scores"]


@attrs.frozen(kw_only=True)
class TaskDifference:
    """One shared task: each side's mean reward and scored rollouts, and ``a - b``."""

    task_id: str
    a_mean: float
    b_mean: float
    a_scored: int
    b_scored: int
    difference: float


@attrs.frozen(kw_only=True)
class Comparison:
    """A paired comparison of A and B on the tasks both scored.

    ``test`` holds the mean difference (A minus B), its standard error,
    interval and the paired t-test's p-value; ``wins_a`` counts the shared
    tasks where A's mean reward is higher, ``wins_b`` where B's is, ``ties``
    where they are equal. ``only_a`` and ``only_b`` are the tasks that only
    one side scored (left out of everything else). ``a`` and ``b`` are each
    side's whole leaderboard row (every task it scored).
    """

    a: RunStats
    b: RunStats
    #: The shared tasks, in A's order.
    tasks: list[TaskDifference]
    only_a: list[str]
    only_b: list[str]
    #: Mean over the shared tasks of each side's per-task mean reward.
    a_mean: float | None
    b_mean: float | None
    test: PairedTest
    wins_a: int
    wins_b: int
    ties: int
    #: What a reader must know of the runs themselves (a run still being written: its
    #: figures are partial; two copies of one run), set by :func:`compare_runs`.
    run_notes: tuple[str, ...] = ()

    @property
    def shared(self) -> int:
        """How many tasks both sides scored."""
        return len(self.tasks)

    def top(self, n: int) -> list[TaskDifference]:
        """Up to ``n`` shared tasks on which A and B differ, the largest difference (in
        size) first; equal sizes keep task order."""
        order = sorted(
            (i for i, d in enumerate(self.tasks) if d.difference != 0),
            key=lambda i: (-abs(self.tasks[i].difference), i),
        )
        return [self.tasks[i] for i in order[: max(n, 0)]]

    @property
    def notes(self) -> list[str]:
        """What a reader must know: a run still being written (its figures are partial),
        tasks left out, why there is no p-value."""
        out = []
        if self.only_a or self.only_b:
            sides = [
                f"{len(ids)} scored only in {side} ({_some(ids)})"
                for side, ids in (("A", self.only_a), ("B", self.only_b))
                if ids
            ]
            out.append(
                f"the runs' tasks differ: {' and '.join(sides)}; compared on the "
                f"{self.shared} shared task{'' if self.shared == 1 else 's'} only"
            )
        a_out = self.a.could_not_run + self.a.unscored
        b_out = self.b.could_not_run + self.b.unscored
        if a_out or b_out:
            out.append(
                f"rollouts left out (could not run, or ran without a total reward): "
                f"A {a_out}, B {b_out}"
            )
        if self.test.note:
            out.append(self.test.note)
        return [*self.run_notes, *out]


def _some(ids: list[str], shown: int = 3) -> str:
    more = f", ... {len(ids) - shown} more" if len(ids) > shown else ""
    return ", ".join(ids[:shown]) + more


def compare_scores(
    a: Scores,
    b: Scores,
    *,
    a_label: str = "A",
    b_label: str = "B",
    confidence: float = DEFAULT_CONFIDENCE,
) -> Comparison:
    """Compare the per-task scores of two sets of rollouts on the tasks both scored."""
    return _compare(
        a,
        b,
        scores_stats(a, label=a_label, confidence=confidence),
        scores_stats(b, label=b_label, confidence=confidence),
        confidence,
    )


def compare_runs(
    a: RunReader | str | os.PathLike[str],
    b: RunReader | str | os.PathLike[str],
    *,
    confidence: float = DEFAULT_CONFIDENCE,
) -> Comparison:
    """Compare two run directories (paths or open runs) on the tasks both scored.

    The same run directory twice (under one path or two) is a
    :class:`~agentkit.SpecError`: a run agrees with itself on every task. A run
    still being written (a process holds it: :meth:`~agentkit.runs.Run.state` is
    ``running``) is compared on what it has finished, and the comparison's notes
    say that its figures are partial; two copies of one run (the same ``run_id``)
    are compared, with a note saying so.
    """
    run_a = a if isinstance(a, RunReader) else RunReader(Path(a))
    run_b = b if isinstance(b, RunReader) else RunReader(Path(b))
    if _same_directory(run_a.path, run_b.path):
        raise SpecError(
            f"{run_a.path} and {run_b.path} are the same run directory: a run compared with "
            "itself agrees on every task; give two different runs"
        )
    a_scores, b_scores = scores_of_run(run_a), scores_of_run(run_b)
    return attrs.evolve(
        _compare(
            a_scores,
            b_scores,
            run_row(run_a, a_scores, label=str(run_a.path), confidence=confidence),
            run_row(run_b, b_scores, label=str(run_b.path), confidence=confidence),
            confidence,
        ),
        run_notes=tuple(_run_notes(run_a, run_b)),
    )


def _same_directory(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def _run_notes(run_a: RunReader, run_b: RunReader) -> list[str]:
    """A run still being written (its figures are partial); two copies of one run."""
    out = []
    for side, run in (("A", run_a), ("B", run_b)):
        if run.state() == "running":
            summary = "" if (run.path / SUMMARY).exists() else "; no summary yet"
            out.append(
                f"{side} ({run.path}) is still being written ({len(run)} of "
                f"{run.info.planned} rollouts finished{summary}): its figures are partial "
                "and will change"
            )
    id_a, id_b = run_a.info.manifest.get("run_id"), run_b.info.manifest.get("run_id")
    if isinstance(id_a, str) and id_a == id_b:
        out.append(
            f"A and B are copies of one run (run id {id_a}): they differ only where one of "
            "them ran rollouts the other has not (a resume of one copy)"
        )
    return out


def _compare(
    a: Scores, b: Scores, a_row: RunStats, b_row: RunStats, confidence: float
) -> Comparison:
    a_tasks = {t.task_id: t for t in a.tasks if t.mean is not None}
    b_tasks = {t.task_id: t for t in b.tasks if t.mean is not None}
    rows = []
    for task_id, x in a_tasks.items():
        y = b_tasks.get(task_id)
        if y is None or x.mean is None or y.mean is None:
            continue
        rows.append(
            TaskDifference(
                task_id=task_id,
                a_mean=x.mean,
                b_mean=y.mean,
                a_scored=x.scored,
                b_scored=y.scored,
                difference=x.mean - y.mean,
            )
        )
    shared = {r.task_id for r in rows}
    return Comparison(
        a=a_row,
        b=b_row,
        tasks=rows,
        only_a=[t for t in a_tasks if t not in shared],
        only_b=[t for t in b_tasks if t not in shared],
        a_mean=math.fsum(r.a_mean for r in rows) / len(rows) if rows else None,
        b_mean=math.fsum(r.b_mean for r in rows) / len(rows) if rows else None,
        test=paired_t_test([r.difference for r in rows], confidence=confidence),
        wins_a=sum(1 for r in rows if r.a_mean > r.b_mean),
        wins_b=sum(1 for r in rows if r.a_mean < r.b_mean),
        ties=sum(1 for r in rows if r.a_mean == r.b_mean),
    )
