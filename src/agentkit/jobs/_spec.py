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

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from agentkit._errors import SpecError, kind_of
from agentkit.jobs._cell import CellSpec, slug
from agentkit.jobs._entries import Entry, entry_json, read_entries
from agentkit.jobs._expand import (
    check_cell,
    check_size,
    cross_product,
    explicit_cell,
    read_exclude,
)
from agentkit.jobs._fields import FieldReader
from agentkit.jobs._matrix import Axis, read_matrix, value_json
from agentkit.jobs._settings import DEFAULT_CONCURRENCY, setting_key

__all__ = [
    "DEFAULT_CONCURRENCY",
    "JobSpec",
    "read_job",
    "read_job_file",
    "setting_key",
    "with_changes",
]

_TOP = ("job", "tasksets", "harnesses", "models", "matrix", "exclude", "cells", "override")


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
    r = FieldReader(source)
    doc = r.table(data, "", "a table of job settings")
    for key in doc:
        if key not in _TOP:
            raise r.error(key, f"unknown table; a job file has {', '.join(_TOP)}")
    job = r.table(doc.get("job", {}), "job")
    name = r.label(job.get("name", slug(default_name)), "job.name")
    concurrency = job.get("concurrency", DEFAULT_CONCURRENCY)
    concurrency = r.run_option("concurrency", concurrency, "job.concurrency")
    cross = job.get("cross_product", True)
    if not isinstance(cross, bool):
        raise r.error("job.cross_product", f"expected true or false, got {kind_of(cross)}")
    defaults = r.settings(job, "job", skip=("name", "concurrency", "cross_product"))
    override = r.settings(r.table(doc.get("override", {}), "override"), "override", skip=())
    tasksets = read_entries(r, doc, "tasksets", "spec")
    harnesses = read_entries(r, doc, "harnesses", "name")
    models = read_entries(r, doc, "models", "name")
    axes = read_matrix(r, doc.get("matrix", {}))
    excludes = [
        read_exclude(r, t, f"exclude[{i}]", tasksets, harnesses, models, axes)
        for i, t in enumerate(r.tables(doc.get("exclude", []), "exclude"))
    ]
    check_size(r, cross, tasksets, harnesses, models, axes, excludes, doc.get("cells"))
    cells: list[CellSpec] = []
    if cross:
        if not tasksets or not harnesses:
            raise r.error(
                "",
                "a job needs at least one [[tasksets]] entry and one [[harnesses]] entry "
                "(or only [[cells]], with cross_product = false in [job])",
            )
        cells.extend(cross_product(defaults, override, tasksets, harnesses, models, axes, excludes))
    elif axes or excludes:
        raise r.error("matrix" if axes else "exclude", "needs cross_product = true")
    explicit_json: list[dict[str, Any]] = []
    for i, table in enumerate(r.tables(doc.get("cells", []), "cells")):
        cell, own = explicit_cell(
            r, table, f"cells[{i}]", defaults, override, tasksets, harnesses, models
        )
        cells.append(cell)
        explicit_json.append({"name": cell.name, **cell.axes, **own.to_json()})
    _check_cells(r, cells)
    document = {
        "job": {
            "name": name,
            "concurrency": concurrency,
            "cross_product": cross,
            **defaults.to_json(),
        },
        "tasksets": [entry_json("tasksets", e) for e in tasksets],
        "harnesses": [entry_json("harnesses", e) for e in harnesses],
        "models": [entry_json("models", e) for e in models],
        "matrix": {a.key: [value_json(v) for v in a.values] for a in axes},
        "exclude": [dict(x) for x in excludes],
        "cells": explicit_json,
        "override": override.to_json(),
    }
    return JobSpec(
        name=name,
        concurrency=concurrency,
        cells=tuple(cells),
        document=document,
        axes=_axes_labels(tasksets, harnesses, models, axes),
    )


def _check_cells(r: FieldReader, cells: Sequence[CellSpec]) -> None:
    """Refuse a job without cells or with two of one name; check each cell's settings."""
    if not cells:
        raise r.error("", "the job has no cells (every cell of the matrix is excluded)")
    seen: dict[str, int] = {}
    for i, cell in enumerate(cells):
        if cell.name in seen:
            raise r.error(
                "",
                f"two cells are named {cell.name!r}: give their tasksets, harnesses, models "
                "or matrix values distinct labels (label = ...), or the [[cells]] distinct "
                "names",
            )
        seen[cell.name] = i
    for cell in cells:
        check_cell(r, cell)


def _axes_labels(
    tasksets: Sequence[Entry],
    harnesses: Sequence[Entry],
    models: Sequence[Entry],
    axes: Sequence[Axis],
) -> dict[str, list[str]]:
    """The job's axes and their labels in order (``JobSpec.axes``)."""
    axes_labels: dict[str, list[str]] = {
        "taskset": [e.label for e in tasksets],
        "harness": [e.label for e in harnesses],
    }
    if models:
        axes_labels["model"] = [e.label for e in models]
    for axis in axes:
        axes_labels[axis.key] = [v.label for v in axis.values]
    return axes_labels
