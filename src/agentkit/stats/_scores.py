"""What the statistics need from a set of rollouts: per-task scores and run totals.

:class:`Scores` is built from rollouts (:func:`scores_of_rollouts`, any set
of them) or, for a run whose ``summary.json`` counts every finished rollout,
from that summary (:func:`scores_of_run`), which gives the same numbers
without parsing every rollout: a 100,000-rollout run is read in a fraction
of a second. Rollouts that could not run (infrastructure failures) and
rollouts that ran but have no total reward (a reward function raised) are
counted here and left out of every reward statistic; tokens, cost and time
count every finished rollout, since those were spent.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

import attrs

from agentkit.rundir import Rollout, RunReader
from agentkit.stats._pass_at_k import DEFAULT_PASS_THRESHOLD

__all__ = ["Scores", "TaskScores", "Totals", "scores_of_rollouts", "scores_of_run"]


@attrs.frozen(kw_only=True)
class TaskScores:
    """One task's rollouts, as the statistics count them."""

    task_id: str
    #: Finished rollouts of the task.
    rollouts: int
    #: Rollouts in the reward statistics (they have a total reward).
    scored: int
    #: Rollouts that could not run (infrastructure failures: no reward).
    could_not_run: int
    #: Rollouts that ran but have no total reward (a reward function raised).
    unscored: int
    #: Mean reward of the scored rollouts (None when there are none).
    mean: float | None
    #: Scored rollouts whose reward is at least the pass threshold (for pass@k).
    passed: int


@attrs.frozen(kw_only=True)
class Totals:
    """Tokens, cost and time summed over every finished rollout."""

    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0
    reasoning_tokens: int = 0
    #: Summed cost of the priced rollouts (None when no rollout has a price).
    cost: float | None = None
    #: Rollouts with a cost.
    priced: int = 0
    #: Summed wall time of the rollouts, seconds (each rollout's ``duration_s``).
    duration_s: float = 0.0
    #: Rollouts with a recorded duration.
    timed: int = 0


@attrs.frozen(kw_only=True)
class Scores:
    """Per-task scores and totals of one set of rollouts (a run, or a job's cell)."""

    #: Per task, in plan order (tasks without a finished rollout are left out).
    tasks: list[TaskScores]
    totals: Totals
    pass_threshold: float

    @property
    def rollouts(self) -> int:
        """Finished rollouts."""
        return sum(t.rollouts for t in self.tasks)

    def by_task(self) -> dict[str, TaskScores]:
        """The tasks by id."""
        return {t.task_id: t for t in self.tasks}


def scores_of_rollouts(
    rollouts: Iterable[Rollout],
    *,
    pass_threshold: float = DEFAULT_PASS_THRESHOLD,
    task_order: Sequence[str] = (),
) -> Scores:
    """Per-task scores and totals of any rollouts (``agentkit.runs`` records).

    Tasks come in ``task_order`` (a run's plan), then in order of first
    appearance.
    """
    rewards: dict[str, list[float]] = {t: [] for t in task_order}
    counts: dict[str, list[int]] = {t: [0, 0, 0] for t in task_order}  # rollouts, cnr, unscored
    tokens = [0, 0, 0, 0]
    costs: list[float] = []
    durations: list[float] = []
    for r in rollouts:
        count = counts.get(r.task_id)
        if count is None:
            count = counts[r.task_id] = [0, 0, 0]
            rewards[r.task_id] = []
        count[0] += 1
        if r.infrastructure:
            count[1] += 1
        elif r.reward is None:
            count[2] += 1
        else:
            rewards[r.task_id].append(float(r.reward))
        u = r.usage
        tokens[0] += u.input_tokens
        tokens[1] += u.output_tokens
        tokens[2] += u.cached_tokens
        tokens[3] += u.reasoning_tokens
        if r.cost is not None:
            costs.append(r.cost)
        if isinstance(r.timings.duration_s, (int, float)):
            durations.append(float(r.timings.duration_s))
    tasks = [
        TaskScores(
            task_id=task_id,
            rollouts=count[0],
            scored=len(rewards[task_id]),
            could_not_run=count[1],
            unscored=count[2],
            mean=math.fsum(rewards[task_id]) / len(rewards[task_id]) if rewards[task_id] else None,
            passed=sum(1 for x in rewards[task_id] if x >= pass_threshold),
        )
        for task_id, count in counts.items()
        if count[0]
    ]
    totals = Totals(
        input_tokens=tokens[0],
        output_tokens=tokens[1],
        cached_tokens=tokens[2],
        reasoning_tokens=tokens[3],
        cost=math.fsum(costs) if costs else None,
        priced=len(costs),
        duration_s=math.fsum(durations),
        timed=len(durations),
    )
    return Scores(tasks=tasks, totals=totals, pass_threshold=pass_threshold)


