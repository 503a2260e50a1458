"""The values of a job document, read strictly: every error names the file and the key path.

:class:`FieldReader` reads one document's tables, strings, labels, run options
and plugin options, checking names against the plugin registry; the readers of
the entries, the matrix and the cells (:mod:`agentkit.jobs._entries`,
:mod:`agentkit.jobs._matrix`, :mod:`agentkit.jobs._expand`) are written with it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from agentkit import registry
from agentkit._errors import AgentkitError, SpecError, ValidationError, kind_of
from agentkit._run_options import RunOptions, file_option
from agentkit.jobs._cell import LABEL
from agentkit.jobs._settings import PLUGIN_TABLES, Settings

__all__ = ["FieldReader"]

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


class FieldReader:
    """Reads the values of one job document; every error names ``source`` and the key path."""

    def __init__(self, source: str | None) -> None:
        self.source = source

    def error(self, path: str, reason: str) -> ValidationError:
        return ValidationError(path, reason, self.source)

    def table(self, value: Any, path: str, what: str = "a table") -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.error(path, f"expected {what}, got {kind_of(value)}")
        return {str(k): v for k, v in value.items()}

    def tables(self, value: Any, path: str) -> list[dict[str, Any]]:
        if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
            got = kind_of(value)
            raise self.error(path, f"expected an array of tables ([[{path}]]), got {got}")
        return [self.table(v, f"{path}[{i}]") for i, v in enumerate(value)]

    def string(self, value: Any, path: str) -> str:
        if not isinstance(value, str) or not value:
            raise self.error(path, f"expected a non-empty string, got {kind_of(value)}")
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
    ) -> Settings:
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
            elif key in PLUGIN_TABLES:
                if key == own:
                    raise self.error(where, "give this entry's own options as 'options'")
                plugin[key] = self.table(value, where)
            else:
                options[key] = self.run_option(key, value, where)
        return Settings(options=options, **plugin)

    # -- names the registry knows --------------------------------------------------
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

    def from_environment(self, name: str, path: str) -> str:
        """A secret matrix value: the value of environment variable ``name``."""
        value = os.environ.get(name)
        if not value:
            state = "is empty" if value == "" else "is not set"
            raise self.error(path, f"environment variable {name!r} {state}")
        return value
