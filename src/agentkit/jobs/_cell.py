"""One cell of a job: a taskset, a harness, a model and settings, run as one run directory.

A :class:`CellSpec` is what the expansion of a job file gives for each
cell: its name (a stable, readable slug), where it sits on the job's axes,
what to build its :class:`~agentkit.AgentEnv` from, and the run options it
was given. :meth:`CellSpec.run_options` makes the
:class:`~agentkit.RunOptions` of its run; :meth:`CellSpec.to_json` is its
entry in ``job.json``, without secrets.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs

from agentkit._context import public_headers
from agentkit._redact import MARKER, looks_like_key, looks_secret, public_fields, public_url
from agentkit._run_options import RunOptions

__all__ = [
    "CELL_NAME",
    "LABEL",
    "CellSpec",
    "public_settings",
    "public_values",
    "slug",
]

#: A label the job file gives (a taskset's, harness's, model's or matrix value's).
LABEL = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
#: A cell's name: labels joined by ``.``, matrix values as ``key=value``.
CELL_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._=-]*$")
#: The longest label made from a value (longer ones are cut).
_SLUG_MAX = 40

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def slug(text: str) -> str:
    """``text`` as a label: runs of other characters become ``-``, cut to 40 characters."""
    out = _UNSAFE.sub("-", text).strip("._-")[:_SLUG_MAX].rstrip("._-")
    return out or "x"


def _keylike(value: Any) -> bool:
    return isinstance(value, str) and looks_like_key(value)


def public_values(options: Mapping[str, Any]) -> dict[str, Any]:
    """Options as ``job.json`` stores them: values of secret-looking names, and values
    that look like keys (:func:`agentkit.secrets.looks_like_key`), are ``***``."""
    return {
        name: MARKER if looks_secret(name) or _keylike(value) else value
        for name, value in sorted(options.items())
    }


def public_settings(settings: Mapping[str, Any]) -> dict[str, Any]:
    """Run options as ``job.json`` stores them: secret headers and sandbox options hidden,
    values that look like keys, and a password in the base URL."""
    out: dict[str, Any] = {}
    for name, value in settings.items():
        if name == "headers" and isinstance(value, Mapping):
            value = public_headers(dict(value))
        elif name == "sandbox_options" and isinstance(value, Mapping):
            value = public_values(value)
        elif name == "sampling_args" and isinstance(value, Mapping):
            value = public_fields(value)
        elif name == "base_url" and isinstance(value, str):
            value = public_url(value)
        elif _keylike(value):
            value = MARKER
        out[name] = value
    return out


def _hide(entry: dict[str, Any], key: str) -> None:
    """Replace the setting ``key`` (``headers.X-Api-Key``, ``harness_options.token``,
    ``cache_salt``) of a cell's ``job.json`` entry with ``***``."""
    table, dot, sub = key.partition(".")
    if not dot:
        if key in entry["settings"]:
            entry["settings"][key] = MARKER
        return
    if table in ("harness_options", "taskset_options"):
        holder = entry["harness" if table == "harness_options" else "taskset"]["options"]
    else:
        holder = entry["settings"].get(table)
    if isinstance(holder, dict) and sub in holder:
        holder[sub] = MARKER


@attrs.frozen(kw_only=True)
class CellSpec:
    """One cell of a job: what it runs and with which settings.

    ``name`` is the cell's slug (``arith.chat.gpt-4o-mini.temperature=0.7``),
    also its run directory's name under ``cells/``. ``axes`` says where the
    cell sits on the job's axes: ``taskset``, ``harness``, ``model`` (when the
    job has models) and each matrix key, mapped to the label of the cell's
    value, in the job file's order. ``taskset`` and ``harness`` are the
    registered taskset spec and harness name, with their options.
    ``settings`` holds the run options given to the cell (from ``[job]``, its
    taskset, harness and model entries, the matrix and ``[[cells]]``), typed
    as a file gives them (the model's name under ``model``); ``explicit``
    marks a cell from ``[[cells]]``.
    """

    name: str
    axes: dict[str, str]
    taskset: str
    taskset_options: dict[str, Any] = attrs.field(factory=dict)
    harness: str
    harness_options: dict[str, Any] = attrs.field(factory=dict)
    settings: dict[str, Any] = attrs.field(factory=dict)
    explicit: bool = False
    #: The settings that hold a secret matrix value (``headers.X-Api-Key``): kept for
    #: the cell's run, never written (``***`` in :meth:`to_json`).
    secrets: frozenset[str] = attrs.field(factory=frozenset, repr=False)

    @property
    def model(self) -> str | None:
        """The model the cell runs (None: the harness's own default, or no model)."""
        model = self.settings.get("model")
        return model if isinstance(model, str) else None

    def run_options(
        self,
        *,
        concurrency: int,
        out: str | Path | None = None,
        resume: str | Path | None = None,
        retry_errors: bool = False,
    ) -> RunOptions:
        """The :class:`~agentkit.RunOptions` of the cell's run.

        ``concurrency`` (the job's shared budget) is the cell's own bound too,
        unless the cell was given a smaller one.
        """
        values = dict(self.settings)
        values.setdefault("concurrency", concurrency)
        return RunOptions(**values, out=out, resume=resume, retry_errors=retry_errors)

    def to_json(self) -> dict[str, Any]:
        """The cell as ``job.json`` lists it (without ``run_dir``), secrets hidden."""
        entry = {
            "name": self.name,
            "axes": dict(self.axes),
            "explicit": self.explicit,
            "taskset": {"spec": self.taskset, "options": public_values(self.taskset_options)},
            "harness": {"name": self.harness, "options": public_values(self.harness_options)},
            "settings": public_settings(self.settings),
        }
        for key in self.secrets:
            _hide(entry, key)
        return entry
