"""AgentEnv and everything around rollouts: rubric compilation, runner, run directory.

Besides :class:`AgentEnv`, the engine that runs a run is public here for the rooms
above that run runs of their own: a :class:`Session` (a planned run, from
:func:`prepare`) run by :func:`execute` (a job runs each cell so, its rollouts drawing
from one shared limiter), and :func:`open_rollouts`, a long-lived run whose rollouts
start one at a time (:class:`RolloutStream`, the rollout service's). Nothing outside
``agentkit.env`` imports its private modules (an import-linter contract).
"""

from __future__ import annotations

from agentkit._run_options import RunOptions, RunOptionsKeywords
from agentkit.env._branch_plan import BranchPlan
from agentkit.env._execute import execute
from agentkit.env._records import EvalResults, RolloutGroup
from agentkit.env._resume import ResumeError
from agentkit.env._rubric_compile import CompiledRubric, RubricCompileError, compile_rubric
from agentkit.env._session import Session, prepare
from agentkit.env._stream import RolloutStream, open_rollouts
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
    "RolloutStream",
    "RubricCompileError",
    "RunDirError",
    "RunOptions",
    "RunOptionsKeywords",
    "Session",
    "compile_rubric",
    "execute",
    "group_advantages",
    "open_rollouts",
    "pass_at_k",
    "prepare",
]
