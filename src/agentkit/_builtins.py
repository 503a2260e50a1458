"""agentkit's default plugin: built-in pieces registered through the same hooks."""

from __future__ import annotations

from typing import Any

from agentkit.hookspecs import hookimpl


@hookimpl
def agentkit_register_harnesses(register: Any) -> None:
    """The ``chat`` harness: one OpenAI-compatible chat completion per task."""
    from agentkit.harnesses.chat import ChatHarness

    register(ChatHarness, name="chat")


@hookimpl
def agentkit_register_tasksets(register: Any) -> None:
    """The ``jsonl`` taskset provider: one task per line of a JSONL file."""
    from agentkit.tasksets.jsonl import JsonlTaskset

    register(JsonlTaskset, name="jsonl")


@hookimpl
def agentkit_register_sandboxes(register: Any) -> None:
    """The ``local`` (bubblewrap) sandbox, ``docker`` and the explicit, unisolated ``host`` mode."""
    from agentkit.sandbox.docker import DockerSandbox
    from agentkit.sandbox.host import HostSandbox
    from agentkit.sandbox.local import LocalSandbox

    register(LocalSandbox, name="local")
    register(DockerSandbox, name="docker")
    register(HostSandbox, name="host")
