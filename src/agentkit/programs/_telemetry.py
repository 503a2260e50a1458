"""Weight-0 ``harness.*`` metrics every agent-program harness reports."""

from __future__ import annotations

from typing import Any

from agentkit._result import HarnessResult
from agentkit._rubric import RewardFunction, Rubric

__all__ = ["telemetry_rubric"]


def _stat(result: HarnessResult, key: str) -> int | None:
    value = result.raw.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _assistant_messages(result: HarnessResult) -> list[dict[str, Any]]:
    return [m for m in result.messages if m.get("role") == "assistant"]


def turns(result: HarnessResult) -> float:
    """Model calls the program made (``raw["turns"]``, else assistant messages)."""
    found = _stat(result, "turns")
    return float(found if found is not None else len(_assistant_messages(result)))


def tool_calls(result: HarnessResult) -> float:
    """Tool calls the agent made (``raw["tool_calls"]``, else the transcript's)."""
    found = _stat(result, "tool_calls")
    if found is None:
        found = sum(len(m.get("tool_calls") or []) for m in _assistant_messages(result))
    return float(found)


def tool_errors(result: HarnessResult) -> float:
    """Tool calls that failed (``raw["tool_errors"]``, else ``tool.result`` events with
    status ``error``)."""
    found = _stat(result, "tool_errors")
    if found is None:
        found = sum(
            1 for e in result.events if e.type == "tool.result" and e.data.get("status") == "error"
        )
    return float(found)


def tokens(result: HarnessResult) -> float:
    """Input plus output tokens of every model call."""
    return float(result.usage.total_tokens)


def telemetry_rubric(name: str) -> Rubric:
    """Weight-0 metrics ``turns``, ``tool_calls``, ``tool_errors`` and ``tokens``
    (namespaced ``harness.*`` by AgentEnv), in a rubric called ``name``."""
    functions = [
        RewardFunction(name=fn.__name__, fn=fn, weight=0.0, description=(fn.__doc__ or ""))
        for fn in (turns, tool_calls, tool_errors, tokens)
    ]
    return Rubric(functions, name=name)
