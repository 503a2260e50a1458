"""agentkit plugin entry point: registers the ``codex`` harness."""

from __future__ import annotations

from typing import Any

from agentkit import hookimpl


@hookimpl
def agentkit_register_harnesses(register: Any) -> None:
    """The ``codex`` harness: the real program against the run's endpoint."""
    register(
        "agentkit_codex.harness:Codex",  # imported when a run uses it
        name="codex",
        description=(
            "The real Codex CLI (codex exec), run non-interactively in the rollout's sandbox."
        ),
    )
