"""The statistics the pages draw, as JSON: leaderboards, paired comparisons, heat maps.

Every number comes from :mod:`agentkit.stats` (the same rows and tests
``agentkit runs --compare`` and ``agentkit compare`` print): a leaderboard
row per run with its mean reward and task-clustered interval, each run
against a baseline by the paired t-test on the tasks both scored, and the
mean reward of every task in every run (the heat map). The runs come as
``(name, scores, row)``: the viewer's name of the run, its
:class:`~agentkit.stats.Scores` and its :class:`~agentkit.stats.RunStats`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agentkit.stats import (
    RunStats,
    Scores,
    compare_scores,
    comparison_json,
    leaderboard_records,
    ranked,
)

__all__ = ["Scored", "against", "heatmap", "leaderboard"]

#: A run as the pages see it: its name in the viewer, its per-task scores, its row.
Scored = tuple[str, Scores, RunStats]
#: Tasks that differ most, listed per pair.
TOP_TASKS = 10


def leaderboard(runs: Sequence[Scored]) -> list[dict[str, Any]]:
    """The runs' leaderboard records (:func:`agentkit.stats.leaderboard_records`), ranked
    by mean reward, each with its ``rank`` (1 first; None without a mean) and ``run``."""
    by_row = {id(row): name for name, _, row in runs}
    order = ranked([row for _, _, row in runs])
    records = leaderboard_records(order)
    out = []
    for i, (row, record) in enumerate(zip(order, records, strict=True)):
        record["run"] = by_row[id(row)]
        record["rank"] = i + 1 if row.reward.mean is not None else None
        out.append(record)
    return out


def against(baseline: Scored, others: Sequence[Scored]) -> list[dict[str, Any]]:
    """Each run of ``others`` (A) against ``baseline`` (B), paired on their shared tasks:
    :func:`agentkit.stats.comparison_json` of each (difference ``run - baseline``, its
    interval and p-value, wins, ties and losses, the tasks that differ most), with
    ``run`` and ``baseline`` named."""
    base_name, base_scores, _ = baseline
    out = []
    for name, scores, _ in others:
        c = compare_scores(scores, base_scores, a_label=name, b_label=base_name)
        doc = comparison_json(c, top=TOP_TASKS)
        del doc["a"], doc["b"]  # the leaderboard has both rows
        doc["run"] = name
        doc["baseline"] = base_name
        doc["differing"] = sum(1 for d in c.tasks if d.difference != 0)
        out.append(doc)
    return out


def heatmap(runs: Sequence[Scored]) -> dict[str, Any]:
    """Tasks × runs: every task's mean reward, scored and finished rollouts in every run.

    Tasks come in the first run's order, then those only later runs have.
    ``mean[i][j]`` is task ``i``'s mean reward in run ``j`` (None when the run
    scored none of its rollouts or has none); ``scored`` and ``rollouts``
    likewise (0 when it has none).
    """
    by_run = [{t.task_id: t for t in scores.tasks} for _, scores, _ in runs]
    tasks: dict[str, None] = {}
    for _, scores, _ in runs:
        for t in scores.tasks:
            tasks.setdefault(t.task_id, None)
    mean, scored, rollouts = [], [], []
    for task_id in tasks:
        cells = [b.get(task_id) for b in by_run]
        mean.append([None if c is None else c.mean for c in cells])
        scored.append([0 if c is None else c.scored for c in cells])
        rollouts.append([0 if c is None else c.rollouts for c in cells])
    return {
        "runs": [name for name, _, _ in runs],
        "tasks": list(tasks),
        "mean": mean,
        "scored": scored,
        "rollouts": rollouts,
    }
