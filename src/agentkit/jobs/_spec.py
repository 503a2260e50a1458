"""A job file, read strictly and expanded into cells (the schema is in docs/jobs.md).

::

    [job]                       # the job: name, the shared budget, defaults of every cell
    name = "arith"
    concurrency = 32            # rollouts running at once, across all cells
    rollouts_per_task = 4       # ... and any run option, for every cell

    [[tasksets]]                # spec, label, options (-T), run options
    spec = "jsonl:examples/jsonl/arithmetic.jsonl"

    [[harnesses]]               # name, label, options (-H), run options
    name = "chat"

    [[models]]                  # name, label, run options (base_url, api_key_env, ...)
    name = "gpt-4o-mini"
    base_url = "http://127.0.0.1:8000/v1"

    [matrix]                    # any other setting, one cell per value
    "sampling_args.temperature" = [0.0, 0.7]

    [[exclude]]                 # cells of the cross product left out
    [[cells]]                   # cells added by hand

Every error is one :class:`~agentkit.ValidationError` naming the file, the key
path (``harnesses[1].name``) and what was expected.
"""

from __future__ import annotations

import functools
import itertools
import math
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from agentkit import registry
from agentkit._context import is_secret_header
from agentkit._errors import AgentkitError, SpecError, ValidationError
from agentkit._limits import check_finite, max_cells
from agentkit._redact import MARKER, looks_like_key, register_secret
from agentkit._run_options import RunOptions, file_option
from agentkit.jobs._cell import CELL_NAME, LABEL, CellSpec, public_settings, public_values, slug

__all__ = ["DEFAULT_CONCURRENCY", "JobSpec", "read_job", "read_job_file", "setting_key"]

#: The shared budget when the job gives none (as ``agentkit run -c``).
DEFAULT_CONCURRENCY = 8

_TOP = ("job", "tasksets", "harnesses", "models", "matrix", "exclude", "cells", "override")
#: Run options merged key by key across the layers (the others are replaced whole).
_TABLE_OPTIONS = ("sampling_args", "headers", "sandbox_options")
#: Options of the cell's plugins, merged key by key too.
_PLUGIN_TABLES = ("harness_options", "taskset_options")
#: Run options a job file may not set, and why.
_NOT_IN_JOBS: dict[str, str] = {
    "out": "a cell's run directory is JOBDIR/cells/<cell>; choose the job directory with "
    "--out (agentkit job run) or out= (Job.run)",
    "resume": "resume the whole job: agentkit job run --resume JOBDIR",
    "retry_errors": "a resume setting: agentkit job run --resume JOBDIR --retry-errors",
    "progress": "the job shows one progress display for all cells",
    "model": "give models as [[models]] entries (name = ...)",
}
_API_KEY = (
    "a key is never written in a job file: give api_key_env, the name of the environment "
    "variable that holds it"
)


@attrs.frozen(kw_only=True)
class _Settings:
    """The run settings given at one place of the file."""

    options: dict[str, Any] = attrs.field(factory=dict)
    harness_options: dict[str, Any] = attrs.field(factory=dict)
    taskset_options: dict[str, Any] = attrs.field(factory=dict)

    def to_json(self) -> dict[str, Any]:
        out = public_settings(self.options)
        if self.harness_options:
            out["harness_options"] = public_values(self.harness_options)
        if self.taskset_options:
            out["taskset_options"] = public_values(self.taskset_options)
        return out


def _merge(layers: Sequence[_Settings]) -> _Settings:
    """Later layers win; tables (sampling args, headers, plugin options) merge by key."""
    options: dict[str, Any] = {}
    plugin: dict[str, dict[str, Any]] = {"harness_options": {}, "taskset_options": {}}
    for layer in layers:
        for name, value in layer.options.items():
            before = options.get(name)
            if name in _TABLE_OPTIONS and isinstance(before, dict) and isinstance(value, dict):
                options[name] = {**before, **value}
            else:
                options[name] = value
        plugin["harness_options"].update(layer.harness_options)
        plugin["taskset_options"].update(layer.taskset_options)
    return _Settings(options=options, **plugin)


@attrs.frozen
class _Entry:
    """A ``[[tasksets]]``, ``[[harnesses]]`` or ``[[models]]`` entry."""

    label: str
    name: str  # the taskset spec, harness name or model name
    settings: _Settings
    path: str
    label_given: bool


