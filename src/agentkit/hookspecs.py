"""The hooks a plugin implements. Each receives a ``register`` callback.

The core owns the names: ``register(obj, name=None, description=None)``
takes the name from ``name=`` or ``obj.name``, and a name registered twice
is an error that names both distributions. ``obj`` may also be a reference,
``"package.module:Name"`` (with ``name`` and ``description``): it is imported
the first time it is used, so a run imports only what it uses.

These are pluggy hooks. The registry calls each plugin's implementation
through its plugin manager's hook caller, one plugin at a time, so a hook
that raises fails only its own plugin (see docs/hooks.md).
"""

from __future__ import annotations

from typing import Any

import pluggy

__all__ = ["hookimpl", "hookspec"]

hookspec = pluggy.HookspecMarker("agentkit")
hookimpl = pluggy.HookimplMarker("agentkit")


@hookspec
def agentkit_register_tasksets(register: Any) -> None:
    """Register taskset providers.

    ``register(factory, name=...)``: ``factory(argument, **options)`` returns
    a :class:`~agentkit.Taskset` for the spec ``name:argument``.
    """


@hookspec
def agentkit_register_harnesses(register: Any) -> None:
    """Register harnesses.

    ``register(HarnessClass, name=...)``: ``HarnessClass(**options)`` is a
    :class:`~agentkit.Harness` (an ``async def run(task, context=None, on_event=None)``).
    """


@hookspec
def agentkit_register_rubrics(register: Any) -> None:
    """Register rubric contributors.

    ``register(contributor, name=...)``: ``contributor(taskset, harness)``
    returns a :class:`~agentkit.Rubric` or None; its metrics are namespaced
    ``<name>.*`` in every compiled rubric.
    """


@hookspec
def agentkit_register_sandboxes(register: Any) -> None:
    """Register sandbox kinds.

    ``register(SandboxClass, name=...)``: ``SandboxClass(root=..., hints=...,
    rollout_id=..., **options)`` is one rollout's :class:`~agentkit.Sandbox`.
    """


@hookspec
def agentkit_register_commands(cli: Any) -> None:
    """Add subcommands to the ``agentkit`` command line (``cli`` is a click group)."""
