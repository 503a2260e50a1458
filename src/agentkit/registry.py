"""The plugin registry: what is installed, and turning names into instances.

>>> from agentkit import registry
>>> harness = registry.resolve_harness("chat")
>>> taskset = registry.resolve_taskset("jsonl:examples/jsonl/arithmetic.jsonl")

Plugins are loaded on first use, never at ``import agentkit``.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from agentkit._errors import PluginError, SpecError, UnknownNameError
from agentkit._options import OptionSchema
from agentkit._plugins import (
    KINDS,
    Kind,
    LoadedRegistry,
    PluginFailure,
    PluginInfo,
    Registration,
    load,
)

if TYPE_CHECKING:
    from agentkit._harness import Harness
    from agentkit._taskset import Taskset

__all__ = [
    "FIRST_PARTY",
    "KINDS",
    "PluginFailure",
    "PluginInfo",
    "Registration",
    "failures",
    "get",
    "get_registry",
    "names",
    "option_schema",
    "parse_taskset_spec",
    "plugins",
    "reset",
    "resolve_harness",
    "resolve_rubric_contributors",
    "resolve_sandbox",
    "resolve_taskset",
]

#: First-party names and the distribution that provides each.
FIRST_PARTY: dict[tuple[str, str], str] = {
    ("taskset", "harbor"): "agentkit-harbor",
    ("harness", "oracle"): "agentkit-harbor",
    ("harness", "nop"): "agentkit-harbor",
    ("harness", "opencode"): "agentkit-opencode",
    ("harness", "mini-swe-agent"): "agentkit-mini-swe-agent",
    ("harness", "codex"): "agentkit-codex",
    ("harness", "claude-code"): "agentkit-claude-code",
    ("taskset", "fleet"): "agentkit-fleet",
    ("harness", "fleet-tool-call"): "agentkit-fleet",
    ("harness", "terminal"): "agentkit-terminal",
}

_KIND_WORD = {
    "taskset": "taskset provider",
    "harness": "harness",
    "rubric": "rubric contributor",
    "sandbox": "sandbox",
}


_current: LoadedRegistry | None = None


def get_registry() -> LoadedRegistry:
    """Load every plugin once per process and return the registry."""
    global _current
    if _current is None:
        _current = load()
    return _current


def reset(plugin_modules: list[tuple[str, Any, str, str]] | None = None) -> LoadedRegistry:
    """Forget the loaded plugins and load them again (after an install, or in tests).

    ``plugin_modules`` loads the given (name, module, distribution, version)
    plugins instead of the entry points, beside the default plugins.
    """
    global _current

    _current = load(plugin_modules)
    return _current


def plugins() -> list[PluginInfo]:
    """The loaded plugins, default plugins first."""
    return list(get_registry().plugins)


def failures() -> list[PluginFailure]:
    """Plugins, or registrations, that failed to load, with the reason."""
    return list(get_registry().failures)


def names(kind: Kind) -> list[str]:
    """The registered names of one kind, sorted."""
    _check_kind(kind)
    return sorted(get_registry().entries.get(kind, {}))


def _check_kind(kind: str) -> None:
    if kind not in KINDS:
        raise SpecError(f"unknown kind {kind!r}; expected one of: {', '.join(KINDS)}")


def get(kind: Kind, name: str) -> Registration:
    """The registration for ``name``, or a clear error saying what is installed."""
    _check_kind(kind)
    reg = get_registry()
    found = reg.entries.get(kind, {}).get(name)
    if found is not None:
        return found
    clash = reg.conflicts.get((kind, name))
    if clash:
        both = " and ".join(f"{r.distribution} (plugin {r.plugin})" for r in clash)
        raise PluginError(
            f"{_KIND_WORD[kind]} name {name!r} is registered by both {both}; "
            "uninstall one, or block one with AGENTKIT_DISABLE_PLUGINS"
        )
    known = names(kind)
    msg = f"unknown {_KIND_WORD[kind]} {name!r}; installed: {', '.join(known) or 'none'}"
    dist = FIRST_PARTY.get((kind, name))
    if dist:
        msg += (
            f". {name!r} is provided by the {dist} distribution: "
            f"pip install {dist} (or pip install ./plugins/{dist} from a checkout)"
        )
        if dist in reg.skipped:
            msg += f". Note: {dist} is installed but not loaded: {reg.skipped[dist]}"
    else:
        import difflib

        close = difflib.get_close_matches(name, known, n=1)
        if close:
            msg += f". Did you mean {close[0]!r}?"
        if reg.skipped:
            left_out = ", ".join(f"{d} ({why})" for d, why in sorted(reg.skipped.items()))
            msg += f". Note: installed but not loaded: {left_out}"
    for failure in reg.failures:
        if failure.name == name or (dist is not None and failure.distribution == dist):
            msg += f". Note: {failure}"
    raise UnknownNameError(msg)


def option_schema(kind: Kind, name: str) -> OptionSchema:
    """The typed options a registered factory accepts (``-H``/``-T`` on the CLI)."""
    r = get(kind, name)
    skip = 1 if kind == "taskset" else 0
    return OptionSchema.from_callable(f"{_KIND_WORD[kind]} {name!r}", r.factory, skip=skip)


def parse_taskset_spec(spec: str) -> tuple[str, str]:
    """Split ``"provider:argument"`` at the first ``:``."""
    provider, sep, argument = spec.partition(":")
    if not sep or not provider:
        raise SpecError(
            f"taskset spec {spec!r} has no provider; expected PROVIDER:ARGUMENT "
            f"(for example jsonl:tasks.jsonl); installed providers: "
            f"{', '.join(names('taskset')) or 'none'}"
        )
    return provider, argument


def resolve_taskset(spec: str, **options: Any) -> Taskset:
    """Build the taskset named by ``"provider:argument"`` with typed ``options``."""
    # deferred: the taskset contract (and Task under it) is not needed for agentkit plugins
    from agentkit._taskset import Taskset

    provider, argument = parse_taskset_spec(spec)
    r = get("taskset", provider)
    option_schema("taskset", provider).validate(options)
    taskset = r.factory(argument, **options)
    if not isinstance(taskset, Taskset):
        raise PluginError(
            f"taskset provider {provider!r} ({r.distribution}) returned "
            f"{type(taskset).__name__}, which is not a Taskset "
            "(it needs taskset_id, __iter__ and get_task)"
        )
    return taskset


def resolve_harness(name: str, **options: Any) -> Harness:
    """Build the harness registered as ``name`` with typed ``options``."""
    r = get("harness", name)
    option_schema("harness", name).validate(options)
    harness: Harness = r.factory(**options)
    return harness


def resolve_sandbox(name: str, **options: Any) -> Any:
    """The sandbox factory registered as ``name``, with ``options`` bound.

    Call the result with ``root=``, ``hints=`` and ``rollout_id=`` to get one
    rollout's sandbox. A factory with a ``check_options(**options)`` classmethod
    has it called here, so values no rollout could use are one error up front.
    """
    r = get("sandbox", name)
    schema = option_schema("sandbox", name)
    per_rollout = {"root", "hints", "rollout_id", "model_endpoint"}
    schema.options = {k: v for k, v in schema.options.items() if k not in per_rollout}
    schema.validate(options)
    check = getattr(r.factory, "check_options", None)
    if callable(check):  # values no rollout could use: one error now, not one per rollout
        check(**options)
    return functools.partial(r.factory, **options)


def resolve_rubric_contributors(only: Iterable[str] | None = None) -> list[Registration]:
    """Rubric contributors, in registration order (optionally only some names)."""
    table = get_registry().entries.get("rubric", {})
    if only is None:
        return list(table.values())
    return [get("rubric", n) for n in only]