def scores_of_run(run: RunReader) -> Scores:
    """Per-task scores and totals of a run directory (every finished rollout).

    From ``summary.json`` when it is current
    (:meth:`~agentkit.runs.Run.current_summary`) and has every figure
    needed, else from the rollouts themselves; both give the same numbers.
    """
    threshold = float(run.info.options.get("pass_threshold", DEFAULT_PASS_THRESHOLD))
    stored = run.current_summary()
    if stored is not None:
        from_summary = _scores_of_summary(stored, threshold)
        if from_summary is not None:
            return from_summary
    return scores_of_rollouts(
        run.iter_rollouts(), pass_threshold=threshold, task_order=run.info.task_ids
    )


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _number(value: Any) -> float | None:
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


def _scores_of_summary(summary: dict[str, Any], threshold: float) -> Scores | None:
    """The scores a summary.json holds; None when it lacks a figure (an older agentkit
    wrote it) or does not look as agentkit writes it (the rollouts are read instead)."""
    if _number(summary.get("pass_threshold")) != threshold:
        return None
    usage = summary.get("usage")
    timing = summary.get("rollout_time_s")
    rows = summary.get("tasks")
    if not (isinstance(usage, dict) and isinstance(timing, dict) and isinstance(rows, list)):
        return None
    tasks = []
    for row in rows:  # a loop without calls per row: a summary may list 10,000 tasks
        if type(row) is not dict:
            return None
        task_id, rollouts = row.get("task_id"), row.get("rollouts")
        scored, infra = row.get("scored"), row.get("infra_errors")
        if (
            type(task_id) is not str
            or type(rollouts) is not int
            or type(scored) is not int
            or type(infra) is not int
            or not 0 <= infra <= rollouts - scored
            or scored < 0
        ):
            return None
        if not rollouts:
            continue
        mean: float | None = None
        pass_1: float | None = None
        if scored:
            found, passes = row.get("mean_reward"), row.get("pass_at_k")
            first = passes.get("1") if type(passes) is dict else None
            if not isinstance(found, (int, float)) or not isinstance(first, (int, float)):
                return None
            if isinstance(found, bool) or isinstance(first, bool):
                return None
            mean, pass_1 = float(found), float(first)
            if not (math.isfinite(mean) and 0.0 <= pass_1 <= 1.0):
                return None
        tasks.append(
            TaskScores(
                task_id=task_id,
                rollouts=rollouts,
                scored=scored,
                could_not_run=infra,
                unscored=rollouts - scored - infra,
                mean=mean,
                # pass@1 of a task is c / n (the estimator's product telescopes)
                passed=0 if pass_1 is None else round(pass_1 * scored),
            )
        )
    if sum(t.rollouts for t in tasks) != summary.get("finished"):
        return None  # rollouts of tasks outside the plan: only the rollouts say which
    tokens = [
        _int(usage.get(key, 0))
        for key in ("input_tokens", "output_tokens", "cached_tokens", "reasoning_tokens")
    ]
    priced = _int(summary.get("priced", 0))
    total_s = _number(timing.get("total"))
    timed = _int(timing.get("timed"))
    if any(t is None for t in tokens) or priced is None or total_s is None or timed is None:
        return None
    cost = _number(usage.get("cost"))
    totals = Totals(
        input_tokens=tokens[0] or 0,
        output_tokens=tokens[1] or 0,
        cached_tokens=tokens[2] or 0,
        reasoning_tokens=tokens[3] or 0,
        cost=cost if priced else None,
        priced=priced,
        duration_s=total_s,
        timed=timed,
    )
    return Scores(tasks=tasks, totals=totals, pass_threshold=threshold)
