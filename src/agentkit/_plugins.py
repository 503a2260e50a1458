"""Loading plugins: default plugins, then the ``agentkit`` entry points.

A plugin that fails to import, implements a hook that does not exist, or
registers something that is not what it claims is recorded as a
:class:`PluginFailure` (with its distribution and the reason); the others
still load.
"""

from __future__ import annotations

import difflib
import functools
import importlib
import inspect
import os
import re
import traceback
from collections.abc import Callable
from types import ModuleType
from typing import Any, Literal

import attrs

from agentkit._errors import PluginError
from agentkit._version import __version__

__all__ = [
    "KINDS",
    "Kind",
    "LoadedRegistry",
    "PluginFailure",
    "PluginInfo",
    "Registration",
    "command_hooks",
    "load",
]

Kind = Literal["taskset", "harness", "rubric", "sandbox"]
KINDS: tuple[Kind, ...] = ("taskset", "harness", "rubric", "sandbox")
_HOOK_OF: dict[Kind, str] = {
    "taskset": "agentkit_register_tasksets",
    "harness": "agentkit_register_harnesses",
    "rubric": "agentkit_register_rubrics",
    "sandbox": "agentkit_register_sandboxes",
}
_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]*$")

#: Rubric namespaces that are not a contributor's to take.
RESERVED_NAMESPACES = frozenset({"core", "harness", "user"})
#: Default plugins, loaded before entry points, like llm's default plugins.
DEFAULT_PLUGINS: tuple[str, ...] = ("agentkit._builtins",)


@attrs.frozen
class Registration:
    """One registered name: what it is, what builds it, and who registered it.

    A plugin may register a reference, ``"package.module:Attribute"``, instead
    of the object: it is imported the first time :attr:`factory` is used, so
    a run imports only the plugins' pieces it uses.
    """

    kind: Kind
    name: str
    _factory: Any = attrs.field(alias="factory")
    _description: str | None = attrs.field(alias="description")
    plugin: str
    distribution: str
    version: str
    _resolved: list[Any] = attrs.field(factory=list, eq=False, repr=False)

    @property
    def factory(self) -> Any:
        """What builds the registered thing (a lazy reference is imported now, and checked)."""
        if not isinstance(self._factory, str):
            return self._factory
        if not self._resolved:
            module, _, attr = self._factory.partition(":")
            try:
                obj = getattr(importlib.import_module(module), attr)
            except Exception as exc:
                raise PluginError(
                    f"{self.kind} {self.name!r} of {self.distribution} cannot be loaded from "
                    f"{self._factory}: {type(exc).__name__}: {exc}"
                ) from None
            problem = _check(self.kind, obj)
            if problem:
                raise PluginError(f"{self.kind} {self.name!r} is invalid: {problem}")
            self._resolved.append(obj)
        return self._resolved[0]

    @property
    def description(self) -> str:
        """One line for people (the registration's, else the object's docstring)."""
        if self._description is None:
            return _describe(self.factory)
        return self._description


@attrs.frozen
class PluginInfo:
    """A loaded plugin and the names it registers."""

    name: str
    distribution: str
    version: str
    module: str
    registers: dict[str, list[str]]

    def to_json(self) -> dict[str, Any]:
        """``agentkit plugins`` output for this plugin."""
        return {
            "name": self.name,
            "distribution": self.distribution,
            "version": self.version,
            "module": self.module,
            "tasksets": self.registers.get("taskset", []),
            "harnesses": self.registers.get("harness", []),
            "rubrics": self.registers.get("rubric", []),
            "sandboxes": self.registers.get("sandbox", []),
        }


@attrs.frozen
class PluginFailure:
    """A plugin (or one of its registrations) that could not be loaded, and why."""

    name: str
    distribution: str
    error: str
    detail: str = ""

    def __str__(self) -> str:
        return f"plugin {self.name!r} (distribution {self.distribution}): {self.error}"

    def to_json(self) -> dict[str, Any]:
        """``agentkit plugins`` output for this failure."""
        return {"name": self.name, "distribution": self.distribution, "error": self.error}


