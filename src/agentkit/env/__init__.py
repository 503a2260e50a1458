"""AgentEnv and everything around rollouts: rubric compilation, runner, run directory."""

from __future__ import annotations

from agentkit._run_options import RunOptions, RunOptionsKeywords
from agentkit.env._branch_plan import PREFIX_STATUS, BranchPlan
from agentkit.env._records import EvalResults, RolloutGroup, RolloutRecord
from agentkit.env._rubric_compile import CompiledRubric, RubricCompileError, compile_rubric
from agentkit.env._stats import group_advantages, pass_at_k
from agentkit.env._store import ResumeError, RunDirError
from agentkit.env.agent_env import AgentEnv

__all__ = [
    "PREFIX_STATUS",
    "AgentEnv",
    "BranchPlan",
    "CompiledRubric",
    "EvalResults",
    "ResumeError",
    "RolloutGroup",
    "RolloutRecord",
    "RubricCompileError",
    "RunDirError",
    "RunOptions",
    "RunOptionsKeywords",
    "compile_rubric",
    "group_advantages",
    "pass_at_k",
]
