"""The ``harness.*`` telemetry metrics the mini-swe-agent harness adds to a rubric (weight 0)."""

from __future__ import annotations

from agentkit import HarnessResult, RewardFunction, Rubric

__all__ = ["telemetry_rubric"]


def _stat(result: HarnessResult, key: str) -> int | None:
    value = result.raw.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def turns(result: HarnessResult) -> float:
    """Model calls mini made (its ``api_calls``)."""
    found = _stat(result, "turns")
    if found is None:
        found = sum(1 for m in result.messages if m.get("role") == "assistant")
    return float(found)


def tool_calls(result: HarnessResult) -> float:
    """bash tool calls the model made."""
    found = _stat(result, "tool_calls")
    if found is None:
        found = sum(len(m.get("tool_calls") or []) for m in result.messages)
    return float(found)


def tool_errors(result: HarnessResult) -> float:
    """Commands mini could not run to the end (a timeout, an exception), plus replies
    without a valid bash call; a command that exits non-zero is not an error."""
    errors = _stat(result, "tool_errors") or 0
    formats = _stat(result, "format_errors") or 0
    return float(errors + formats)


def tokens(result: HarnessResult) -> float:
    """Input plus output tokens of every model call."""
    return float(result.usage.total_tokens)


def telemetry_rubric() -> Rubric:
    """Weight-0 metrics: ``turns``, ``tool_calls``, ``tool_errors``, ``tokens``."""
    functions = [
        RewardFunction(name=fn.__name__, fn=fn, weight=0.0, description=(fn.__doc__ or ""))
        for fn in (turns, tool_calls, tool_errors, tokens)
    ]
    return Rubric(functions, name="mini-swe-agent")