@attrs.define
class LoadedRegistry:
    """Everything the plugins registered, by kind and name."""

    entries: dict[str, dict[str, Registration]] = attrs.field(factory=dict)
    conflicts: dict[tuple[str, str], list[Registration]] = attrs.field(factory=dict)
    plugins: list[PluginInfo] = attrs.field(factory=list)
    failures: list[PluginFailure] = attrs.field(factory=list)
    commands_hooks: list[Callable[..., Any]] = attrs.field(factory=list)
    #: installed distributions left out by AGENTKIT_PLUGINS / AGENTKIT_DISABLE_PLUGINS, and why
    skipped: dict[str, str] = attrs.field(factory=dict)


def _split_env(var: str) -> set[str] | None:
    raw = os.environ.get(var)
    if raw is None:
        return None
    return {s.strip() for s in raw.split(",") if s.strip()}


#: reStructuredText roles (``:class:`X```) and literals (````x````) in a docstring line.
_ROLE = re.compile(r":[a-z]+(?::[a-z]+)?:`~?([^`]+)`")
_LITERAL = re.compile(r"``([^`]+)``")


def plain_text(line: str) -> str:
    """A docstring line without reStructuredText markup, for people."""
    text = _ROLE.sub(
        lambda m: m.group(1).split(".")[-1] if "<" not in m.group(1) else m.group(1), line
    )
    text = _LITERAL.sub(r"\1", text)
    text = re.sub(r"\s*\(see [A-Z_]+\)", "", text)  # a pointer to a constant reads oddly here
    return text


def _describe(obj: Any) -> str:
    desc = getattr(obj, "description", None)
    if isinstance(desc, str) and desc:
        return plain_text(desc.strip().splitlines()[0])
    doc = inspect.getdoc(obj) or ""
    return plain_text(doc.strip().splitlines()[0]) if doc.strip() else ""


def _check(kind: Kind, obj: Any) -> str | None:
    """Say why ``obj`` cannot be registered as a ``kind``, or return None."""
    if kind == "harness":
        # deferred: the harness contract (and Task under it) is not needed for agentkit --help
        from agentkit._harness import check_harness

        return check_harness(obj)
    if not callable(obj):
        return f"a {kind} registration must be callable (a class or factory), got {obj!r}"
    try:
        target = obj.__init__ if inspect.isclass(obj) else obj
        sig = inspect.signature(target)
    except (TypeError, ValueError):
        return None
    params = [p for p in sig.parameters.values() if p.name not in ("self", "cls")]
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    required = [p for p in positional if p.default is inspect.Parameter.empty]
    takes_varargs = any(p.kind is p.VAR_POSITIONAL for p in params)
    takes_kwargs = any(p.kind is p.VAR_KEYWORD for p in params)
    if kind == "taskset":
        if not positional and not takes_varargs:
            return "a taskset provider must accept the spec's argument: factory(argument, **opts)"
        if len(required) > 1:
            return (
                "a taskset provider may require only the spec's argument; "
                f"it requires {', '.join(p.name for p in required)}"
            )
    elif kind == "rubric":
        if len(required) > 2:
            return "a rubric contributor must accept (taskset, harness)"
    elif kind == "sandbox" and not takes_kwargs:
        names = {p.name for p in params}
        missing = [n for n in ("root", "hints", "rollout_id") if n not in names]
        if missing:
            return (
                "a sandbox factory must accept root=, hints=, rollout_id= "
                f"(missing {', '.join(missing)})"
            )
    return None


def _hook_problems(module: Any, spec_names: set[str]) -> list[str]:
    """Hooks a plugin meant to implement but that pluggy would silently ignore.

    A decorated function whose name is not a hook (a misspelling), an
    undecorated function whose name is close to a hook, and a hook without
    ``@agentkit.hookimpl``.
    """
    problems = []
    for attr in sorted(dir(module)):
        if not attr.startswith("agentkit_"):
            continue
        value = getattr(module, attr, None)
        if not callable(value):
            continue
        decorated = getattr(value, "agentkit_impl", None) is not None
        if attr in spec_names:
            if not decorated:
                problems.append(f"{attr} is not decorated with @agentkit.hookimpl")
            continue
        close = difflib.get_close_matches(attr, sorted(spec_names), n=1)
        if decorated:
            hint = f" (did you mean {close[0]}?)" if close else ""
            problems.append(f"implements unknown hook {attr}{hint}")
        elif close:
            problems.append(f"implements unknown hook {attr} (did you mean {close[0]}?)")
    return problems


