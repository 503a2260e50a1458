"""GRPO advantages over training records, grouped by task (or by branch point).

The per-group arithmetic is :func:`agentkit.stats.group_advantages`, the
same function the runner uses for ``rollouts.jsonl``: one definition, two uses.
Batch normalisation (``normalize="batch"``) is the Tinker loop's: centre per
group, then normalise across every scored record of the batch.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Literal

from agentkit._errors import ValidationError
from agentkit.stats._group_advantages import group_advantages
from agentkit.training._records import TrainingRecord

__all__ = [
    "GroupBy",
    "Normalize",
    "assign_advantages",
    "batch_normalize",
    "group_advantages",
    "group_key",
]

#: How advantages are scaled: ``False`` (centred only), ``True``/``"group"`` (per
#: group standard deviation), ``"batch"`` (centred per group, then normalised
#: across the batch).
Normalize = bool | Literal["group", "batch"]

#: The epsilon of each normalisation when none is given: agentkit's per-group
#: default, and the Tinker loop's for the batch.
DEFAULT_EPS = {"group": 1e-6, "batch": 1e-8}


def batch_normalize(values: list[float | None], eps: float = 1e-8) -> list[float | None]:
    """Normalise ``values`` across the batch: mean 0, standard deviation 1.

    As the Tinker loop's ``normalize_advantages``: with one value or none the
    values are returned unchanged; when the (population) standard deviation is
    below ``eps`` every value becomes 0; otherwise ``(v - mean) / (std + eps)``.
    None stays None and takes no part.
    """
    scored = [v for v in values if v is not None]
    if len(scored) <= 1:
        return list(values)
    mean = math.fsum(scored) / len(scored)
    std = math.sqrt(math.fsum((v - mean) ** 2 for v in scored) / len(scored))
    if std < eps:
        return [None if v is None else 0.0 for v in values]
    return [None if v is None else (v - mean) / (std + eps) for v in values]


#: What a GRPO group is: every record of one task (``"task"``), or in a branching run
#: the children of one branch point (``"branch_point"``; records that were not forked
#: still group by task).
GroupBy = Literal["task", "branch_point"]


def group_key(record: TrainingRecord, group_by: GroupBy) -> str:
    """The GRPO group ``record`` belongs to under ``group_by``."""
    if group_by == "branch_point" and record.branch_point is not None:
        return f"branch:{record.branch_point}"
    return f"task:{record.task_id}"


def assign_advantages(
    records: Iterable[TrainingRecord],
    *,
    normalize: Normalize = False,
    eps: float | None = None,
    group_by: GroupBy = "task",
) -> list[TrainingRecord]:
    """Recompute every record's advantage from the rewards of its group.

    A group is every record of one task, or with ``group_by="branch_point"``
    the children of one branch point of a branching run (records that were
    not forked keep grouping by task).

    Advantage = reward minus the group mean. ``normalize=True`` (or
    ``"group"``) divides by the group's standard deviation plus ``eps``
    (default 1e-6); ``normalize="batch"`` then normalises the centred values
    across the whole batch instead (:func:`batch_normalize`, ``eps`` default
    1e-8), as the Tinker loop does. A group with one scored rollout gets 0
    before batch normalisation; a rollout without a reward gets None. A
    rollout with several records (training sequences) counts once, and each
    of its records gets its advantage. Order is kept.
    """
    if normalize not in (False, True, "group", "batch"):
        raise ValidationError(
            "normalize", f"expected False, True, 'group' or 'batch', got {normalize!r}"
        )
    scope = "batch" if normalize == "batch" else "group"
    epsilon = DEFAULT_EPS[scope] if eps is None else eps
    if group_by not in ("task", "branch_point"):
        raise ValidationError("group_by", f"expected 'task' or 'branch_point', got {group_by!r}")
    out = list(records)
    # a rollout may be several records (one per training sequence): each rollout
    # counts once in its group, and all its records get its advantage
    rewards: dict[str, float | None] = {}
    by_group: dict[str, list[str]] = {}
    for record in out:
        if record.rollout_id not in rewards:
            rewards[record.rollout_id] = record.reward
            by_group.setdefault(group_key(record, group_by), []).append(record.rollout_id)
    advantage_of: dict[str, float | None] = {}
    per_group = normalize is True or normalize == "group"
    for ids in by_group.values():
        values = group_advantages([rewards[i] for i in ids], normalize=per_group, eps=epsilon)
        advantage_of.update(zip(ids, values, strict=True))
    if scope == "batch":
        ids = list(advantage_of)
        advantage_of = dict(
            zip(ids, batch_normalize([advantage_of[i] for i in ids], epsilon), strict=True)
        )
    return [record.evolve(advantage=advantage_of[record.rollout_id]) for record in out]
