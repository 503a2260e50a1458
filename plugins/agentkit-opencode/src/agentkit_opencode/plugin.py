"""agentkit plugin entry point: registers the ``opencode`` harness."""

from __future__ import annotations

from typing import Any

from agentkit import hookimpl


@hookimpl
def agentkit_register_harnesses(register: Any) -> None:
    """The ``opencode`` harness: the real opencode CLI against the run's endpoint."""
    register(
        "agentkit_opencode.harness:OpenCode",  # imported when a run uses it
        name="opencode",
        description="The real opencode CLI, run non-interactively in the rollout's sandbox.",
    )
