"""A run's groups: every rollout of one task, its advantages set and its statistics."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from agentkit.env._records import RolloutGroup
from agentkit.rundir import RolloutRecord
from agentkit.stats._group_advantages import group_advantages
from agentkit.stats._pass_at_k import pass_table

__all__ = ["apply_group", "build_groups"]


def _mean(values: Sequence[float]) -> float | None:
    return math.fsum(values) / len(values) if values else None


def apply_group(
    records: Sequence[RolloutRecord], *, threshold: float, normalize: bool
) -> RolloutGroup:
    """Compute a complete group's advantages (set on the records) and statistics."""
    ordered = sorted(records, key=lambda r: r.rollout_index)
    advantages = group_advantages([r.reward for r in ordered], normalize=normalize)
    for rec, adv in zip(ordered, advantages, strict=True):
        rec.advantage = adv
    scored = [r.reward for r in ordered if r.reward is not None]
    first = ordered[0]
    return RolloutGroup(
        task_id=first.task_id,
        example_id=first.example_id,
        rollouts=list(ordered),
        mean_reward=_mean(scored),
        advantages=advantages,
        pass_at_k=pass_table(scored, threshold),
    )


def build_groups(
    records: Iterable[RolloutRecord],
    rollouts_per_task: int,
    *,
    threshold: float,
    normalize: bool,
) -> list[RolloutGroup]:
    """Groups of every task whose rollouts all finished, in group order."""
    by_task: dict[str, list[RolloutRecord]] = {}
    for rec in records:
        by_task.setdefault(rec.task_id, []).append(rec)
    complete = [recs for recs in by_task.values() if len(recs) >= rollouts_per_task]
    complete.sort(key=lambda recs: recs[0].group)
    return [apply_group(recs, threshold=threshold, normalize=normalize) for recs in complete]