def load(
    plugin_modules: list[tuple[str, ModuleType | object, str, str]] | None = None,
) -> LoadedRegistry:
    """Load default plugins and entry-point plugins into a fresh registry.

    ``plugin_modules`` replaces entry-point discovery (used by tests):
    tuples of (plugin name, module or object, distribution, version).
    """
    # deferred: pluggy and the hook specifications load with the plugins, not for --help
    import pluggy

    from agentkit import hookspecs

    pm = pluggy.PluginManager("agentkit")
    pm.add_hookspecs(hookspecs)
    reg = LoadedRegistry()
    spec_names = {n for n in dir(hookspecs) if n.startswith("agentkit_")}

    candidates: list[tuple[str, Callable[[], Any], str, str]] = [
        (mod, functools.partial(importlib.import_module, mod), "agentkit", __version__)
        for mod in DEFAULT_PLUGINS
    ]
    if plugin_modules is not None:
        candidates += [(n, _constant(o), d, v) for n, o, d, v in plugin_modules]
    else:
        candidates += _entry_point_candidates()

    only = _split_env("AGENTKIT_PLUGINS")
    blocked = _split_env("AGENTKIT_DISABLE_PLUGINS") or set()
    seen: dict[str, str] = {}
    if only:
        available = {n for n, *_ in candidates} | {d for *_, d, _v in candidates}
        for wanted in sorted(only - available):
            reg.failures.append(
                PluginFailure(
                    wanted,
                    "(not installed)",
                    "named in AGENTKIT_PLUGINS, but no installed distribution has an "
                    "'agentkit' entry point of that name",
                )
            )

    for name, loader, dist, version in candidates:
        builtin = name in DEFAULT_PLUGINS
        if not builtin:
            if only is not None and name not in only and dist not in only:
                reg.skipped[dist] = "AGENTKIT_PLUGINS does not name it"
                continue
            if name in blocked or dist in blocked:
                reg.skipped[dist] = "AGENTKIT_DISABLE_PLUGINS blocks it"
                continue
        try:
            module = loader()
        except (Exception, SystemExit) as exc:  # a plugin calling sys.exit() is broken too
            reg.failures.append(
                PluginFailure(
                    name,
                    dist,
                    f"failed to import: {type(exc).__name__}: {exc}",
                    traceback.format_exc(),
                )
            )
            continue
        # A misspelled or undecorated hook is reported; the plugin is then skipped.
        problems = _hook_problems(module, spec_names)
        if problems:
            reg.failures.append(
                PluginFailure(
                    name,
                    dist,
                    "; ".join(problems) + "; known hooks: " + ", ".join(sorted(spec_names)),
                )
            )
            continue
        if name in seen:
            reg.failures.append(
                PluginFailure(
                    name,
                    dist,
                    f"plugin name {name!r} is also used by {seen[name]}; "
                    "rename one entry point in [project.entry-points.agentkit]",
                )
            )
            continue
        try:
            pm.register(module, name=name)
        except Exception as exc:  # pluggy.PluginValidationError: wrong hook signature
            reg.failures.append(PluginFailure(name, dist, f"invalid hook implementation: {exc}"))
            continue
        seen[name] = dist
        info = PluginInfo(
            name=name,
            distribution=dist,
            version=version,
            module=getattr(module, "__name__", repr(module)),
            registers={},
        )
        failed_before = len(reg.failures)
        _collect(pm, module, name, dist, version, info, reg)
        impl = getattr(module, "agentkit_register_commands", None)
        if len(reg.failures) > failed_before and not info.registers and impl is None:
            continue  # nothing usable: the plugin is listed only under its failures
        reg.plugins.append(info)
        if impl is not None:
            reg.commands_hooks.append(impl)
    return reg


