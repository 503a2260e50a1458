"""What a run returns: the groups of rollouts and the results object (each rollout a
:class:`~agentkit.rundir.RolloutRecord`, the run directory's record)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs

from agentkit.rundir import RolloutRecord

__all__ = ["EvalResults", "RolloutGroup"]


@attrs.define(slots=True, kw_only=True)
class RolloutGroup:
    """All rollouts of one task, with their GRPO advantages (``env.generate()``)."""

    task_id: str
    example_id: str
    rollouts: list[RolloutRecord]
    mean_reward: float | None
    advantages: list[float | None]
    pass_at_k: dict[str, float]
    #: In a branching run, the branch point whose children these rollouts are
    #: (``<parent rollout id>@<step>``); None for a group of one task's rollouts.
    branch_point: str | None = None

    def __repr__(self) -> str:
        return (
            f"RolloutGroup({self.task_id!r}, rewards={self.rewards!r}, "
            f"advantages={self.advantages!r})"
        )

    @property
    def rewards(self) -> list[float | None]:
        """Total reward of each rollout, in rollout-index order."""
        return [r.reward for r in self.rollouts]


@attrs.define(kw_only=True)
class EvalResults:
    """What ``env.evaluate()`` returns: every rollout, the groups and the summary."""

    rollouts: list[RolloutRecord]
    groups: list[RolloutGroup]
    summary: dict[str, Any]
    run_dir: Path | None = None

    def __repr__(self) -> str:
        return (
            f"EvalResults({len(self.rollouts)} rollouts, {len(self.groups)} complete groups, "
            f"mean_reward={self.summary.get('mean_reward')!r}, run_dir={self.run_dir!r})"
        )

    @property
    def mean_reward(self) -> float | None:
        """Mean total reward over the scored rollouts."""
        value = self.summary.get("mean_reward")
        return None if value is None else float(value)

    def __len__(self) -> int:
        return len(self.rollouts)
