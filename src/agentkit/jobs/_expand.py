"""A job's cells: the cross product of its entries and matrix less ``[[exclude]]``,
counted before any is made, plus the ``[[cells]]`` given by hand; each cell's settings
merged from its layers and checked as a run checks them."""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Mapping, Sequence
from typing import Any

from agentkit import registry
from agentkit._errors import AgentkitError, SpecError
from agentkit._limits import max_cells
from agentkit.jobs._cell import CELL_NAME, CellSpec
from agentkit.jobs._entries import Entry
from agentkit.jobs._fields import FieldReader
from agentkit.jobs._matrix import Axis
from agentkit.jobs._settings import DEFAULT_CONCURRENCY, Settings, merge, setting_key

__all__ = [
    "check_cell",
    "check_size",
    "count_cells",
    "cross_product",
    "explicit_cell",
    "read_exclude",
]


def read_exclude(
    r: FieldReader,
    table: Mapping[str, Any],
    path: str,
    tasksets: Sequence[Entry],
    harnesses: Sequence[Entry],
    models: Sequence[Entry],
    axes: Sequence[Axis],
) -> dict[str, str]:
    """An ``[[exclude]]`` table: axis -> label, every label one the axis has."""
    if not table:
        raise r.error(path, "an empty exclusion would leave out every cell")
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
            raise r.error(where, f"not an axis of the job; its axes: {', '.join(known)}")
        label: str | None = None
        matrix_axis = next((a for a in axes if a.key == key), None)
        if matrix_axis is not None:
            label = next(
                (v.label for v in matrix_axis.values if v.label == value or _same(v.value, value)),
                None,
            )
        else:
            label = value if isinstance(value, str) and value in known[key] else None
        if label is None:
            raise r.error(where, f"expected one of {', '.join(known[key]) or 'nothing'}")
        out[key] = label
    return out


def check_size(
    r: FieldReader,
    cross: bool,
    tasksets: Sequence[Entry],
    harnesses: Sequence[Entry],
    models: Sequence[Entry],
    axes: Sequence[Axis],
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
    raise r.error(
        "matrix" if axes else "",
        f"the job would have {crossed + hand:,} cells ({factors}"
        + (f", less {product - crossed:,} excluded" if product != crossed else "")
        + (f", plus {hand:,} [[cells]]" if hand else "")
        + f"), more than one job has ({limit:,}, MAX_CELLS): vary fewer settings or "
        "values, or raise the limit with the environment variable AGENTKIT_MAX_CELLS",
    )


def cross_product(
    defaults: Settings,
    override: Settings,
    tasksets: Sequence[Entry],
    harnesses: Sequence[Entry],
    models: Sequence[Entry],
    axes: Sequence[Axis],
    excludes: Sequence[Mapping[str, str]],
) -> list[CellSpec]:
    """The cells of the cross product of the entries and the matrix values, less those an
    exclusion (axis -> label) leaves out, each with its layers of settings merged."""
    cells = []
    with_models: Sequence[Entry | None] = models or [None]
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
            layers.append(Settings(options={"model": m.name}))
            layers.append(m.settings)
        layers += [a.settings(v) for a, v in zip(axes, picked, strict=True)]
        layers.append(override)
        secrets = frozenset(a.key for a, v in zip(axes, picked, strict=True) if v.secret)
        cells.append(_cell(".".join(parts), axes_labels, ts, h, merge(layers), False, secrets))
    return cells


def explicit_cell(
    r: FieldReader,
    table: Mapping[str, Any],
    path: str,
    defaults: Settings,
    override: Settings,
    tasksets: Sequence[Entry],
    harnesses: Sequence[Entry],
    models: Sequence[Entry],
) -> tuple[CellSpec, Settings]:
    """A ``[[cells]]`` entry (a name, the labels of its taskset, harness and model) and
    the settings it gives itself."""
    if "name" not in table:
        raise r.error(path, "missing required key 'name'")
    name = r.string(table["name"], f"{path}.name")
    if not CELL_NAME.match(name):
        raise r.error(
            f"{path}.name",
            f"expected a name of letters, digits, '.', '_', '=' and '-', got {name!r}",
        )
    picked: dict[str, Entry] = {}
    for kind, entries, required in (
        ("taskset", tasksets, True),
        ("harness", harnesses, True),
        ("model", models, False),
    ):
        if kind not in table:
            if required:
                raise r.error(path, f"missing required key {kind!r} (a {kind}'s label)")
            continue
        label = r.string(table[kind], f"{path}.{kind}")
        entry = next((e for e in entries if e.label == label), None)
        if entry is None:
            known = ", ".join(e.label for e in entries) or f"none: add a [[{kind}s]] entry"
            section = "harnesses" if kind == "harness" else f"{kind}s"
            raise r.error(
                f"{path}.{kind}",
                f"no [[{section}]] entry is labelled {label!r}; labels: {known}",
            )
        picked[kind] = entry
    settings = r.settings(table, path, skip=("name", "taskset", "harness", "model"))
    ts, h, m = picked["taskset"], picked["harness"], picked.get("model")
    axes = {"taskset": ts.label, "harness": h.label}
    layers = [defaults, ts.settings, h.settings]
    if m is not None:
        axes["model"] = m.label
        layers += [Settings(options={"model": m.name}), m.settings]
    merged = merge([*layers, settings, override])
    return _cell(name, axes, ts, h, merged, True), settings


def check_cell(r: FieldReader, cell: CellSpec) -> None:
    """The merged options of a cell, checked by each plugin's schema and by RunOptions."""
    where = f"cell {cell.name!r}"
    r.check_options("harness", cell.harness, cell.harness_options, f"{where}: harness")
    provider = registry.parse_taskset_spec(cell.taskset)[0]
    r.check_options("taskset", provider, cell.taskset_options, f"{where}: taskset")
    sandbox = cell.settings.get("sandbox") or "local"
    try:  # as a run checks them: unknown names, types, values no rollout could use
        registry.resolve_sandbox(sandbox, **(cell.settings.get("sandbox_options") or {}))
    except AgentkitError as exc:
        raise r.error(f"{where}: sandbox", str(exc)) from None
    try:
        cell.run_options(concurrency=DEFAULT_CONCURRENCY)
    except SpecError as exc:
        raise r.error(where, str(exc)) from None


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
    ts: Entry,
    h: Entry,
    merged: Settings,
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


def _same(a: Any, b: Any) -> bool:
    return type(a) is type(b) and a == b
