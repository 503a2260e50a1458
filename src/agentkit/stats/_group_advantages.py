"""GRPO group advantages: each rollout's reward against its group's.

A *group* is every rollout of one task (or of one branch point). Rollouts whose
total reward could not be computed (a scoring error) are left out of the
statistics and get no advantage; they are counted as errors instead.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

__all__ = ["group_advantages"]


def group_advantages(
    rewards: Sequence[float | None], *, normalize: bool = False, eps: float = 1e-6
) -> list[float | None]:
    """GRPO advantages of one group: reward minus the group mean.

    With ``normalize`` the difference is divided by the group's (population)
    standard deviation plus ``eps``. A group with a single scored rollout gets
    advantage 0; a rollout without a reward (``None``) gets ``None``.
    """
    scored = [r for r in rewards if r is not None]
    if len(scored) <= 1:
        return [None if r is None else 0.0 for r in rewards]
    mean = math.fsum(scored) / len(scored)
    std = math.sqrt(math.fsum((r - mean) ** 2 for r in scored) / len(scored))
    out: list[float | None] = []
    for r in rewards:
        if r is None:
            out.append(None)
        elif normalize:
            out.append((r - mean) / (std + eps))
        else:
            out.append(r - mean)
    return out
