"""Reading a compose file's fields: compose's interpolation, durations, and each
field's shapes, noting every problem (with where it is and what was expected)
instead of stopping at the first.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from agentkit.images._imageroot import HealthCheck
from agentkit.sandbox.local._composemodel import CONDITIONS, Build, Dependency, VolumeMount

__all__ = ["FieldReader", "duration", "interpolate_all"]


_VAR = re.compile(
    r"\$(?:(\$)|\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-?])([^}]*))?\}|([A-Za-z_][A-Za-z0-9_]*))"
)


def _interpolate(text: str, env: Mapping[str, str], where: str, problems: list[str]) -> str:
    """Compose's ``$VAR``, ``${VAR}``, ``${VAR:-default}``, ``${VAR?error}`` and ``$$``."""

    def one(m: re.Match[str]) -> str:
        if m.group(1):
            return "$"
        name = m.group(2) or m.group(5)
        op, arg = m.group(3), m.group(4) or ""
        value = env.get(name)
        unset = value is None or (op is not None and op.startswith(":") and value == "")
        if op is not None and op.endswith("-"):
            return arg if unset else str(value)
        if op is not None and op.endswith("?"):
            if unset:
                problems.append(f"{where}: variable {name} is required: {arg or 'not set'}")
            return value or ""
        return value or ""

    return _VAR.sub(one, text)


def interpolate_all(data: Any, env: Mapping[str, str], problems: list[str], where: str) -> Any:
    if isinstance(data, str):
        return _interpolate(data, env, where, problems)
    if isinstance(data, list):
        return [interpolate_all(v, env, problems, where) for v in data]
    if isinstance(data, dict):
        return {k: interpolate_all(v, env, problems, f"{where}.{k}") for k, v in data.items()}
    return data


