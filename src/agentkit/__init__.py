"""agentkit: evaluate and train agents on any taskset with any harness.

Public names are re-exported from small private modules and imported lazily,
so ``import agentkit`` stays fast and loads no plugin, openai or mcp code.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from agentkit._version import __version__

if TYPE_CHECKING:
    from agentkit._context import Limits, RunContext
    from agentkit._episode import Episode, StepCapableHarness, StepOutput
    from agentkit._errors import (
        AgentkitError,
        HarnessError,
        OptionError,
        PluginError,
        SpecError,
        TaskReferenceError,
        UnknownNameError,
        ValidationError,
    )
    from agentkit._events import Event, EventRecorder
    from agentkit._harness import Harness
    from agentkit._pricing import Price
    from agentkit._result import INFRA_ERROR_KINDS, RETRYABLE_ERROR_KINDS, HarnessResult
    from agentkit._rubric import RewardFunction, Rubric, reward
    from agentkit._run_options import RunOptions
    from agentkit._sandbox import ExecResult, ExecutionHints, Sandbox, TaskImage
    from agentkit._task import Task
    from agentkit._taskset import ListTaskset, Taskset
    from agentkit._usage import Usage
    from agentkit.env import AgentEnv
    from agentkit.hookspecs import hookimpl

_LAZY: dict[str, str] = {
    "AgentEnv": "agentkit.env",
    "AgentkitError": "agentkit._errors",
    "HarnessError": "agentkit._errors",
    "OptionError": "agentkit._errors",
    "PluginError": "agentkit._errors",
    "SpecError": "agentkit._errors",
    "TaskReferenceError": "agentkit._errors",
    "UnknownNameError": "agentkit._errors",
    "ValidationError": "agentkit._errors",
    "Episode": "agentkit._episode",
    "StepCapableHarness": "agentkit._episode",
    "StepOutput": "agentkit._episode",
    "Event": "agentkit._events",
    "EventRecorder": "agentkit._events",
    "ExecResult": "agentkit._sandbox",
    "ExecutionHints": "agentkit._sandbox",
    "Harness": "agentkit._harness",
    "HarnessResult": "agentkit._result",
    "INFRA_ERROR_KINDS": "agentkit._result",
    "RETRYABLE_ERROR_KINDS": "agentkit._result",
    "Limits": "agentkit._context",
    "Price": "agentkit._pricing",
    "ListTaskset": "agentkit._taskset",
    "RewardFunction": "agentkit._rubric",
    "Rubric": "agentkit._rubric",
    "RunContext": "agentkit._context",
    "RunOptions": "agentkit._run_options",
    "Sandbox": "agentkit._sandbox",
    "Task": "agentkit._task",
    "TaskImage": "agentkit._sandbox",
    "Taskset": "agentkit._taskset",
    "Usage": "agentkit._usage",
    "reward": "agentkit._rubric",
    "hookimpl": "agentkit.hookspecs",
}

__all__ = [
    "INFRA_ERROR_KINDS",
    "RETRYABLE_ERROR_KINDS",
    "AgentEnv",
    "AgentkitError",
    "Episode",
    "Event",
    "EventRecorder",
    "ExecResult",
    "ExecutionHints",
    "Harness",
    "HarnessError",
    "HarnessResult",
    "Limits",
    "ListTaskset",
    "OptionError",
    "PluginError",
    "Price",
    "RewardFunction",
    "Rubric",
    "RunContext",
    "RunOptions",
    "Sandbox",
    "SpecError",
    "StepCapableHarness",
    "StepOutput",
    "Task",
    "TaskImage",
    "TaskReferenceError",
    "Taskset",
    "UnknownNameError",
    "Usage",
    "ValidationError",
    "__version__",
    "hookimpl",
    "reward",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'agentkit' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
