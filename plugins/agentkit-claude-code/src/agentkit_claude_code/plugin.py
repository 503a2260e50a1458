"""agentkit plugin entry point: registers the ``claude-code`` harness."""

from __future__ import annotations

from typing import Any

from agentkit import hookimpl


@hookimpl
def agentkit_register_harnesses(register: Any) -> None:
    """The ``claude-code`` harness: the real program against the run's endpoint."""
    register(
        "agentkit_claude_code.harness:ClaudeCode",  # imported when a run uses it
        name="claude-code",
        description=(
            "The real Claude Code CLI (claude -p), run non-interactively in the rollout's sandbox."
        ),
    )
