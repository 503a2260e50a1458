"""agentkit plugin entry point: registers the ``claude-code`` harness."""

from __future__ import annotations

from typing import Any

from agentkit import hookimpl


@hookimpl
def agentkit_register_harnesses(register: Any) -> None:
    """The ``claude-code`` harness: the real Claude Code CLI against the run's endpoint."""
    from agentkit_claude_code.harness import ClaudeCode

    register(ClaudeCode, name="claude-code", description=ClaudeCode.description)
