"""The training pipeline: GRPO advantages by task (or branch point), DAPO overlong
filtering, truncation.

Each step is its own module over :class:`~agentkit.training.TrainingRecord`
(``_advantages``, ``_overlong``, ``_truncate``); :func:`prepare` runs them in
order.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

from agentkit.training._advantages import GroupBy, assign_advantages
from agentkit.training._overlong import filter_overlong as apply_filter
from agentkit.training._records import TrainingRecord
from agentkit.training._truncate import truncate_all

__all__ = ["prepare"]


def prepare(
    records: Iterable[TrainingRecord],
    *,
    normalize: bool | Literal["group", "batch"] = False,
    eps: float | None = None,
    filter_overlong: bool = True,
    eos_token_id: int | None = None,
    max_seq_len: int | None = None,
    drop_unscored: bool = False,
    group_by: GroupBy = "task",
) -> list[TrainingRecord]:
    """The whole pipeline: GRPO advantages by task, DAPO overlong filtering, truncation.

    ``normalize``: ``False``, ``True``/``"group"`` or ``"batch"`` (see
    :func:`~agentkit.training.assign_advantages`). ``eos_token_id`` makes the
    overlong filter key on "the completion does not end with this token"
    (see :func:`~agentkit.training.is_overlong`). ``drop_unscored`` leaves out
    rollouts without a reward (a scoring error), which otherwise stay in with
    advantage None. ``group_by="branch_point"`` forms the GRPO groups per
    branch point of a branching run (see :func:`~agentkit.training.assign_advantages`).
    """
    out = list(records)
    if drop_unscored:
        out = [r for r in out if r.reward is not None]
    out = assign_advantages(out, normalize=normalize, eps=eps, group_by=group_by)
    if filter_overlong:
        out = apply_filter(out, eos_token_id=eos_token_id)
    if max_seq_len is not None:
        out = truncate_all(out, max_seq_len)
    return out
