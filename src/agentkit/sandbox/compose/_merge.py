"""A compose file's ``include`` and ``extends`` merged into one project, as compose
merges them: what the local sandbox runs, and where the Harbor plugin reads the
main service's ``working_dir``.

The files come from :func:`agentkit.sandbox.compose.read_compose_sources`,
which has already refused every reference out of the task's folder. An
included file brings its services, volumes and networks (a name the
including file also defines is a conflict, as in compose); ``extends``
merges the named service under the extending one: mappings
(``environment``, ``labels``, ``build``, ``depends_on``, ``healthcheck``...)
key by key, ``volumes`` by target, ``command``, ``entrypoint`` and a
healthcheck's ``test`` replaced, other lists appended without repeats. The
paths of a service read from another file (``build`` contexts, bind
sources) are made absolute from that file's folder, so each still points
where it did.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from agentkit.sandbox.compose._refs import ComposeSources

__all__ = ["merge_sources"]

_REPLACED = frozenset({"command", "entrypoint", "test"})


def _as_mapping(value: object) -> object:
    """``environment``/``labels``/``depends_on`` in their list form as a mapping."""
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        return value
    out: dict[str, object] = {}
    for item in value:
        key, sep, rest = item.partition("=")
        out[key] = rest if sep else None
    return out


def _normal(svc: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(svc)
    for key in ("environment", "labels"):
        if key in out:
            out[key] = _as_mapping(out[key])
    deps = out.get("depends_on")
    if isinstance(deps, list) and all(isinstance(d, str) for d in deps):
        out["depends_on"] = {d: {"condition": "service_started"} for d in deps}
    if isinstance(out.get("build"), str):
        out["build"] = {"context": out["build"]}
    return out


def _target(volume: object) -> object:
    if isinstance(volume, dict):
        return volume.get("target")
    if isinstance(volume, str):
        parts = volume.split(":")
        return parts[1] if len(parts) > 1 else parts[0]
    return volume


def _merge(base: object, over: object, key: str = "") -> object:
    if isinstance(base, dict) and isinstance(over, dict):
        out = dict(base)
        for k, v in over.items():
            out[k] = _merge(base[k], v, str(k)) if k in base else v
        return out
    if isinstance(base, list) and isinstance(over, list) and key not in _REPLACED:
        if key == "volumes":
            replaced = {_target(v) for v in over}
            return [v for v in base if _target(v) not in replaced] + over
        return base + [v for v in over if v not in base]
    return over


def _absolute(raw: str, directory: Path) -> str:
    return raw if os.path.isabs(raw) else os.path.normpath(directory / raw)


def _rebase(svc: dict[str, Any], directory: Path) -> dict[str, Any]:
    """``svc``'s relative paths (read in ``directory``) made absolute."""
    out = dict(svc)
    build = out.get("build")
    if isinstance(build, str):  # the context alone
        build = {"context": build}
    if isinstance(build, dict) and isinstance(build.get("context", "."), str):
        out["build"] = {**build, "context": _absolute(str(build.get("context", ".")), directory)}
    volumes = out.get("volumes")
    if isinstance(volumes, list):
        rebased: list[object] = []
        for v in volumes:
            if isinstance(v, str) and v.startswith("."):
                source, sep, rest = v.partition(":")
                v = f"{_absolute(source, directory)}{sep}{rest}"
            elif (
                isinstance(v, dict) and v.get("type") == "bind" and isinstance(v.get("source"), str)
            ):
                v = {**v, "source": _absolute(v["source"], directory)}
            rebased.append(v)
        out["volumes"] = rebased
    return out


class _Merge:
    def __init__(self, top: Path, sources: ComposeSources) -> None:
        self.top = top
        self.sources = sources
        self.problems: list[str] = []

    def where(self, file: Path) -> str:
        return "" if file == self.top else f"in {file}: "

    def service(self, file: Path, name: str, trail: tuple[tuple[Path, str], ...]) -> Any:
        """Service ``name`` of ``file`` with its ``extends`` merged in (paths as in ``file``)."""
        services = (self.sources.documents.get(file) or {}).get("services") or {}
        svc = services.get(name)
        if not isinstance(svc, dict) or "extends" not in svc:
            return svc
        extends = svc["extends"]
        own = _normal({k: v for k, v in svc.items() if k != "extends"})
        at = f"{self.where(file)}service {name!r}: extends"
        if isinstance(extends, str):
            extends = {"service": extends}
        if not isinstance(extends, dict) or not isinstance(extends.get("service"), str):
            self.problems.append(f"{at}: expected a service name or a mapping with 'service'")
            return own
        other = self.sources.extends.get((file, name), file)
        if other not in self.sources.documents:
            return own  # unreadable: its problem is noted already
        key = (other, extends["service"])
        if key in trail:
            loop = " -> ".join(f"{n}" for _, n in (*trail, key))
            self.problems.append(f"{at}: extends has a cycle: {loop}")
            return own
        base = self.service(other, extends["service"], (*trail, key))
        if not isinstance(base, dict):
            self.problems.append(f"{at}: no service {extends['service']!r} in {other}")
            return own
        base = _normal(base)
        if other != file:
            base = _rebase(base, other.parent)
        merged = _merge(base, own)
        assert isinstance(merged, dict)
        return merged

    def document(self, file: Path, directory: Path, depth: int) -> dict[str, Any]:
        """``file`` with its includes and extends merged in; its paths absolute unless
        it is the top file."""
        data = self.sources.documents.get(file)
        if not isinstance(data, dict):
            return {}
        out: dict[str, Any] = {k: v for k, v in data.items() if k != "include"}
        services = data.get("services")
        if isinstance(services, dict):
            out["services"] = {n: self.service(file, str(n), ((file, str(n)),)) for n in services}
            if file != self.top:
                out["services"] = {
                    n: _rebase(s, directory) if isinstance(s, dict) else s
                    for n, s in out["services"].items()
                }
        for included, project in self.sources.includes.get(file, []):
            if depth > 16:
                break
            sub = self.document(included, project, depth + 1)
            for kind in ("services", "volumes", "networks"):
                theirs = sub.get(kind)
                if not isinstance(theirs, dict):
                    continue
                mine = out.setdefault(kind, {})
                if not isinstance(mine, dict):
                    continue
                for name, spec in theirs.items():
                    if name in mine:
                        self.problems.append(
                            f"{self.where(file)}include: {kind[:-1]} {name!r} of {included} "
                            "is defined here too"
                        )
                    else:
                        mine[name] = spec
        return out


def merge_sources(top: Path, sources: ComposeSources) -> tuple[dict[str, Any], list[str]]:
    """The project of ``top`` with its includes and extends merged in, and the problems
    found merging (a name defined twice, an ``extends`` cycle or a missing service).

    ``sources`` comes from :func:`~agentkit.sandbox.compose.read_compose_sources`
    (whose problems the caller has already refused); ``top`` is the compose file
    itself, the first of ``sources.documents``. Each service is as compose merges it
    (see the module's docstring); its relative paths count from ``top``'s folder when
    it is ``top``'s own, and are absolute when it came from another file. Variables
    (``${VAR}``) are left as written: fill ``sources.documents`` first to have them
    filled."""
    merge = _Merge(top, sources)
    return merge.document(top, top.parent, 0), merge.problems