_DURATION = re.compile(r"([0-9]+(?:\.[0-9]+)?)(us|ms|s|m|h)")
_UNIT = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def duration(value: object) -> float | None:
    """Compose's duration (``1m30s``, ``500ms``, a number of seconds), or None if malformed."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value) if value >= 0 else None
    if not isinstance(value, str) or not value:
        return None
    pos, total = 0, 0.0
    for m in _DURATION.finditer(value):
        if m.start() != pos:
            return None
        total += float(m.group(1)) * _UNIT[m.group(2)]
        pos = m.end()
    return total if pos == len(value) else None


class FieldReader:
    """Reads one service, noting every problem instead of stopping at the first."""

    def __init__(self, path: str, root: Path, base: Path, problems: list[str]) -> None:
        self.path = path
        self.root = root
        self.base = base
        self.problems = problems

    def bad(self, where: str, what: str) -> None:
        self.problems.append(f"{where}: {what}")

    def items(self, where: str, value: object) -> list[object]:
        """The items of a list setting (none when it is not given; none, and a problem,
        when it is not a list)."""
        if value is None:
            return []
        if not isinstance(value, list):
            self.bad(where, "expected a list")
            return []
        return value

    def inside(self, where: str, raw: str, what: str) -> str | None:
        """``raw`` (relative to the compose file) as an absolute path inside the task's folder."""
        resolved = (self.base / os.path.expanduser(raw)).resolve()
        if os.path.expanduser(raw) != raw or not resolved.is_relative_to(self.root):
            self.bad(where, f"{what} {raw!r} is outside the task's folder ({self.root})")
            return None
        return str(resolved)

    def words(self, where: str, value: object) -> str | tuple[str, ...] | None:
        if value is None:
            return None
        if isinstance(value, str):
            return value
        if isinstance(value, list) and all(isinstance(v, str | int | float) for v in value):
            return tuple(str(v) for v in value)
        self.bad(where, "expected a string or a list of strings")
        return None

    def text(self, where: str, value: object) -> str | None:
        if value is None:
            return None
        if isinstance(value, str | int) and not isinstance(value, bool):
            return str(value)
        self.bad(where, "expected a string")
        return None

    def environment(self, where: str, value: object) -> dict[str, str]:
        out: dict[str, str] = {}
        if value is None:
            return out
        if isinstance(value, dict):
            for k, v in value.items():
                if v is None:
                    continue  # compose: taken from the shell's environment; nothing here
                if isinstance(v, dict | list):
                    self.bad(f"{where}.{k}", "expected a string, number or boolean")
                    continue
                out[str(k)] = str(v).lower() if isinstance(v, bool) else str(v)
        elif isinstance(value, list):
            for item in value:
                if not isinstance(item, str):
                    self.bad(where, f"expected KEY=VALUE strings, got {item!r}")
                elif "=" in item:
                    k, _, v = item.partition("=")
                    out[k] = v
        else:
            self.bad(where, "expected a mapping or a list of KEY=VALUE")
        return out

    def build(self, where: str, value: object) -> Build | None:
        if isinstance(value, str):
            value = {"context": value}
        if not isinstance(value, dict):
            self.bad(where, "expected a context path or a mapping")
            return None
        for key in value:
            if key not in ("context", "dockerfile", "args", "target"):
                self.bad(f"{where}.{key}", "not supported by the local sandbox")
        context = self.inside(f"{where}.context", str(value.get("context", ".")), "build context")
        dockerfile = str(value.get("dockerfile") or "Dockerfile")
        if context is not None:
            resolved = (Path(context) / dockerfile).resolve()
            if not resolved.is_relative_to(self.root):
                self.bad(f"{where}.dockerfile", f"{dockerfile!r} is outside the task's folder")
        args = self.environment(f"{where}.args", value.get("args"))
        target = self.text(f"{where}.target", value.get("target"))
        if context is None:
            return None
        return Build(context=context, dockerfile=dockerfile, args=args, target=target)

    def volumes(
        self, where: str, value: object, declared: Mapping[str, object]
    ) -> list[VolumeMount]:
        out: list[VolumeMount] = []
        for i, item in enumerate(self.items(where, value)):
            at = f"{where}[{i}]"
            if isinstance(item, str):
                parts = item.split(":")
                if len(parts) == 1:
                    self.bad(at, "an anonymous volume is not supported; name it")
                    continue
                if len(parts) > 3:
                    self.bad(at, f"expected SOURCE:TARGET[:MODE], got {item!r}")
                    continue
                mode = parts[2] if len(parts) == 3 else "rw"
                if any(m not in ("ro", "rw", "z", "Z") for m in mode.split(",")):
                    self.bad(at, f"mode {mode!r} is not supported (ro or rw)")
                    continue
                source, target, read_only = parts[0], parts[1], "ro" in mode.split(",")
                kind = "bind" if source.startswith((".", "/", "~")) else "volume"
            elif isinstance(item, dict):
                for key in item:
                    if key not in ("type", "source", "target", "read_only", "volume", "tmpfs"):
                        self.bad(f"{at}.{key}", "not supported by the local sandbox")
                kind = item.get("type", "volume")
                source, raw_target = str(item.get("source") or ""), item.get("target")
                read_only = item.get("read_only") is True
                if kind not in ("volume", "bind", "tmpfs"):
                    self.bad(f"{at}.type", f"{kind!r} is not supported (volume, bind or tmpfs)")
                    continue
                if not isinstance(raw_target, str):
                    self.bad(f"{at}.target", "expected a path")
                    continue
                target = raw_target
            else:
                self.bad(at, "expected SOURCE:TARGET or a mapping")
                continue
            if not target.startswith("/"):
                self.bad(at, f"target {target!r} must be an absolute path")
                continue
            if kind == "bind":
                found = self.inside(at, source, "bind mount")
                if found is None:
                    continue
                source = found
            elif kind == "volume":
                if not source:
                    self.bad(at, "an anonymous volume is not supported; name it")
                    continue
                if source not in declared:
                    self.bad(at, f"volume {source!r} is not declared under the top-level volumes")
                    continue
            out.append(VolumeMount(kind, source, target, read_only))  # type: ignore[arg-type]
        return out

    def tmpfs(self, where: str, value: object) -> list[VolumeMount]:
        paths = [value] if isinstance(value, str) else value
        if value is None:
            return []
        if not isinstance(paths, list) or not all(isinstance(p, str) for p in paths):
            self.bad(where, "expected a path or a list of paths")
            return []
        out = []
        for p in paths:
            target = p.split(":", 1)[0]
            if not target.startswith("/"):
                self.bad(where, f"{target!r} must be an absolute path")
            else:
                out.append(VolumeMount("tmpfs", "", target))
        return out

    def depends_on(self, where: str, value: object) -> list[Dependency]:
        if value is None:
            return []
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            return [Dependency(v) for v in value]
        if not isinstance(value, dict):
            self.bad(where, "expected a list of services or a mapping")
            return []
        out = []
        for name, spec in value.items():
            spec = spec or {}
            if not isinstance(spec, dict):
                self.bad(f"{where}.{name}", "expected a mapping with a condition")
                continue
            for key in spec:
                if key not in ("condition", "required", "restart"):
                    self.bad(f"{where}.{name}.{key}", "not supported by the local sandbox")
            condition = spec.get("condition", "service_started")
            if condition not in CONDITIONS:
                self.bad(f"{where}.{name}.condition", f"expected one of {', '.join(CONDITIONS)}")
                continue
            out.append(Dependency(str(name), condition))
        return out

    def healthcheck(self, where: str, value: object) -> tuple[HealthCheck | None, bool]:
        if value is None:
            return None, False
        if not isinstance(value, dict):
            self.bad(where, "expected a mapping")
            return None, False
        for key in value:
            if key not in (
                "test", "interval", "timeout", "retries", "start_period", "start_interval",
                "disable",
            ):  # fmt: skip
                self.bad(f"{where}.{key}", "not supported by the local sandbox")
        if value.get("disable") is True:
            return None, True
        test = value.get("test")
        if isinstance(test, str):
            argv: tuple[str, ...] = ("CMD-SHELL", test)
        elif isinstance(test, list) and test and all(isinstance(t, str) for t in test):
            argv = tuple(test)
            if argv[0] == "NONE":
                return None, True
            if argv[0] not in ("CMD", "CMD-SHELL") or len(argv) < 2:
                self.bad(f"{where}.test", "expected [CMD, ...], [CMD-SHELL, line] or [NONE]")
                return None, False
        else:
            self.bad(f"{where}.test", "expected a shell line or a list")
            return None, False
        times: dict[str, float] = {}
        for key, default in (
            ("interval", 30.0), ("timeout", 30.0), ("start_period", 0.0), ("start_interval", 5.0)
        ):  # fmt: skip
            raw = value.get(key)
            seconds = default if raw is None else duration(raw)
            if seconds is None:
                self.bad(f"{where}.{key}", f"expected a duration such as 1s or 1m30s, got {raw!r}")
                seconds = default
            times[key] = seconds
        retries = value.get("retries", 3)
        if not isinstance(retries, int) or isinstance(retries, bool) or retries < 0:
            self.bad(f"{where}.retries", "expected a whole number of at least 0")
            retries = 3
        return HealthCheck(test=argv, retries=retries, **times), False

    def networks(self, where: str, value: object, known: Mapping[str, object]) -> list[str]:
        aliases: list[str] = []
        if value is None:
            return aliases
        if isinstance(value, list):
            names: dict[str, object] = {str(n): None for n in value}
        elif isinstance(value, dict):
            names = {str(k): v for k, v in value.items()}
        else:
            self.bad(where, "expected a list or a mapping")
            return aliases
        for name, spec in names.items():
            if name != "default" and name not in known:
                self.bad(f"{where}.{name}", "network is not declared under the top-level networks")
            if spec is None:
                continue
            if not isinstance(spec, dict):
                self.bad(f"{where}.{name}", "expected a mapping")
                continue
            for key in spec:
                if key != "aliases":
                    self.bad(f"{where}.{name}.{key}", "not supported by the local sandbox")
            found = spec.get("aliases") or []
            if not isinstance(found, list) or not all(isinstance(a, str) for a in found):
                self.bad(f"{where}.{name}.aliases", "expected a list of names")
            else:
                aliases.extend(found)
        return aliases

    def ports(self, where: str, value: object) -> list[int]:
        out: list[int] = []
        for item in self.items(where, value):
            raw = item.get("target") if isinstance(item, dict) else item
            text = str(raw).rsplit(":", 1)[-1].split("/", 1)[0]
            if not text.isdigit() or not 0 < int(text) < 65536:
                self.bad(where, f"expected a port such as 8080 or 8080:80, got {item!r}")
            else:
                out.append(int(text))
        return out
