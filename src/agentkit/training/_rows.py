"""What every trainer format writes beside a row: agentkit's identity of it."""

from __future__ import annotations

from typing import Any

from agentkit.training._records import TrainingRecord

__all__ = ["row_metadata"]


def row_metadata(record: TrainingRecord) -> dict[str, Any]:
    """agentkit's identity of one exported row (every trainer format carries it)."""
    return {
        "rollout_id": record.rollout_id,
        "task_id": record.task_id,
        "rollout_index": record.rollout_index,
        "sequence": record.sequence,
        "calls": record.calls,
        "sequence_start": record.sequence_start,
        "reward": record.reward,
        "advantage": record.advantage,
        "token_source": record.token_source,
        "token_issues": record.token_issues,
        "prefix_id": record.prefix_id,
        "branch_step": record.branch_step,
        "prefix_messages": record.prefix_messages,
        "prefix_tokens": record.prefix_tokens,
    }
