"""The ``harness.*`` telemetry metrics the OpenCode harness adds to a rubric (weight 0)."""

from __future__ import annotations

from agentkit import Rubric
from agentkit.programs import telemetry_rubric as _program_telemetry

__all__ = ["telemetry_rubric"]


def telemetry_rubric() -> Rubric:
    """Weight-0 metrics: ``turns``, ``tool_calls``, ``tool_errors``, ``tokens``."""
    return _program_telemetry("opencode")