@attrs.frozen
class _Value:
    """One value of a matrix axis."""

    label: str
    value: Any
    labelled: bool  # given as {label = ..., value = ...} (or env = ...)
    #: A secret (a secret-looking key, a value that looks like a key, or read from the
    #: environment): never written; ``env`` names the variable it was read from.
    secret: bool = False
    env: str | None = None


@attrs.frozen
class _Axis:
    """A ``[matrix]`` key and its values."""

    key: str  # ``max_turns``, ``sampling_args.temperature``, ``harness_options.x``
    short: str  # what cell names call it
    values: tuple[_Value, ...]
    path: str

    def settings(self, value: _Value) -> _Settings:
        table, _, sub = self.key.partition(".")
        if table in _PLUGIN_TABLES:
            return _Settings(**{table: {sub: value.value}})
        if sub:
            return _Settings(options={table: {sub: value.value}})
        return _Settings(options={self.key: value.value})


@attrs.frozen(kw_only=True)
class JobSpec:
    """A job file read: its name, budget, cells, and the normalised document."""

    name: str
    concurrency: int
    cells: tuple[CellSpec, ...]
    #: The job file as read, normalised: keys with ``_``, labels filled in, values
    #: typed, secrets hidden. Read again, it gives the same cells.
    document: dict[str, Any]
    #: The axes and their labels in order: ``taskset``, ``harness``, ``model``
    #: (when the job has models), then each matrix key.
    axes: dict[str, list[str]]


