"""A job's ``[[tasksets]]``, ``[[harnesses]]`` and ``[[models]]`` entries: what each
names, its label (given, or made from the name) and the settings it gives its cells."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from agentkit import registry
from agentkit.jobs._cell import slug
from agentkit.jobs._fields import FieldReader
from agentkit.jobs._settings import Settings

__all__ = ["Entry", "entry_json", "read_entries"]


@attrs.frozen
class Entry:
    """A ``[[tasksets]]``, ``[[harnesses]]`` or ``[[models]]`` entry."""

    label: str
    name: str  # the taskset spec, harness name or model name
    settings: Settings
    path: str
    label_given: bool


def read_entries(r: FieldReader, doc: Mapping[str, Any], kind: str, ident: str) -> list[Entry]:
    """The ``[[tasksets]]``, ``[[harnesses]]`` or ``[[models]]`` entries."""
    own = {"tasksets": "taskset_options", "harnesses": "harness_options"}.get(kind)
    out: list[Entry] = []
    labels: dict[str, str] = {}
    for i, table in enumerate(r.tables(doc.get(kind, []), kind)):
        path = f"{kind}[{i}]"
        if ident not in table:
            raise r.error(path, f"missing required key {ident!r}")
        name = r.string(table[ident], f"{path}.{ident}")
        if kind == "tasksets":
            r.check_taskset(name, f"{path}.{ident}")
        elif kind == "harnesses":
            r.check_registered("harness", name, f"{path}.{ident}")
        given = "label" in table
        label = r.label(table["label"], f"{path}.label") if given else _default_label(kind, name)
        if label in labels:
            raise r.error(
                f"{path}.label" if given else path,
                f"the label {label!r} is already {labels[label]}'s; give each entry its own "
                "label (label = ...)",
            )
        labels[label] = path
        settings = r.settings(table, path, skip=(ident, "label"), own=own)
        out.append(Entry(label, name, settings, path, given))
        if kind == "harnesses" and settings.harness_options:
            r.check_options("harness", name, settings.harness_options, f"{path}.options")
        if kind == "tasksets" and settings.taskset_options:
            provider = registry.parse_taskset_spec(name)[0]
            r.check_options("taskset", provider, settings.taskset_options, f"{path}.options")
    return out


def _default_label(kind: str, name: str) -> str:
    """A taskset's label: the last part of its argument without its extension
    (``jsonl:examples/arith.jsonl`` -> ``arith``); a harness's or model's: its name."""
    if kind == "tasksets":
        _, _, argument = name.partition(":")
        last = argument.rstrip("/").rpartition("/")[2] or name.partition(":")[0]
        stem = last.rpartition(".")[0] if "." in last.lstrip(".") else last
        return slug(stem or last)
    return slug(name)


def entry_json(kind: str, entry: Entry) -> dict[str, Any]:
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
