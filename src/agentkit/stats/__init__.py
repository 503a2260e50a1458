"""Statistics of runs: rewards with error bars, leaderboards and paired comparisons.

>>> import agentkit.stats
>>> row = agentkit.stats.run_stats("runs/try1")                     # doctest: +SKIP
>>> row.reward.mean, row.reward.ci_low, row.reward.ci_high          # doctest: +SKIP
>>> row.pass_at_k[1], row.cost, row.seconds_per_rollout              # doctest: +SKIP
>>> c = agentkit.stats.compare_runs("runs/a", "runs/b")             # doctest: +SKIP
>>> c.test.mean, c.test.p_value, c.wins_a, c.wins_b, c.only_b        # doctest: +SKIP
>>> print(agentkit.stats.format_leaderboard([row], "markdown"))     # doctest: +SKIP

The mean reward's confidence interval uses a standard error clustered by
task (rollouts of one task are not independent) with Student's t on
tasks − 1 degrees of freedom; pass@k is the unbiased estimator; two runs
are compared by a paired t-test on their per-task mean rewards over the
tasks both scored. Rollouts that could not run, or ran without a total
reward, are left out of every reward statistic and counted. Runs are read
through :mod:`agentkit.runs`. The formulas and a worked example are in
docs/statistics.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agentkit._lazy import lazy_attribute
from agentkit.stats._compare import Comparison, TaskDifference, compare_runs, compare_scores
from agentkit.stats._estimate import (
    DEFAULT_CONFIDENCE,
    Estimate,
    PairedTest,
    clustered_mean,
    clustered_mean_of_groups,
    paired_t_test,
)
from agentkit.stats._group_advantages import group_advantages
from agentkit.stats._leaderboard import RunStats, run_stats, scores_stats
from agentkit.stats._pass_at_k import pass_at_k, pass_ks
from agentkit.stats._scores import (
    Scores,
    TaskScores,
    Totals,
    scores_of_rollouts,
    scores_of_run,
)

if TYPE_CHECKING:
    from agentkit.stats._format import (
        LEADERBOARD_FORMATS,
        comparison_json,
        comparison_text,
        format_leaderboard,
        leaderboard_records,
        leaderboard_table,
        ranked,
    )

__all__ = [
    "DEFAULT_CONFIDENCE",
    "LEADERBOARD_FORMATS",
    "Comparison",
    "Estimate",
    "PairedTest",
    "RunStats",
    "Scores",
    "TaskDifference",
    "TaskScores",
    "Totals",
    "clustered_mean",
    "clustered_mean_of_groups",
    "compare_runs",
    "compare_scores",
    "comparison_json",
    "comparison_text",
    "format_leaderboard",
    "group_advantages",
    "leaderboard_records",
    "leaderboard_table",
    "paired_t_test",
    "pass_at_k",
    "pass_ks",
    "ranked",
    "run_stats",
    "scores_of_rollouts",
    "scores_of_run",
    "scores_stats",
]

#: The formatting names (every public name not imported above: they come from
#: ``_format``), loaded on first use: they import rich's console and tables, which
#: training export (group_advantages) and the run's own statistics never need.
_LAZY = dict.fromkeys((n for n in __all__ if n not in globals()), "agentkit.stats._format")


def __getattr__(name: str) -> Any:
    return lazy_attribute("agentkit.stats", _LAZY, globals(), name)


def __dir__() -> list[str]:
    return __all__
