"""Settings of ``agentkit run`` from a TOML file: ``--config run.toml`` or ``[tool.agentkit]``.

Every key is an ``agentkit run`` flag without its dashes (``base-url`` or
``base_url``); ``-M``, ``--header``, ``-H``, ``-T``, ``-S`` and ``--price``
are tables. Flags given on the command line override the file::

    taskset = "jsonl:examples/jsonl/arithmetic.jsonl"
    harness = "chat"
    model = "gpt-4o-mini"
    temperature = 0.2
    rollouts = 4

    [model-args]
    reasoning_effort = "low"

    [harness-options]
    system_prompt = "Answer with the number only."

``agentkit run`` reads ``--config FILE`` when given, else the
``[tool.agentkit]`` table of the nearest ``pyproject.toml`` (this directory
or a parent), except on ``--resume`` (a run keeps its own settings).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import attrs
import click

from agentkit._errors import SpecError, kind_of
from agentkit._limits import non_finite

__all__ = ["TABLES", "RunConfig", "load_run_config"]

#: Table keys and the ``run`` parameter each one feeds.
TABLES: dict[str, str] = {
    "model_args": "model_pairs",
    "headers": "header_pairs",
    "harness_options": "harness_pairs",
    "taskset_options": "taskset_pairs",
    "sandbox_options": "sandbox_pairs",
    "price": "price",
    "ray_init": "ray_init_pairs",
}
#: Keys that name a parameter differently from its flag.
_ALIASES: dict[str, str] = {
    "epochs": "rollouts",
    "task": "task_ids",
    "tasks": "task_ids",
    "taskset": "taskset_spec",
}
#: ``run`` parameters a file may not set.
_NOT_IN_FILES = frozenset({"config", "resume", "dry_run", "as_json"})


@attrs.frozen
class RunConfig:
    """Settings read from a file: scalar parameters and tables, and where they came from."""

    source: str | None = None
    values: dict[str, Any] = attrs.field(factory=dict)
    tables: dict[str, dict[str, Any]] = attrs.field(factory=dict)


def _find_pyproject(start: Path) -> Path | None:
    for folder in (start, *start.parents):
        candidate = folder / "pyproject.toml"
        if candidate.is_file():
            return candidate
    return None


def _read_toml(path: Path) -> dict[str, Any]:
    # deferred: about 7 ms, and a run outside a project reads no TOML
    import tomllib

    try:
        with open(path, "rb") as fh:
            data: dict[str, Any] = tomllib.load(fh)
    except OSError as exc:
        raise SpecError(f"{path}: cannot read the config file: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise SpecError(f"{path}: not valid TOML ({exc})") from None
    return data


def load_run_config(
    command: click.Command, explicit: Path | None, *, use_pyproject: bool, cwd: Path | None = None
) -> RunConfig:
    """The settings of ``--config FILE``, else of ``[tool.agentkit]`` in the nearest pyproject."""
    if explicit is not None:
        data = _read_toml(explicit)
        source = str(explicit)
    elif use_pyproject:
        found = _find_pyproject(cwd or Path.cwd())
        if found is None:
            return RunConfig()
        tool = _read_toml(found).get("tool") or {}
        table: Any = tool.get("agentkit") if isinstance(tool, dict) else None
        if table is None:
            return RunConfig()
        source = f"{found} [tool.agentkit]"
        if not isinstance(table, dict):
            raise SpecError(f"{source}: expected a table of agentkit run settings")
        data = table
    else:
        return RunConfig()
    return _check(command, data, source)


def _check(command: click.Command, data: dict[str, Any], source: str) -> RunConfig:
    params = {p.name: p for p in command.params if p.name}
    values: dict[str, Any] = {}
    tables: dict[str, dict[str, Any]] = {}
    for raw_key, value in data.items():
        key = str(raw_key).replace("-", "_")
        if key in TABLES:
            if not isinstance(value, dict):
                raise SpecError(f"{source}: {raw_key}: expected a table, got {kind_of(value)}")
            found = non_finite(value, str(raw_key))
            if found is not None:  # TOML has nan and inf; no setting may hold them
                raise SpecError(f"{source}: {found[0]}: expected a finite number, got {found[1]!r}")
            tables[key] = dict(value)
            continue
        name = _ALIASES.get(key, key)
        param = params.get(name)
        if param is None or name in _NOT_IN_FILES or name in TABLES.values():
            raise SpecError(f"{source}: unknown setting {raw_key!r}; known: {_known(params)}")
        values[name] = _typed(param, value, f"{source}: {raw_key}")
    return RunConfig(source=source, values=values, tables=tables)


def _known(params: dict[str, click.Parameter]) -> str:
    names = []
    for name, param in params.items():
        if name in _NOT_IN_FILES or name in TABLES.values():
            continue
        if isinstance(param, click.Argument):
            names.append("taskset" if name == "taskset_spec" else name)
        else:
            longest = max(param.opts, key=len).lstrip("-")
            names.append("task" if name == "task_ids" else longest)
    return ", ".join(sorted(names) + sorted(k.replace("_", "-") for k in TABLES))


def _typed(param: click.Parameter, value: Any, where: str) -> Any:
    """``value`` checked against the parameter's type, strictly (no "10" for 10)."""
    if param.multiple:
        items = value if isinstance(value, list) else None
        if items is None or not all(isinstance(v, str) for v in items):
            raise SpecError(f"{where}: expected a list of strings, got {kind_of(value)}")
        return tuple(items)
    kind = param.type
    if isinstance(param, click.Option) and param.is_flag:
        if not isinstance(value, bool):
            raise SpecError(f"{where}: expected true or false, got {kind_of(value)}")
        return value
    if kind is click.INT or isinstance(kind, click.IntRange):
        if isinstance(value, bool) or not isinstance(value, int):
            raise SpecError(f"{where}: expected an integer, got {kind_of(value)}")
    elif isinstance(kind, click.types.FloatParamType):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise SpecError(f"{where}: expected a number, got {kind_of(value)}")
        if not math.isfinite(value):
            raise SpecError(f"{where}: expected a finite number, got {value!r}")
        value = float(value)
    elif not isinstance(value, str):
        raise SpecError(f"{where}: expected a string, got {kind_of(value)}")
    try:
        return param.type_cast_value(click.Context(click.Command("run")), value)
    except click.BadParameter as exc:
        raise SpecError(f"{where}: {exc.message}") from None
