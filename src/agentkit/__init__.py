"""agentkit: evaluate and train agents on any taskset with any harness.

Public names are re-exported from small private modules and imported lazily,
so ``import agentkit`` stays fast and loads no plugin, openai or mcp code.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agentkit._lazy import lazy_attribute
from agentkit._version import __version__

if TYPE_CHECKING:
    from agentkit._context import Limits, RunContext
    from agentkit._episode import (
        Episode,
        EpisodeForkError,
        ForkableEpisode,
        StepCapableHarness,
        StepOutput,
        fork_episode,
        is_step_capable,
        open_episode,
    )
    from agentkit._errors import (
        AgentkitError,
        HarnessError,
        OptionError,
        PluginError,
        SpecError,
        TaskReferenceError,
        UnknownNameError,
        ValidationError,
        missing_extra,
    )
    from agentkit._events import Event, EventCallback, EventRecorder
    from agentkit._harness import Harness
    from agentkit._pricing import Price
    from agentkit._result import INFRA_ERROR_KINDS, RETRYABLE_ERROR_KINDS, HarnessResult, Status
    from agentkit._rubric import (
        GradedAsFailure,
        GradingUnavailable,
        RewardFunction,
        Rubric,
        call_reward,
        reward,
    )
    from agentkit._run_options import RunOptions
    from agentkit._sandbox import (
        ExecResult,
        ExecutionHints,
        ForkableSandbox,
        Process,
        Sandbox,
        TaskImage,
    )
    from agentkit._task import (
        RESERVED_AGENT_KEYS,
        Task,
        check_no_reserved_keys,
        is_reserved_key,
    )
    from agentkit._taskset import ListTaskset, TaskProblem, Taskset
    from agentkit._usage import Usage
    from agentkit.env import AgentEnv, BranchPlan
    from agentkit.hookspecs import hookimpl
    from agentkit.jobs import Job

_LAZY: dict[str, str] = {
    "AgentEnv": "agentkit.env",
    "BranchPlan": "agentkit.env",
    "AgentkitError": "agentkit._errors",
    "HarnessError": "agentkit._errors",
    "OptionError": "agentkit._errors",
    "PluginError": "agentkit._errors",
    "SpecError": "agentkit._errors",
    "TaskReferenceError": "agentkit._errors",
    "UnknownNameError": "agentkit._errors",
    "ValidationError": "agentkit._errors",
    "missing_extra": "agentkit._errors",
    "Episode": "agentkit._episode",
    "EpisodeForkError": "agentkit._episode",
    "ForkableEpisode": "agentkit._episode",
    "fork_episode": "agentkit._episode",
    "StepCapableHarness": "agentkit._episode",
    "StepOutput": "agentkit._episode",
    "is_step_capable": "agentkit._episode",
    "open_episode": "agentkit._episode",
    "Event": "agentkit._events",
    "EventCallback": "agentkit._events",
    "EventRecorder": "agentkit._events",
    "ExecResult": "agentkit._sandbox",
    "ExecutionHints": "agentkit._sandbox",
    "ForkableSandbox": "agentkit._sandbox",
    "Process": "agentkit._sandbox",
    "Harness": "agentkit._harness",
    "Job": "agentkit.jobs",
    "HarnessResult": "agentkit._result",
    "INFRA_ERROR_KINDS": "agentkit._result",
    "RETRYABLE_ERROR_KINDS": "agentkit._result",
    "Status": "agentkit._result",
    "Limits": "agentkit._context",
    "Price": "agentkit._pricing",
    "ListTaskset": "agentkit._taskset",
    "TaskProblem": "agentkit._taskset",
    "GradedAsFailure": "agentkit._rubric",
    "GradingUnavailable": "agentkit._rubric",
    "RewardFunction": "agentkit._rubric",
    "Rubric": "agentkit._rubric",
    "RunContext": "agentkit._context",
    "RunOptions": "agentkit._run_options",
    "Sandbox": "agentkit._sandbox",
    "RESERVED_AGENT_KEYS": "agentkit._task",
    "Task": "agentkit._task",
    "check_no_reserved_keys": "agentkit._task",
    "is_reserved_key": "agentkit._task",
    "TaskImage": "agentkit._sandbox",
    "Taskset": "agentkit._taskset",
    "Usage": "agentkit._usage",
    "call_reward": "agentkit._rubric",
    "reward": "agentkit._rubric",
    "hookimpl": "agentkit.hookspecs",
}

__all__ = [
    "INFRA_ERROR_KINDS",
    "RESERVED_AGENT_KEYS",
    "RETRYABLE_ERROR_KINDS",
    "AgentEnv",
    "AgentkitError",
    "BranchPlan",
    "Episode",
    "EpisodeForkError",
    "Event",
    "EventCallback",
    "EventRecorder",
    "ExecResult",
    "ExecutionHints",
    "ForkableEpisode",
    "ForkableSandbox",
    "GradedAsFailure",
    "GradingUnavailable",
    "Harness",
    "HarnessError",
    "HarnessResult",
    "Job",
    "Limits",
    "ListTaskset",
    "OptionError",
    "PluginError",
    "Price",
    "Process",
    "RewardFunction",
    "Rubric",
    "RunContext",
    "RunOptions",
    "Sandbox",
    "SpecError",
    "Status",
    "StepCapableHarness",
    "StepOutput",
    "Task",
    "TaskImage",
    "TaskProblem",
    "TaskReferenceError",
    "Taskset",
    "UnknownNameError",
    "Usage",
    "ValidationError",
    "__version__",
    "call_reward",
    "check_no_reserved_keys",
    "fork_episode",
    "hookimpl",
    "is_reserved_key",
    "is_step_capable",
    "missing_extra",
    "open_episode",
    "reward",
]


def __getattr__(name: str) -> Any:
    return lazy_attribute("agentkit", _LAZY, globals(), name)


def __dir__() -> list[str]:
    return __all__
