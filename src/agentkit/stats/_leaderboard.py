"""One row of a leaderboard: a run's (or a job cell's) reward with its interval, pass@k, cost.

:func:`run_stats` reads a run directory; :func:`scores_stats` turns the
per-task :class:`~agentkit.stats.Scores` of any set of rollouts into a row,
so a job's cells are rows the same way. The formatters in
:mod:`agentkit.stats._format` print lists of rows.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import attrs

from agentkit.rundir import RunReader
from agentkit.stats._estimate import (
    DEFAULT_CONFIDENCE,
    Estimate,
    clustered_mean_of_groups,
)
from agentkit.stats._pass_at_k import pass_at_k, pass_ks
from agentkit.stats._scores import Scores, scores_of_run

__all__ = ["RunStats", "run_row", "run_stats", "scores_stats"]


@attrs.frozen(kw_only=True)
class RunStats:
    """A leaderboard row: what a run (or any set of rollouts) scored and spent.

    The reward statistics count only scored rollouts: those that could not
    run (``could_not_run``) or ran without a total reward (``unscored``) are
    left out and counted. Tokens, cost and time count every finished rollout.
    """

    #: What the row is called (a run directory's name, a job cell's name).
    label: str
    path: str | None = None
    taskset: str | None = None
    harness: str | None = None
    model: str | None = None
    #: Rollouts planned (None when unknown, e.g. rollouts gathered by hand).
    planned: int | None = None
    #: Finished rollouts.
    rollouts: int
    #: Rollouts in the reward statistics.
    scored: int
    could_not_run: int
    unscored: int
    #: Tasks with at least one scored rollout (the clusters of the interval).
    tasks: int
    #: Tasks with finished rollouts of which none is scored.
    tasks_unscored: int
    #: Mean reward over the scored rollouts with its task-clustered interval.
    reward: Estimate
    pass_threshold: float
    #: The unbiased pass@k, averaged over tasks, for k = 1, 2, 4, ... up to the
    #: fewest scored rollouts of any task (that number itself included).
    pass_at_k: dict[int, float]
    input_tokens: int
    output_tokens: int
    cached_tokens: int
    reasoning_tokens: int
    #: Summed cost of the priced rollouts (None when none has a price).
    cost: float | None
    priced: int
    #: Summed wall time of the rollouts (seconds).
    duration_s: float
    timed: int

    @property
    def tokens_per_rollout(self) -> float | None:
        """Input plus output tokens per finished rollout."""
        if not self.rollouts:
            return None
        return (self.input_tokens + self.output_tokens) / self.rollouts

    @property
    def cost_per_rollout(self) -> float | None:
        """Cost per priced rollout."""
        return None if self.cost is None or not self.priced else self.cost / self.priced

    @property
    def seconds_per_rollout(self) -> float | None:
        """Mean wall time of a rollout (seconds)."""
        return self.duration_s / self.timed if self.timed else None


def _pass_at_k(scores: Scores) -> dict[int, float]:
    scored = [t for t in scores.tasks if t.scored]
    if not scored:
        return {}
    fewest = min(t.scored for t in scored)
    return {
        k: math.fsum(pass_at_k(t.scored, t.passed, k) for t in scored) / len(scored)
        for k in pass_ks(fewest)
    }


def scores_stats(
    scores: Scores,
    *,
    label: str,
    path: str | None = None,
    taskset: str | None = None,
    harness: str | None = None,
    model: str | None = None,
    planned: int | None = None,
    confidence: float = DEFAULT_CONFIDENCE,
) -> RunStats:
    """The leaderboard row of per-task scores (a run, a job cell, any rollouts)."""
    t = scores.totals
    return RunStats(
        label=label,
        path=path,
        taskset=taskset,
        harness=harness,
        model=model,
        planned=planned,
        rollouts=scores.rollouts,
        scored=sum(x.scored for x in scores.tasks),
        could_not_run=sum(x.could_not_run for x in scores.tasks),
        unscored=sum(x.unscored for x in scores.tasks),
        tasks=sum(1 for x in scores.tasks if x.scored),
        tasks_unscored=sum(1 for x in scores.tasks if not x.scored),
        reward=clustered_mean_of_groups(
            [(x.scored, x.mean) for x in scores.tasks if x.mean is not None],
            confidence=confidence,
        ),
        pass_threshold=scores.pass_threshold,
        pass_at_k=_pass_at_k(scores),
        input_tokens=t.input_tokens,
        output_tokens=t.output_tokens,
        cached_tokens=t.cached_tokens,
        reasoning_tokens=t.reasoning_tokens,
        cost=t.cost,
        priced=t.priced,
        duration_s=t.duration_s,
        timed=t.timed,
    )


def run_stats(
    run: RunReader | str | os.PathLike[str],
    *,
    label: str | None = None,
    confidence: float = DEFAULT_CONFIDENCE,
) -> RunStats:
    """The leaderboard row of a run directory (a path or an open :class:`~agentkit.runs.Run`).

    ``label`` defaults to the directory's name.
    """
    if not isinstance(run, RunReader):
        run = RunReader(Path(run))
    return run_row(run, scores_of_run(run), label=label, confidence=confidence)


def run_row(
    run: RunReader,
    scores: Scores,
    *,
    label: str | None = None,
    confidence: float = DEFAULT_CONFIDENCE,
) -> RunStats:
    """The leaderboard row of ``run`` whose scores are ``scores`` (its settings from its
    manifest; ``label`` defaults to the directory's name)."""
    info = run.info
    return scores_stats(
        scores,
        label=label if label is not None else run.path.name,
        path=str(run.path),
        taskset=info.taskset,
        harness=info.harness,
        model=info.model,
        planned=info.planned,
        confidence=confidence,
    )
