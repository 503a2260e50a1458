"""Loading plugins into pluggy: default plugins, then the ``agentkit`` entry points.

Each plugin is registered with one :class:`pluggy.PluginManager`, and its
hooks are called through the manager's hook callers, one plugin at a time
(see :class:`PluginHooks`). A plugin that fails to import, implements a hook
that does not exist, or registers something that is not what it claims is
recorded as a :class:`PluginFailure` (with its distribution and the reason);
the others still load.
"""

from __future__ import annotations

import difflib
import functools
import importlib
import inspect
import os
import re
import traceback
from collections.abc import Callable, Iterable
from types import ModuleType
from typing import TYPE_CHECKING, Any, Literal

import attrs
import pluggy

from agentkit import hookspecs
from agentkit._errors import PluginError
from agentkit._version import __version__

if TYPE_CHECKING:
    import click

__all__ = [
    "KINDS",
    "Kind",
    "LoadedRegistry",
    "PluginFailure",
    "PluginHooks",
    "PluginInfo",
    "Registration",
    "add_plugin_commands",
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


class PluginHooks:
    """agentkit's hooks in a :class:`pluggy.PluginManager`, each plugin's called alone.

    The typed face of pluggy for the rest of agentkit. A plugin is registered
    with :meth:`pluggy.PluginManager.register` and checked with
    :meth:`~pluggy.PluginManager.check_pending`; its hooks are called through
    :meth:`~pluggy.PluginManager.subset_hook_caller` with every other plugin
    removed, so what it registers is known to be its own and a hook that
    raises fails only its plugin. Names in ``AGENTKIT_DISABLE_PLUGINS`` are
    blocked with :meth:`~pluggy.PluginManager.set_blocked`.
    """

    def __init__(self) -> None:
        self.manager = pluggy.PluginManager("agentkit")
        self.manager.add_hookspecs(hookspecs)
        #: The hooks a plugin may implement, sorted.
        self.spec_names = sorted(n for n in dir(hookspecs) if n.startswith("agentkit_"))

    def block(self, names: Iterable[str]) -> None:
        """Never register plugins of these names."""
        for name in names:
            self.manager.set_blocked(name)

    def is_blocked(self, name: str) -> bool:
        """Whether ``name`` is blocked."""
        return self.manager.is_blocked(name)

    def plugins(self) -> list[tuple[str, object]]:
        """The registered plugins, by name, in registration order."""
        return [(n, p) for n, p in self.manager.list_name_plugin() if p is not None]

    def add(self, name: str, plugin: object) -> str | None:
        """Register ``plugin`` as ``name``; None, or why it was not registered.

        pluggy alone would register a plugin whose hook is misspelled and never
        call that hook: such a plugin, and one whose hook is not decorated with
        ``@agentkit.hookimpl`` or does not match its spec, is not registered.
        """
        pm = self.manager
        loaded_as = pm.get_name(plugin)
        if loaded_as is not None:
            return f"its module is already loaded as plugin {loaded_as!r}"
        try:
            pm.register(plugin, name=name)
        except pluggy.PluginValidationError as exc:  # a hook's arguments do not match its spec
            pm.unregister(plugin, name)  # pluggy < 1.7 keeps the hooks it registered before
            return f"invalid hook implementation: {self._one_line(exc)}"
        problems = self._undecorated(plugin)
        try:
            pm.check_pending()
        except pluggy.PluginValidationError:  # a hook that no spec has: misspelled
            for caller in pm.get_hookcallers(plugin) or ():
                if not caller.has_spec():
                    close = difflib.get_close_matches(caller.name, self.spec_names, n=1)
                    hint = f" (did you mean {close[0]}?)" if close else ""
                    problems[caller.name] = f"implements unknown hook {caller.name}{hint}"
        if not problems:
            return None
        pm.unregister(plugin, name)
        listed = "; ".join(problems[attr] for attr in sorted(problems))
        return f"{listed}; known hooks: {', '.join(self.spec_names)}"

    def _one_line(self, exc: pluggy.PluginValidationError) -> str:
        """pluggy's message on one line, with the hook's spec when it names one."""
        text = "; ".join(line.strip() for line in str(exc).splitlines() if line.strip())
        hook = re.search(r"hook '(agentkit_\w+)'", text)
        if hook is not None and hook.group(1) in self.spec_names:
            spec = getattr(self.manager.hook, hook.group(1)).spec
            if spec is not None:
                text += f"; the hook is {hook.group(1)}({', '.join(spec.argnames)})"
        return text

    def _undecorated(self, plugin: object) -> dict[str, str]:
        """Functions that look like hooks but that pluggy does not take for hook implementations.

        A hook's name without ``@agentkit.hookimpl``, or a name close to a hook's.
        """
        problems = {}
        for attr in dir(plugin):
            if not attr.startswith("agentkit_") or not callable(getattr(plugin, attr, None)):
                continue
            if self.manager.parse_hookimpl_opts(plugin, attr) is not None:
                continue  # decorated: pluggy registered it, and checks it
            if attr in self.spec_names:
                problems[attr] = f"{attr} is not decorated with @agentkit.hookimpl"
                continue
            close = difflib.get_close_matches(attr, self.spec_names, n=1)
            if close:
                problems[attr] = f"implements unknown hook {attr} (did you mean {close[0]}?)"
        return problems

    def implements(self, plugin: object) -> set[str]:
        """The hooks ``plugin`` implements."""
        return {caller.name for caller in self.manager.get_hookcallers(plugin) or ()}

    def _alone(self, hook: str, plugin: object) -> pluggy.HookCaller:
        others = [p for _name, p in self.plugins() if p is not plugin]
        return self.manager.subset_hook_caller(hook, remove_plugins=others)

    def register_names(self, kind: Kind, plugin: object, register: Callable[..., None]) -> None:
        """Call ``plugin``'s registration hook for ``kind`` with ``register``."""
        self._alone(_HOOK_OF[kind], plugin)(register=register)

    def add_commands(self, plugin: object, cli: click.Group) -> None:
        """Call ``plugin``'s ``agentkit_register_commands`` with ``cli``."""
        self._alone("agentkit_register_commands", plugin)(cli=cli)


@attrs.define
class LoadedRegistry:
    """Everything the plugins registered, by kind and name."""

    hooks: PluginHooks
    entries: dict[str, dict[str, Registration]] = attrs.field(factory=dict)
    conflicts: dict[tuple[str, str], list[Registration]] = attrs.field(factory=dict)
    plugins: list[PluginInfo] = attrs.field(factory=list)
    failures: list[PluginFailure] = attrs.field(factory=list)
    #: installed distributions left out by AGENTKIT_PLUGINS / AGENTKIT_DISABLE_PLUGINS, and why
    skipped: dict[str, str] = attrs.field(factory=dict)

    def add_commands(self, cli: click.Group) -> None:
        """Let every loaded plugin add its subcommands to ``cli``, in loading order."""
        for _name, plugin in self.hooks.plugins():
            if "agentkit_register_commands" in self.hooks.implements(plugin):
                self.hooks.add_commands(plugin, cli)


def _split_env(var: str) -> set[str] | None:
    raw = os.environ.get(var)
    if raw is None:
        return None
    return {s.strip() for s in raw.split(",") if s.strip()}


def _selection(hooks: PluginHooks) -> set[str] | None:
    """Block what ``AGENTKIT_DISABLE_PLUGINS`` names; the names ``AGENTKIT_PLUGINS`` limits to."""
    hooks.block((_split_env("AGENTKIT_DISABLE_PLUGINS") or set()) - set(DEFAULT_PLUGINS))
    return _split_env("AGENTKIT_PLUGINS")


def _left_out(hooks: PluginHooks, only: set[str] | None, name: str, dist: str) -> str | None:
    """Why the entry point ``name`` of ``dist`` is not loaded, or None."""
    if only is not None and name not in only and dist not in only:
        return "AGENTKIT_PLUGINS does not name it"
    if hooks.is_blocked(name) or hooks.is_blocked(dist):  # a distribution's name blocks it all
        return "AGENTKIT_DISABLE_PLUGINS blocks it"
    return None


def load(
    plugin_modules: list[tuple[str, ModuleType | object, str, str]] | None = None,
) -> LoadedRegistry:
    """Load default plugins and entry-point plugins into a fresh registry.

    ``plugin_modules`` replaces entry-point discovery (used by tests):
    tuples of (plugin name, module or object, distribution, version).
    """
    reg = LoadedRegistry(PluginHooks())
    candidates: list[tuple[str, Callable[[], Any], str, str]] = [
        (mod, functools.partial(importlib.import_module, mod), "agentkit", __version__)
        for mod in DEFAULT_PLUGINS
    ]
    if plugin_modules is not None:
        candidates += [(n, _constant(o), d, v) for n, o, d, v in plugin_modules]
    else:
        candidates += _entry_point_candidates()

    only = _selection(reg.hooks)
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

    seen: dict[str, str] = {}
    for name, loader, dist, version in candidates:
        if name not in DEFAULT_PLUGINS:
            why = _left_out(reg.hooks, only, name, dist)
            if why is not None:
                reg.skipped[dist] = why
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
        plugin = _hashable(name, module)
        problem = reg.hooks.add(name, plugin)
        if problem is not None:
            reg.failures.append(PluginFailure(name, dist, problem))
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
        _collect(reg, plugin, info)
        commands = "agentkit_register_commands" in reg.hooks.implements(plugin)
        if len(reg.failures) > failed_before and not info.registers and not commands:
            continue  # nothing usable: the plugin is listed only under its failures
        reg.plugins.append(info)
    return reg


def add_plugin_commands(cli: click.Group) -> None:
    """Let every enabled entry-point plugin add its subcommands, importing only plugin modules.

    For ``agentkit --help``: no taskset, harness or sandbox is registered, so
    the plugins' own code is not imported. A plugin that fails to import, or
    whose hook raises, is left out here (``agentkit plugins`` reports it).
    """
    hooks = PluginHooks()
    only = _selection(hooks)
    for name, loader, dist, _version in _entry_point_candidates():
        if _left_out(hooks, only, name, dist) is not None or hooks.manager.has_plugin(name):
            continue
        try:
            module = loader()
        except (Exception, SystemExit):
            continue
        hooks.add(name, _hashable(name, module))
    for _name, plugin in hooks.plugins():
        if "agentkit_register_commands" in hooks.implements(plugin):
            try:
                hooks.add_commands(plugin, cli)
            except Exception:  # a broken plugin must not break the command line
                continue


def _hashable(name: str, plugin: object) -> object:
    """``plugin``, or a module holding its hooks if it cannot be hashed.

    pluggy keeps plugins in sets; a plugin may be any object with hook
    functions as attributes, a :class:`types.SimpleNamespace` for one.
    """
    try:
        hash(plugin)
    except TypeError:
        stand_in = ModuleType(name)
        for attr in dir(plugin):
            if attr.startswith("agentkit_"):
                setattr(stand_in, attr, getattr(plugin, attr))
        return stand_in
    return plugin


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


def _collect(reg: LoadedRegistry, module: object, info: PluginInfo) -> None:
    """Call each of ``module``'s registration hooks; keep what each registered, or its failure."""
    implemented = reg.hooks.implements(module)
    for kind, hook_name in _HOOK_OF.items():
        if hook_name not in implemented:
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
                    plugin=info.name,
                    distribution=info.distribution,
                    version=info.version,
                )
            )

        try:
            reg.hooks.register_names(kind, module, register)
        except Exception as exc:
            reg.failures.append(
                PluginFailure(
                    info.name,
                    info.distribution,
                    f"{hook_name} failed: {exc}",
                    traceback.format_exc(),
                )
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