def command_hooks() -> list[Callable[..., Any]]:
    """Every enabled plugin's ``agentkit_register_commands``, importing only plugin modules.

    For ``agentkit --help``: no taskset, harness or sandbox is registered, so
    the plugins' own code is not imported. A plugin that fails to import is
    left out here (``agentkit plugins`` reports it).
    """
    only = _split_env("AGENTKIT_PLUGINS")
    blocked = _split_env("AGENTKIT_DISABLE_PLUGINS") or set()
    hooks = []
    for name, loader, dist, _version in _entry_point_candidates():
        if only is not None and name not in only and dist not in only:
            continue
        if name in blocked or dist in blocked:
            continue
        try:
            module = loader()
        except (Exception, SystemExit):
            continue
        impl = getattr(module, "agentkit_register_commands", None)
        if callable(impl):
            hooks.append(impl)
    return hooks


def _constant(value: Any) -> Callable[[], Any]:
    return lambda: value


def _entry_point_candidates() -> list[tuple[str, Callable[[], Any], str, str]]:
    from importlib.metadata import entry_points

    out = []
    for ep in entry_points(group="agentkit"):
        dist = ep.dist.name if ep.dist is not None else "?"
        version = ep.dist.version if ep.dist is not None else "?"
        out.append((ep.name, ep.load, dist, version))
    return out


def _collect(
    pm: Any,
    module: Any,
    plugin: str,
    dist: str,
    version: str,
    info: PluginInfo,
    reg: LoadedRegistry,
) -> None:
    for kind, hook_name in _HOOK_OF.items():
        impl = getattr(module, hook_name, None)
        if impl is None or getattr(impl, "agentkit_impl", None) is None:
            continue
        pending: list[Registration] = []

        def register(
            obj: Any,
            name: str | None = None,
            description: str | None = None,
            *,
            _kind: Kind = kind,
            _pending: list[Registration] = pending,
        ) -> None:
            reg_name = name or getattr(obj, "name", None)
            if not isinstance(reg_name, str) or not _NAME.match(reg_name):
                raise ValueError(
                    f"{_kind} {obj!r} needs a name: pass register(obj, name='...') or set "
                    f"obj.name (lowercase letters, digits, '.', '_', '-'); got {reg_name!r}"
                )
            if _kind == "rubric" and reg_name in RESERVED_NAMESPACES:
                raise ValueError(
                    f"rubric contributor name {reg_name!r} is reserved: the contributor's "
                    "name is its metrics' namespace, and core.*, harness.* and user.* belong "
                    "to the taskset, the harness and env.add_rubric(); choose another name"
                )
            lazy = isinstance(obj, str)
            if lazy and not re.fullmatch(r"[\w.]+:[\w.]+", obj):
                raise ValueError(
                    f"{_kind} {reg_name!r}: a reference must look like 'package.module:Name', "
                    f"got {obj!r}"
                )
            problem = None if lazy else _check(_kind, obj)
            if problem:
                raise ValueError(f"{_kind} {reg_name!r} is invalid: {problem}")
            _pending.append(
                Registration(
                    kind=_kind,
                    name=reg_name,
                    factory=obj,
                    description=description or (None if lazy else _describe(obj)),
                    plugin=plugin,
                    distribution=dist,
                    version=version,
                )
            )

        try:
            impl(register=register)
        except Exception as exc:
            reg.failures.append(
                PluginFailure(plugin, dist, f"{hook_name} failed: {exc}", traceback.format_exc())
            )
            continue
        for r in pending:
            _add(reg, info, r)


def _add(reg: LoadedRegistry, info: PluginInfo, r: Registration) -> None:
    table = reg.entries.setdefault(r.kind, {})
    info.registers.setdefault(r.kind, []).append(r.name)
    key = (r.kind, r.name)
    if key in reg.conflicts:
        reg.conflicts[key].append(r)
        return
    existing = table.get(r.name)
    if existing is None:
        table[r.name] = r
        return
    del table[r.name]
    reg.conflicts[key] = [existing, r]
    reg.failures.append(
        PluginFailure(
            r.plugin,
            r.distribution,
            f"{r.kind} name {r.name!r} is registered by both {existing.distribution} "
            f"(plugin {existing.plugin}) and {r.distribution} (plugin {r.plugin})",
        )
    )
