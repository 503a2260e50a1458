"""The ``agentkit`` entry point (``terminal``): what this distribution registers."""

from __future__ import annotations

from typing import Any

from agentkit.hookspecs import hookimpl


@hookimpl
def agentkit_register_harnesses(register: Any) -> None:
    """``terminal``: a tool-call loop with a shell in the task's sandbox; step-capable."""
    register(
        "agentkit_terminal.harness:TerminalHarness",  # imported when a run uses it
        name="terminal",
        description="A tool-call loop with a shell in the task's sandbox (shell and submit "
        "tools); step-capable.",
    )
