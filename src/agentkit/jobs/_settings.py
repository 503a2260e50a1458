"""The run settings a job file gives, one place at a time, and how the places merge.

A cell's settings are layers: ``[job]``'s defaults, its taskset's, harness's and
model's entries, its matrix values (or a ``[[cells]]`` entry's own), then
``[override]``. Later layers win; the tables (sampling arguments, headers,
sandbox options, the plugins' options) merge key by key.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs

from agentkit.jobs._cell import public_settings, public_values

__all__ = [
    "DEFAULT_CONCURRENCY",
    "PLUGIN_TABLES",
    "TABLE_OPTIONS",
    "WIRE_TABLES",
    "Settings",
    "merge",
    "setting_key",
]

#: The shared budget when the job gives none (as ``agentkit run -c``).
DEFAULT_CONCURRENCY = 8
#: Run options merged key by key across the layers (the others are replaced whole).
TABLE_OPTIONS = ("sampling_args", "headers", "sandbox_options")
#: Options of the cell's plugins, merged key by key too.
PLUGIN_TABLES = ("harness_options", "taskset_options")


@attrs.frozen(kw_only=True)
class Settings:
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


def merge(layers: Sequence[Settings]) -> Settings:
    """Later layers win; tables (sampling args, headers, plugin options) merge by key."""
    options: dict[str, Any] = {}
    plugin: dict[str, dict[str, Any]] = {"harness_options": {}, "taskset_options": {}}
    for layer in layers:
        for name, value in layer.options.items():
            before = options.get(name)
            if name in TABLE_OPTIONS and isinstance(before, dict) and isinstance(value, dict):
                options[name] = {**before, **value}
            else:
                options[name] = value
        plugin["harness_options"].update(layer.harness_options)
        plugin["taskset_options"].update(layer.taskset_options)
    return Settings(options=options, **plugin)


#: Tables whose keys are names on the wire (a request's fields, its headers' names):
#: kept exactly as written, never normalised.
WIRE_TABLES = ("sampling_args", "headers")


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
    return f"{table}.{sub if table in WIRE_TABLES else sub.replace('-', '_')}"
