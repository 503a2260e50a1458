"""agentkit plugin entry point: registers the ``mini-swe-agent`` harness."""

from __future__ import annotations

from typing import Any

from agentkit import hookimpl


@hookimpl
def agentkit_register_harnesses(register: Any) -> None:
    """The ``mini-swe-agent`` harness: the real mini CLI against the run's endpoint."""
    from agentkit_mini_swe_agent.harness import MiniSweAgent

    register(MiniSweAgent, name="mini-swe-agent", description=MiniSweAgent.description)
