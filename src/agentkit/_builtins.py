"""agentkit's default plugin: built-in pieces registered through the same hooks."""

from __future__ import annotations

from typing import Any

from agentkit.hookspecs import hookimpl


@hookimpl
def agentkit_register_harnesses(register: Any) -> None:
    """The ``chat`` harness: one OpenAI-compatible chat completion per task."""
    # references: each is imported when a run uses it, not when the plugins load
    register(
        "agentkit.harnesses.chat:ChatHarness",
        name="chat",
        description="Send the task's prompt or chat messages to an OpenAI-compatible endpoint.",
    )


@hookimpl
def agentkit_register_tasksets(register: Any) -> None:
    """The ``jsonl`` taskset provider: one task per line of a JSONL file."""
    register(
        "agentkit.tasksets.jsonl:JsonlTaskset",
        name="jsonl",
        description="Tasks read from a JSON Lines file, one task per line.",
    )


@hookimpl
def agentkit_register_sandboxes(register: Any) -> None:
    """The ``local`` (bubblewrap) sandbox, ``docker`` and the explicit, unisolated ``host`` mode."""
    register(
        "agentkit.sandbox.local:LocalSandbox",
        name="local",
        description="A bubblewrap sandbox: host /usr read-only, the rollout's own writable root.",
    )
    register(
        "agentkit.sandbox.docker:DockerSandbox",
        name="docker",
        description="A container per rollout, from the task's image.",
    )
    register(
        "agentkit.sandbox.host:HostSandbox",
        name="host",
        description="Unisolated: runs commands on the host, in <root>/fs.",
    )
