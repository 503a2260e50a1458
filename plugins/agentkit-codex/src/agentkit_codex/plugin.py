"""agentkit plugin entry point: registers the ``codex`` harness."""

from __future__ import annotations

from typing import Any

from agentkit import hookimpl


@hookimpl
def agentkit_register_harnesses(register: Any) -> None:
    """The ``codex`` harness: the real Codex CLI against the run's endpoint."""
    from agentkit_codex.harness import Codex

    register(Codex, name="codex", description=Codex.description)
