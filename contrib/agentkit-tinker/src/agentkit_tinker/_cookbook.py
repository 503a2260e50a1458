"""A service group as tinker-cookbook's ``TrajectoryGroup``: what its RL step's data
functions (``compute_advantages``, ``assemble_training_data``) take."""

from __future__ import annotations

from typing import Any

from agentkit.service import ServiceGroup

__all__ = ["trajectory_group"]


def trajectory_group(group: ServiceGroup) -> Any:
    """``group`` as a ``tinker_cookbook.rl.types.TrajectoryGroup``: one ``Trajectory`` per
    rollout, one ``Transition`` per model call with token ids (its prompt ids as the
    observation, its sampled ids and logprobs as the action, no per-step reward), the
    rollout's reward as its final reward (0.0 for a rollout with none). A rollout whose
    calls carry no token ids has no transitions; the cookbook then builds no datum of
    it. Each trajectory's metrics name its rollout and its calls' policy versions."""
    import tinker  # deferred: Tinker's SDK, for this adapter only
    from tinker_cookbook.completers import TokensWithLogprobs  # deferred: tinker-cookbook
    from tinker_cookbook.rl.types import (  # deferred: tinker-cookbook
        Trajectory,
        TrajectoryGroup,
        Transition,
    )

    trajectories = []
    metrics = []
    for rollout in group.rollouts:
        calls = [c for c in rollout.model_calls if c.has_tokens]
        transitions = [
            Transition(
                ob=tinker.ModelInput.from_ints(list(c.prompt_token_ids or [])),
                ac=TokensWithLogprobs(
                    list(c.completion_token_ids or []),
                    None if c.completion_logprobs is None else list(c.completion_logprobs),
                ),
                reward=0.0,
                episode_done=n == len(calls) - 1,
            )
            for n, c in enumerate(calls)
        ]
        trajectories.append(Trajectory(transitions=transitions, final_ob=tinker.ModelInput.empty()))
        versions = [c.policy_version for c in calls if c.policy_version is not None]
        metrics.append(
            {
                "agentkit/group_id": group.group_id,
                "agentkit/oldest_version": min(versions, default=group.oldest_version),
            }
        )
    return TrajectoryGroup(
        trajectories_G=trajectories,
        final_rewards_G=[float(r.reward or 0.0) for r in group.rollouts],
        metrics_G=metrics,
    )
