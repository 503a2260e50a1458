"""agentkit plugin entry point: registers the ``mini-swe-agent`` harness."""

from __future__ import annotations

from typing import Any

from agentkit import hookimpl


@hookimpl
def agentkit_register_harnesses(register: Any) -> None:
    """The ``mini-swe-agent`` harness: the real mini CLI against the run's endpoint."""
    register(
        "agentkit_mini_swe_agent.harness:MiniSweAgent",  # imported when a run uses it
        name="mini-swe-agent",
        description="The real mini-swe-agent CLI (bash tool only), run in the rollout's sandbox.",
    )
