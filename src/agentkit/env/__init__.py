"""AgentEnv and everything around rollouts: rubric compilation, runner, run directory."""

from __future__ import annotations

from agentkit._run_options import RunOptions, RunOptionsKeywords
from agentkit.env._branch_plan import BranchPlan
from agentkit.env._records import EvalResults, RolloutGroup
from agentkit.env._resume import ResumeError
from agentkit.env._rubric_compile import CompiledRubric, RubricCompileError, compile_rubric
from agentkit.env.agent_env import AgentEnv
from agentkit.rundir import PREFIX_STATUS, RolloutRecord, RunDirError
from agentkit.stats import group_advantages, pass_at_k

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
