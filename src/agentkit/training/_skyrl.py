"""SkyRL: the ``GeneratorOutput`` its trainer consumes, as one JSON file.

``skyrl.train.generators.base.GeneratorOutput`` (skyrl 0.3.0) is a dict of
per-row lists; a row is one training sequence. Rows are in rollout order, the
sequences of one rollout adjacent, so the file is also a valid *step-wise*
output (``generator.step_wise_trajectories``): ``trajectory_ids`` name the
rollout (``instance_id`` = task id, the GRPO group; ``repetition_id`` = the
rollout's index) and ``is_last_step`` marks each rollout's last sequence. A
run whose rollouts all have one sequence is a plain (not step-wise) output
too. ``rewards`` hold the rollout's reward on its last row and 0.0 on the
rows before it, as SkyRL's own Harbor generator writes a trajectory's steps
(``build_step_wise_generator_output``): its trainer computes a step-wise
trajectory's advantage from the last step's reward, and its reward metrics
average over rows; a rollout of one sequence has its reward on that row.
``loss_masks`` are 1 on sampled tokens only;
``rollout_logprobs`` are the sampled tokens' logprobs, or null when some row
has none. ``env_metrics`` carries agentkit's identity of each row (rollout,
sequence, calls, advantage, token issues, and a branching run's prefix
fields: ``prefix_id``, ``branch_step``, ``prefix_messages``,
``prefix_tokens``). A loader builds the
``TrajectoryID`` objects from the ``trajectory_ids`` dicts.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

from agentkit.training._files import dumps, writing
from agentkit.training._records import TrainingRecord
from agentkit.training._rows import row_metadata

__all__ = ["generator_output", "write_skyrl"]


def generator_output(records: Iterable[TrainingRecord]) -> dict[str, Any]:
    """The ``GeneratorOutput`` of every record with token ids and a reward."""
    rows = [r for r in records if r.has_tokens and r.reward is not None]
    last = [
        i + 1 == len(rows) or rows[i + 1].rollout_id != r.rollout_id for i, r in enumerate(rows)
    ]
    logprobs = [r.completion_logprobs for r in rows]
    return {
        "prompt_token_ids": [r.prompt_token_ids for r in rows],
        "response_ids": [r.completion_token_ids for r in rows],
        "rewards": [r.reward if end else 0.0 for r, end in zip(rows, last, strict=True)],
        "loss_masks": [r.completion_mask for r in rows],
        "stop_reasons": [r.stop_reason or "unknown" for r in rows],
        "rollout_metrics": None,
        "rollout_logprobs": None if any(lp is None for lp in logprobs) else logprobs,
        "trajectory_ids": [
            {"instance_id": r.task_id, "repetition_id": r.rollout_index} for r in rows
        ],
        "trajectory_generation_times": None,
        "rollout_expert_indices": None,
        "is_last_step": last,
        "env_metrics": [row_metadata(r) for r in rows],
    }


def write_skyrl(records: Iterable[TrainingRecord], out: str | os.PathLike[str]) -> int:
    """Write the ``GeneratorOutput`` JSON; returns how many rows (sequences) it has."""
    output = generator_output(records)
    data = dumps(output)
    with writing(out) as fh:
        fh.write(data)
    return len(output["response_ids"])