def read_job_file(
    path: str | Path,
    *,
    replace: Mapping[str, Any] | None = None,
    override: Mapping[str, Any] | None = None,
) -> JobSpec:
    """Read a job TOML file (see :func:`read_job`), with the command line's changes:
    ``replace`` (``tasksets``, ``harnesses``, ``models``: the file's lists replaced;
    ``matrix``: keys added or replaced; ``name``, ``concurrency``: in ``[job]``) and
    ``override`` (settings of every cell, merged into ``[override]``)."""
    # deferred: about 7 ms, only when a job file is read
    import tomllib

    path = Path(path)
    source = str(path)
    try:
        with open(path, "rb") as fh:
            data = tomllib.load(fh)
    except OSError as exc:
        raise SpecError(f"{source}: cannot read the job file: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise SpecError(f"{source}: not valid TOML ({exc})") from None
    data = with_changes(data, replace or {}, override or {})
    return read_job(data, source=source, default_name=path.stem)


#: Tables whose keys are names on the wire (a request's fields, its headers' names):
#: kept exactly as written, never normalised.
_WIRE_TABLES = ("sampling_args", "headers")


def setting_key(raw: str) -> str:
    """A setting's key as a job file or flag gives it (``max-turns``,
    ``harness_options.system-prompt``, ``headers.X-Route-Tag``), normalised: ``-`` is
    ``_`` in the names of options, while a header's name (``headers.X-Route-Tag``) and
    a request field's (``sampling_args.X``) are kept exactly as written: they are sent
    to the model server as they are."""
    table, dot, sub = raw.partition(".")
    table = table.replace("-", "_")
    if not dot:
        return table
    return f"{table}.{sub if table in _WIRE_TABLES else sub.replace('-', '_')}"


def with_changes(
    data: dict[str, Any], replace: Mapping[str, Any], override: Mapping[str, Any]
) -> dict[str, Any]:
    """A job document with the command line's changes (see :func:`read_job_file`)."""
    out = dict(data)
    for key, value in replace.items():
        if key in ("tasksets", "harnesses", "models"):
            out[key] = value
        elif key == "matrix":
            matrix = out.get("matrix")
            out["matrix"] = {**(matrix if isinstance(matrix, dict) else {}), **value}
        else:
            job = out.get("job")
            out["job"] = {**(job if isinstance(job, dict) else {}), key: value}
    if override:
        table = out.get("override")
        merged = dict(table) if isinstance(table, dict) else {}
        for key, value in override.items():
            before = merged.get(key)
            if isinstance(before, dict) and isinstance(value, dict):
                merged[key] = {**before, **value}
            else:
                merged[key] = value
        out["override"] = merged
    return out


def read_job(data: Any, *, source: str | None = None, default_name: str = "job") -> JobSpec:
    """A job from its TOML or JSON document, checked strictly and expanded into cells.

    Every error is one :class:`~agentkit.ValidationError` (an
    :class:`~agentkit.AgentkitError`) naming ``source``, the key path and what
    was expected; nothing is loaded or contacted but the plugin registry.
    """
    return _Reader(source).job(data, default_name)


class _Reader:
    """Reads one job document; every error names ``source`` and the key path."""

    def __init__(self, source: str | None) -> None:
        self.source = source

    def error(self, path: str, reason: str) -> ValidationError:
        return ValidationError(path, reason, self.source)

    # -- values ----------------------------------------------------------------
    def table(self, value: Any, path: str, what: str = "a table") -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.error(path, f"expected {what}, got {_kind(value)}")
        return {str(k): v for k, v in value.items()}

    def tables(self, value: Any, path: str) -> list[dict[str, Any]]:
        if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
            raise self.error(path, f"expected an array of tables ([[{path}]]), got {_kind(value)}")
        return [self.table(v, f"{path}[{i}]") for i, v in enumerate(value)]

    def string(self, value: Any, path: str) -> str:
        if not isinstance(value, str) or not value:
            raise self.error(path, f"expected a non-empty string, got {_kind(value)}")
        return value

    def label(self, value: Any, path: str) -> str:
        text = self.string(value, path)
        if not LABEL.match(text):
            raise self.error(
                path,
                f"expected a label of letters, digits, '.', '_' and '-' (it names cells and "
                f"their directories), got {text!r}",
            )
        return text

    def run_option(self, name: str, value: Any, path: str) -> Any:
        """A run option's value, typed strictly and checked as RunOptions checks it."""
        if name in _NOT_IN_JOBS:
            raise self.error(path, f"not a setting of a job file: {_NOT_IN_JOBS[name]}")
        if name == "api_key":
            raise self.error(path, _API_KEY)
        typed = file_option(name, value, source=self.source, path=path)
        try:
            RunOptions(**{name: typed})
        except SpecError as exc:
            raise self.error(path, str(exc)) from None
        return typed

    def settings(
        self, table: Mapping[str, Any], path: str, *, skip: Sequence[str], own: str | None = None
    ) -> _Settings:
        """The run options and plugin options of a table (``skip``: its other keys; ``own``:
        ``harness_options`` or ``taskset_options``, given there as ``options``)."""
        options: dict[str, Any] = {}
        plugin: dict[str, dict[str, Any]] = {"harness_options": {}, "taskset_options": {}}
        for raw, value in table.items():
            key = raw.replace("-", "_")
            where = f"{path}.{raw}" if path else raw
            if key in skip:
                continue
            if key == "options" and own is not None:
                plugin[own] = self.table(value, where)
            elif key in _PLUGIN_TABLES:
                if key == own:
                    raise self.error(where, "give this entry's own options as 'options'")
                plugin[key] = self.table(value, where)
            else:
                options[key] = self.run_option(key, value, where)
        return _Settings(options=options, **plugin)

    # -- the document ------------------------------------------------------------
    def job(self, data: Any, default_name: str) -> JobSpec:
        doc = self.table(data, "", "a table of job settings")
        for key in doc:
            if key not in _TOP:
                raise self.error(key, f"unknown table; a job file has {', '.join(_TOP)}")
        job = self.table(doc.get("job", {}), "job")
        name = self.label(job.get("name", slug(default_name)), "job.name")
        concurrency = job.get("concurrency", DEFAULT_CONCURRENCY)
        concurrency = self.run_option("concurrency", concurrency, "job.concurrency")
        cross = job.get("cross_product", True)
        if not isinstance(cross, bool):
            raise self.error("job.cross_product", f"expected true or false, got {_kind(cross)}")
        defaults = self.settings(job, "job", skip=("name", "concurrency", "cross_product"))
        override = self.settings(
            self.table(doc.get("override", {}), "override"), "override", skip=()
        )
        tasksets = self.entries(doc, "tasksets", "spec")
        harnesses = self.entries(doc, "harnesses", "name")
        models = self.entries(doc, "models", "name")
        axes = self.matrix(doc.get("matrix", {}))
        excludes = [
            self.exclude(t, f"exclude[{i}]", tasksets, harnesses, models, axes)
            for i, t in enumerate(self.tables(doc.get("exclude", []), "exclude"))
        ]
        cells: list[CellSpec] = []
        self.check_size(cross, tasksets, harnesses, models, axes, excludes, doc.get("cells"))
        if cross:
            if not tasksets or not harnesses:
                raise self.error(
                    "",
                    "a job needs at least one [[tasksets]] entry and one [[harnesses]] entry "
                    "(or only [[cells]], with cross_product = false in [job])",
                )
            cells.extend(
                self.product(defaults, override, tasksets, harnesses, models, axes, excludes)
            )
        elif axes or excludes:
            raise self.error("matrix" if axes else "exclude", "needs cross_product = true")
        explicit_json: list[dict[str, Any]] = []
        for i, table in enumerate(self.tables(doc.get("cells", []), "cells")):
            cell, own = self.explicit(
                table, f"cells[{i}]", defaults, override, tasksets, harnesses, models
            )
            cells.append(cell)
            explicit_json.append({"name": cell.name, **cell.axes, **own.to_json()})
        if not cells:
            raise self.error("", "the job has no cells (every cell of the matrix is excluded)")
        seen: dict[str, int] = {}
        for i, cell in enumerate(cells):
            if cell.name in seen:
                raise self.error(
                    "",
                    f"two cells are named {cell.name!r}: give their tasksets, harnesses, models "
                    "or matrix values distinct labels (label = ...), or the [[cells]] distinct "
                    "names",
                )
            seen[cell.name] = i
        for cell in cells:
            self.check_cell(cell)
        document = {
            "job": {
                "name": name,
                "concurrency": concurrency,
                "cross_product": cross,
                **defaults.to_json(),
            },
            "tasksets": [_entry_json("tasksets", e) for e in tasksets],
            "harnesses": [_entry_json("harnesses", e) for e in harnesses],
            "models": [_entry_json("models", e) for e in models],
            "matrix": {a.key: [_value_json(v) for v in a.values] for a in axes},
            "exclude": [dict(x) for x in excludes],
            "cells": explicit_json,
            "override": override.to_json(),
        }
        axes_labels: dict[str, list[str]] = {
            "taskset": [e.label for e in tasksets],
            "harness": [e.label for e in harnesses],
        }
        if models:
            axes_labels["model"] = [e.label for e in models]
        for axis in axes:
            axes_labels[axis.key] = [v.label for v in axis.values]
        return JobSpec(
            name=name,
            concurrency=concurrency,
            cells=tuple(cells),
            document=document,
            axes=axes_labels,
        )

    def entries(self, doc: Mapping[str, Any], kind: str, ident: str) -> list[_Entry]:
        """The ``[[tasksets]]``, ``[[harnesses]]`` or ``[[models]]`` entries."""
        own = {"tasksets": "taskset_options", "harnesses": "harness_options"}.get(kind)
        out: list[_Entry] = []
        labels: dict[str, str] = {}
        for i, table in enumerate(self.tables(doc.get(kind, []), kind)):
            path = f"{kind}[{i}]"
            if ident not in table:
                raise self.error(path, f"missing required key {ident!r}")
            name = self.string(table[ident], f"{path}.{ident}")
            if kind == "tasksets":
                self.check_taskset(name, f"{path}.{ident}")
            elif kind == "harnesses":
                self.check_registered("harness", name, f"{path}.{ident}")
            given = "label" in table
            label = (
                self.label(table["label"], f"{path}.label") if given else _default_label(kind, name)
            )
            if label in labels:
                raise self.error(
                    f"{path}.label" if given else path,
                    f"the label {label!r} is already {labels[label]}'s; give each entry its own "
                    "label (label = ...)",
                )
            labels[label] = path
            settings = self.settings(table, path, skip=(ident, "label"), own=own)
            out.append(_Entry(label, name, settings, path, given))
            if kind == "harnesses" and settings.harness_options:
                self.check_options("harness", name, settings.harness_options, f"{path}.options")
            if kind == "tasksets" and settings.taskset_options:
                provider = registry.parse_taskset_spec(name)[0]
                self.check_options("taskset", provider, settings.taskset_options, f"{path}.options")
        return out

    def matrix(self, value: Any) -> list[_Axis]:
        matrix = self.table(value, "matrix")
        keyed: list[tuple[str, Any, str]] = []
        for raw, values in matrix.items():
            key = setting_key(raw)
            table, dot, _ = key.partition(".")
            if not dot and key in (*_TABLE_OPTIONS, *_PLUGIN_TABLES) and isinstance(values, dict):
                for sub_key, sub_values in values.items():
                    keyed.append(
                        (setting_key(f"{key}.{sub_key}"), sub_values, f"matrix.{raw}.{sub_key}")
                    )
                continue
            if dot and table not in (*_TABLE_OPTIONS, *_PLUGIN_TABLES):
                raise self.error(
                    f"matrix.{raw}",
                    "a dotted matrix key varies one entry of sampling_args, headers, "
                    "sandbox_options, harness_options or taskset_options",
                )
            keyed.append((key, values, f"matrix.{raw}"))
        lasts = [k.rpartition(".")[2] for k, _, _ in keyed]
        axes: list[_Axis] = []
        for key, values, path in keyed:
            last = key.rpartition(".")[2]
            short = last if lasts.count(last) == 1 else key
            axes.append(_Axis(key, short, self.axis_values(key, values, path), path))
        return axes

    def axis_values(self, key: str, values: Any, path: str) -> tuple[_Value, ...]:
        if not isinstance(values, list) or not values:
            raise self.error(path, f"expected a non-empty list of values, got {_kind(values)}")
        secret_key = _secret_key(key)
        out: list[_Value] = []
        seen: set[str] = set()
        for i, item in enumerate(values):
            where = f"{path}[{i}]"
            labelled = isinstance(item, dict)
            env: str | None = None
            if labelled:
                entry = self.table(item, where)
                extra = sorted(set(entry) - {"label", "value", "env"})
                if extra or "label" not in entry or ("value" in entry) == ("env" in entry):
                    raise self.error(
                        where,
                        "expected a value, or a table {label = ..., value = ...} (a secret: "
                        '{label = ..., env = "VAR"}, read from that environment variable)',
                    )
                label = self.label(entry["label"], f"{where}.label")
                if "env" in entry:
                    env = self.string(entry["env"], f"{where}.env")
                    raw = self.from_environment(env, f"{where}.env")
                else:
                    raw = entry["value"]
            else:
                raw = item
                label = ""
            at = f"{where}.value" if labelled else where
            secret = env is not None or secret_key or (isinstance(raw, str) and looks_like_key(raw))
            if secret and not labelled:
                # the value is not repeated: it may be a key
                what = f"a value of {key!r}" if secret_key else "a value that looks like a key"
                raise self.error(
                    where,
                    f"{what} would name a cell and be written into job.json: give it a label "
                    'and read it from the environment, {label = "...", env = "VAR"} (or '
                    '{label = "...", value = ...}); it is never written',
                )
            typed = self.axis_value(key, raw, at, hide=secret)
            if secret:
                register_secret(typed if isinstance(typed, str) else None)  # redacted in runs
            if not labelled:
                made = _value_label(typed)
                if made is None:
                    raise self.error(
                        where, "a table or list value needs a label: {label = ..., value = ...}"
                    )
                label = made
            if label in seen:
                raise self.error(
                    where,
                    f"two values of this key are labelled {label!r}; give them labels: "
                    "{label = ..., value = ...}",
                )
            seen.add(label)
            out.append(_Value(label, typed, labelled, secret=bool(secret), env=env))
        return tuple(out)

    def axis_value(self, key: str, raw: Any, at: str, *, hide: bool) -> Any:
        """One matrix value, typed as its key takes it; with ``hide``, an error does not
        repeat it (it is a secret)."""
        table, dot, _sub = key.partition(".")
        try:
            if not dot:
                return self.run_option(key, raw, at)
            if table == "headers":
                return self.string(raw, at)
            check_finite(raw, at, self.source)  # TOML has nan and inf; no setting may
            return raw
        except ValidationError:
            if not hide:
                raise
            raise self.error(
                at, f"not a value {key!r} takes (a {_kind_only(raw)}; not shown: a secret)"
            ) from None

    def from_environment(self, name: str, path: str) -> str:
        """A secret matrix value: the value of environment variable ``name``."""
        value = os.environ.get(name)
        if not value:
            state = "is empty" if value == "" else "is not set"
            raise self.error(path, f"environment variable {name!r} {state}")
        return value

    def exclude(
        self,
        table: Mapping[str, Any],
        path: str,
        tasksets: Sequence[_Entry],
        harnesses: Sequence[_Entry],
        models: Sequence[_Entry],
        axes: Sequence[_Axis],
    ) -> dict[str, str]:
        """An ``[[exclude]]`` table: axis -> label, every label one the axis has."""
        if not table:
            raise self.error(path, "an empty exclusion would leave out every cell")
        known: dict[str, list[str]] = {
            "taskset": [e.label for e in tasksets],
            "harness": [e.label for e in harnesses],
            "model": [e.label for e in models],
        }
        for axis in axes:
            known[axis.key] = [v.label for v in axis.values]
        by_short = {a.short: a.key for a in axes}
        out: dict[str, str] = {}
        for raw, value in table.items():
            # a header's name as written (X-Route-Tag), else the normalised key
            key = by_short.get(raw, raw)
            if key not in known:
                key = by_short.get(setting_key(raw), setting_key(raw))
            where = f"{path}.{raw}"
            if key not in known:
                raise self.error(where, f"not an axis of the job; its axes: {', '.join(known)}")
            label: str | None = None
            matrix_axis = next((a for a in axes if a.key == key), None)
            if matrix_axis is not None:
                label = next(
                    (
                        v.label
                        for v in matrix_axis.values
                        if v.label == value or _same(v.value, value)
                    ),
                    None,
                )
            else:
                label = value if isinstance(value, str) and value in known[key] else None
            if label is None:
                raise self.error(where, f"expected one of {', '.join(known[key]) or 'nothing'}")
            out[key] = label
        return out

    # -- cells ---------------------------------------------------------------------
    def check_size(
        self,
        cross: bool,
        tasksets: Sequence[_Entry],
        harnesses: Sequence[_Entry],
        models: Sequence[_Entry],
        axes: Sequence[_Axis],
        excludes: Sequence[Mapping[str, str]],
        explicit: Any,
    ) -> None:
        """Refuse a job of more cells than :func:`~agentkit.validation.max_cells`, counted
        (the cross product less exclusions, plus ``[[cells]]``) before any is made."""
        sizes: list[tuple[str, list[str]]] = [
            ("taskset", [e.label for e in tasksets]),
            ("harness", [e.label for e in harnesses]),
        ]
        if models:
            sizes.append(("model", [e.label for e in models]))
        sizes += [(a.key, [v.label for v in a.values]) for a in axes]
        product = math.prod(len(labels) for _, labels in sizes) if cross else 0
        crossed = count_cells(sizes, excludes) if cross else 0
        hand = len(explicit) if isinstance(explicit, list) else 0
        limit = max_cells()
        if crossed + hand <= limit:
            return
        factors = " × ".join(f"{len(labels):,} {name}" for name, labels in sizes)
        raise self.error(
            "matrix" if axes else "",
            f"the job would have {crossed + hand:,} cells ({factors}"
            + (f", less {product - crossed:,} excluded" if product != crossed else "")
            + (f", plus {hand:,} [[cells]]" if hand else "")
            + f"), more than one job has ({limit:,}, MAX_CELLS): vary fewer settings or "
            "values, or raise the limit with the environment variable AGENTKIT_MAX_CELLS",
        )

    def product(
        self,
        defaults: _Settings,
        override: _Settings,
        tasksets: Sequence[_Entry],
        harnesses: Sequence[_Entry],
        models: Sequence[_Entry],
        axes: Sequence[_Axis],
        excludes: Sequence[Mapping[str, str]],
    ) -> list[CellSpec]:
        cells = []
        with_models: Sequence[_Entry | None] = models or [None]
        # lazy products: the combinations are never all held at once
        for ts, h, m, picked in (
            (ts, h, m, picked)
            for ts, h, m in itertools.product(tasksets, harnesses, with_models)
            for picked in itertools.product(*(a.values for a in axes))
        ):
            axes_labels = {"taskset": ts.label, "harness": h.label}
            if m is not None:
                axes_labels["model"] = m.label
            for axis, value in zip(axes, picked, strict=True):
                axes_labels[axis.key] = value.label
            if any(all(axes_labels.get(k) == v for k, v in x.items()) for x in excludes):
                continue
            parts = [ts.label, h.label] + ([m.label] if m is not None else [])
            parts += [f"{a.short}={v.label}" for a, v in zip(axes, picked, strict=True)]
            layers = [defaults, ts.settings, h.settings]
            if m is not None:
                layers.append(_Settings(options={"model": m.name}))
                layers.append(m.settings)
            layers += [a.settings(v) for a, v in zip(axes, picked, strict=True)]
            layers.append(override)
            secrets = frozenset(a.key for a, v in zip(axes, picked, strict=True) if v.secret)
            cells.append(_cell(".".join(parts), axes_labels, ts, h, _merge(layers), False, secrets))
        return cells

    def explicit(
        self,
        table: Mapping[str, Any],
        path: str,
        defaults: _Settings,
        override: _Settings,
        tasksets: Sequence[_Entry],
        harnesses: Sequence[_Entry],
        models: Sequence[_Entry],
    ) -> tuple[CellSpec, _Settings]:
        """A ``[[cells]]`` entry (a name, the labels of its taskset, harness and model) and
        the settings it gives itself."""
        if "name" not in table:
            raise self.error(path, "missing required key 'name'")
        name = self.string(table["name"], f"{path}.name")
        if not CELL_NAME.match(name):
            raise self.error(
                f"{path}.name",
                f"expected a name of letters, digits, '.', '_', '=' and '-', got {name!r}",
            )
        picked: dict[str, _Entry] = {}
        for kind, entries, required in (
            ("taskset", tasksets, True),
            ("harness", harnesses, True),
            ("model", models, False),
        ):
            if kind not in table:
                if required:
                    raise self.error(path, f"missing required key {kind!r} (a {kind}'s label)")
                continue
            label = self.string(table[kind], f"{path}.{kind}")
            entry = next((e for e in entries if e.label == label), None)
            if entry is None:
                known = ", ".join(e.label for e in entries) or f"none: add a [[{kind}s]] entry"
                section = "harnesses" if kind == "harness" else f"{kind}s"
                raise self.error(
                    f"{path}.{kind}",
                    f"no [[{section}]] entry is labelled {label!r}; labels: {known}",
                )
            picked[kind] = entry
        settings = self.settings(table, path, skip=("name", "taskset", "harness", "model"))
        ts, h, m = picked["taskset"], picked["harness"], picked.get("model")
        axes = {"taskset": ts.label, "harness": h.label}
        layers = [defaults, ts.settings, h.settings]
        if m is not None:
            axes["model"] = m.label
            layers += [_Settings(options={"model": m.name}), m.settings]
        merged = _merge([*layers, settings, override])
        return _cell(name, axes, ts, h, merged, True), settings

    def check_cell(self, cell: CellSpec) -> None:
        """The merged options of a cell, checked by each plugin's schema and by RunOptions."""
        where = f"cell {cell.name!r}"
        self.check_options("harness", cell.harness, cell.harness_options, f"{where}: harness")
        provider = registry.parse_taskset_spec(cell.taskset)[0]
        self.check_options("taskset", provider, cell.taskset_options, f"{where}: taskset")
        sandbox = cell.settings.get("sandbox") or "local"
        try:  # as a run checks them: unknown names, types, values no rollout could use
            registry.resolve_sandbox(sandbox, **(cell.settings.get("sandbox_options") or {}))
        except AgentkitError as exc:
            raise self.error(f"{where}: sandbox", str(exc)) from None
        try:
            cell.run_options(concurrency=DEFAULT_CONCURRENCY)
        except SpecError as exc:
            raise self.error(where, str(exc)) from None

    def check_taskset(self, spec: str, path: str) -> None:
        try:
            provider = registry.parse_taskset_spec(spec)[0]
        except AgentkitError as exc:
            raise self.error(path, str(exc)) from None
        self.check_registered("taskset", provider, path)

    def check_registered(self, kind: str, name: str, path: str) -> None:
        try:
            registry.get(kind, name)  # type: ignore[arg-type]
        except AgentkitError as exc:
            raise self.error(path, str(exc)) from None

    def check_options(self, kind: str, name: str, values: dict[str, Any], path: str) -> None:
        if not values:
            return
        try:
            registry.option_schema(kind, name).validate(values)  # type: ignore[arg-type]
        except AgentkitError as exc:
            raise self.error(path, str(exc)) from None


def count_cells(
    sizes: Sequence[tuple[str, Sequence[str]]], excludes: Sequence[Mapping[str, str]]
) -> int:
    """How many cells the cross product of ``sizes`` (axis name and its labels, in
    order) has once every exclusion (axis -> label) has left its cells out: counted
    exactly, axis by axis, without making a cell (labels no exclusion names are
    counted together)."""
    index = {name: i for i, (name, _) in enumerate(sizes)}
    last = [max(index[k] for k in x) for x in excludes]

    @functools.cache
    def count(j: int, alive: frozenset[int]) -> int:
        # alive: the exclusions every one of whose labels on the axes before j matched
        if any(last[x] < j for x in alive):
            return 0  # one matched on all of its axes: everything below is left out
        if j == len(sizes):
            return 1
        name, labels = sizes[j]
        free = frozenset(x for x in alive if name not in excludes[x])
        fixing: dict[str, set[int]] = {}
        for x in alive:
            if name in excludes[x] and excludes[x][name] in labels:
                fixing.setdefault(excludes[x][name], set()).add(x)
        total = (len(set(labels)) - len(fixing)) * count(j + 1, free)
        for matched in fixing.values():
            total += count(j + 1, free | matched)
        return total

    return count(0, frozenset(range(len(excludes))))


def _cell(
    name: str,
    axes: dict[str, str],
    ts: _Entry,
    h: _Entry,
    merged: _Settings,
    explicit: bool,
    secrets: frozenset[str] = frozenset(),
) -> CellSpec:
    return CellSpec(
        name=name,
        axes=axes,
        taskset=ts.name,
        taskset_options=merged.taskset_options,
        harness=h.name,
        harness_options=merged.harness_options,
        settings=merged.options,
        explicit=explicit,
        secrets=secrets,
    )


def _default_label(kind: str, name: str) -> str:
    """A taskset's label: the last part of its argument without its extension
    (``jsonl:examples/arith.jsonl`` -> ``arith``); a harness's or model's: its name."""
    if kind == "tasksets":
        _, _, argument = name.partition(":")
        last = argument.rstrip("/").rpartition("/")[2] or name.partition(":")[0]
        stem = last.rpartition(".")[0] if "." in last.lstrip(".") else last
        return slug(stem or last)
    return slug(name)


def _value_label(value: Any) -> str | None:
    """A matrix value's label: ``true``, ``5``, ``0.7``, a slug of a string; None for
    tables and lists (which need a label)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else None
    if isinstance(value, str):
        return slug(value)
    return None


def _same(a: Any, b: Any) -> bool:
    return type(a) is type(b) and a == b


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return f"{str(value).lower()} (a boolean)"
    if isinstance(value, dict):
        return "a table"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, str):
        return f"the string {value!r}"
    return f"{type(value).__name__} {value!r}"


def _entry_json(kind: str, entry: _Entry) -> dict[str, Any]:
    """A ``[[tasksets]]``, ``[[harnesses]]`` or ``[[models]]`` entry as the normalised
    document keeps it: its identity, label, options and run options."""
    ident = "spec" if kind == "tasksets" else "name"
    out: dict[str, Any] = {ident: entry.name, "label": entry.label}
    body = entry.settings.to_json()
    own = {"tasksets": "taskset_options", "harnesses": "harness_options"}.get(kind)
    if own is not None and own in body:
        out["options"] = body.pop(own)
    out.update(body)
    return out


def _value_json(value: _Value) -> Any:
    """A matrix value as the stored document keeps it: a secret's variable, or ``***``."""
    if value.env is not None:
        return {"label": value.label, "env": value.env}
    if value.secret:
        return {"label": value.label, "value": MARKER}
    return {"label": value.label, "value": value.value} if value.labelled else value.value


#: The last word of an option's name that makes its values secrets (``api_key``,
#: ``hf_token``, ``password``; not ``max_tokens`` nor ``token_limit``).
_SECRET_LAST_WORDS = frozenset(
    {"key", "apikey", "token", "secret", "password", "passwd", "credential", "credentials", "auth"}
)


def _secret_key(key: str) -> bool:
    """Whether a matrix key's values are secrets by their name: a header such as
    ``Authorization`` or ``X-Api-Key``, an option such as ``harness_options.api_token``
    (run options and sampling arguments are none)."""
    table, dot, sub = key.partition(".")
    if not dot or table == "sampling_args":
        return False
    if table == "headers":
        return is_secret_header(sub)
    return re.split(r"[^a-z0-9]+", sub.lower())[-1] in _SECRET_LAST_WORDS


def _kind_only(value: Any) -> str:
    """A value's type for a message that must not show it."""
    if isinstance(value, str):
        return "string"
    return "table" if isinstance(value, dict) else type(value).__name__
