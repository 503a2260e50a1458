"""Writing a job directory: its lock and ``job.json`` (the format is in docs/jobs.md).

The cells' run directories are written by their runs; this module writes
only what is the job's own: ``job.json``, atomically (readers see the old or
the new file, never half), and the lock the running process holds.
"""

from __future__ import annotations

import hashlib
import os
import platform
import time
from pathlib import Path, PurePosixPath
from typing import Any

import attrs

from agentkit._convert import structure
from agentkit._errors import AgentkitError, ValidationError
from agentkit._limits import load_json
from agentkit._lockfile import try_lock
from agentkit._version import __version__
from agentkit.jobs._cell import CELL_NAME, LABEL, CellSpec
from agentkit.jobs._layout import (
    CELLS_DIR,
    JOB_FILE,
    JOB_FORMAT_VERSION,
    JOB_KIND,
    LOCK,
    READABLE_FORMAT_VERSIONS,
)
from agentkit.jobs._spec import JobSpec
from agentkit.rundir import write_json_atomic

__all__ = ["JobDirError", "JobStore", "cell_dir_name", "file_digest", "read_job_json"]


class JobDirError(AgentkitError):
    """A job directory cannot be created, read, locked or resumed."""


def cell_dir_name(cell: CellSpec) -> str:
    """A cell's run directory, relative to the job directory: ``cells/<name>``."""
    return f"{CELLS_DIR}/{cell.name}"


def file_digest(path: str | os.PathLike[str]) -> str | None:
    """SHA-256 of a file's bytes (None when it cannot be read)."""
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError:
        return None


@attrs.frozen(kw_only=True)
class _CellFile:
    """One cell of ``job.json`` as the reader checks it (docs/jobs.md)."""

    name: str
    axes: dict[str, str] = attrs.field(factory=dict)
    run_dir: str | None = None
    explicit: bool = False
    taskset: dict[str, Any] = attrs.field(factory=dict)
    harness: dict[str, Any] = attrs.field(factory=dict)
    settings: dict[str, Any] = attrs.field(factory=dict)


@attrs.frozen(kw_only=True)
class _JobFile:
    """``job.json`` as the reader checks it: every key the writer writes, typed."""

    kind: str
    format_version: int
    name: str
    cells: list[_CellFile]
    created_at: float | None = None
    agentkit_version: str | None = None
    python: str | None = None
    source: str | None = None
    source_sha256: str | None = None
    concurrency: int | None = None
    axes: dict[str, list[str]] = attrs.field(factory=dict)
    spec: dict[str, Any] = attrs.field(factory=dict)
    resumes: list[dict[str, Any]] = attrs.field(factory=list)


def read_job_json(job_dir: Path) -> dict[str, Any]:
    """``job_dir/job.json``, checked strictly to be a job of a format this agentkit reads.

    The one reader of ``job.json`` (``agentkit job``, :func:`agentkit.jobs.open`, the
    viewer): strict JSON (no ``NaN``, no duplicate keys), every key of the type
    docs/jobs.md gives, each cell named as a cell is (letters, digits, ``.``, ``_``,
    ``=``, ``-``; once) with its run directory inside the job directory. Anything
    else is one :class:`JobDirError` naming the file, the field and what was expected.
    """
    path = job_dir / JOB_FILE
    try:
        text = path.read_bytes()
    except FileNotFoundError:
        raise JobDirError(f"{job_dir}: not a job directory (no {JOB_FILE})") from None
    except OSError as exc:
        raise JobDirError(f"{path}: cannot read it: {exc.strerror or exc}") from None
    try:
        data = load_json(text)
    except ValidationError as exc:
        raise JobDirError(f"{path}: cannot read it: {exc}") from None
    if not isinstance(data, dict) or data.get("kind") != JOB_KIND:
        raise JobDirError(f"{path}: not an agentkit job file (kind is not {JOB_KIND!r})")
    version = data.get("format_version")
    if version not in READABLE_FORMAT_VERSIONS or isinstance(version, bool):
        raise JobDirError(
            f"{path}: format_version {version!r}; this agentkit reads "
            f"{', '.join(map(str, READABLE_FORMAT_VERSIONS))} (a newer agentkit wrote it?)"
        )
    try:
        _check_job_file(structure(data, _JobFile))
    except ValidationError as exc:
        raise JobDirError(str(exc.with_source(str(path)))) from None
    return data


def _check_job_file(job: _JobFile) -> None:
    """What the types do not say: names, the budget, where each cell's run is."""
    if not LABEL.match(job.name):
        raise ValidationError(
            "name", f"expected a name of letters, digits, '.', '_' and '-', got {job.name!r}"
        )
    if job.concurrency is not None and job.concurrency < 1:
        raise ValidationError("concurrency", f"expected at least 1, got {job.concurrency}")
    seen: set[str] = set()
    for i, cell in enumerate(job.cells):
        if not CELL_NAME.match(cell.name):
            raise ValidationError(
                f"cells[{i}].name",
                f"expected a cell's name (letters, digits, '.', '_', '=' and '-'), "
                f"got {cell.name!r}",
            )
        if cell.name in seen:
            raise ValidationError(f"cells[{i}].name", f"a second cell named {cell.name!r}")
        seen.add(cell.name)
        run_dir = PurePosixPath(cell.run_dir or f"{CELLS_DIR}/{cell.name}")
        if not str(run_dir) or run_dir.is_absolute() or ".." in run_dir.parts:
            raise ValidationError(
                f"cells[{i}].run_dir",
                f"expected a directory inside the job directory, got {cell.run_dir!r}",
            )


class JobStore:
    """A job directory being run: its lock and ``job.json``."""

    def __init__(self, job_dir: str | os.PathLike[str]) -> None:
        self.job_dir = Path(job_dir)
        self._lock_fd: int | None = None

    @property
    def job_file(self) -> Path:
        """``job.json``."""
        return self.job_dir / JOB_FILE

    def cell_dir(self, cell: CellSpec) -> Path:
        """The cell's run directory."""
        return self.job_dir / cell_dir_name(cell)

    def create(self) -> None:
        """Make a new job directory (or take an empty one) and lock it."""
        if self.job_file.exists():
            raise JobDirError(
                f"{self.job_dir} already holds a job; continue it with agentkit job run "
                f"--resume {self.job_dir} (Job.run(resume=...)), or choose another directory"
            )
        if self.job_dir.is_dir() and any(self.job_dir.iterdir()):
            raise JobDirError(
                f"{self.job_dir} is not empty and holds no job; choose a new directory"
            )
        try:
            (self.job_dir / CELLS_DIR).mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise JobDirError(
                f"cannot create the job directory {self.job_dir}: {exc.strerror or exc}"
            ) from None
        self.lock()

    def lock(self) -> None:
        """Take the job's lock (one process runs a job at a time)."""
        try:
            fd = try_lock(self.job_dir / LOCK)
        except OSError as exc:
            raise JobDirError(f"cannot write in the job directory {self.job_dir}: {exc}") from None
        if fd is None:
            raise JobDirError(f"{self.job_dir}: another agentkit job run is running this job")
        self._lock_fd = fd

    def unlock(self) -> None:
        """Release the lock."""
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def write(
        self,
        spec: JobSpec,
        *,
        source: str | None,
        source_sha256: str | None,
        previous: dict[str, Any] | None = None,
        changes: dict[str, dict[str, list[Any]]] | None = None,
    ) -> dict[str, Any]:
        """Write ``job.json`` for ``spec`` (on resume, carrying ``previous``'s history on,
        with one more entry in ``resumes``); returns the document written."""
        now = time.time()
        document: dict[str, Any] = {
            "kind": JOB_KIND,
            "format_version": JOB_FORMAT_VERSION,
            "name": spec.name,
            "created_at": now if previous is None else previous.get("created_at", now),
            "agentkit_version": __version__,
            "python": platform.python_version(),
            "source": source,
            "source_sha256": source_sha256,
            "concurrency": spec.concurrency,
            "axes": spec.axes,
            "cells": [{**c.to_json(), "run_dir": cell_dir_name(c)} for c in spec.cells],
            "spec": spec.document,
            "resumes": list((previous or {}).get("resumes") or []),
        }
        if previous is not None:
            entry: dict[str, Any] = {"at": now, "source": source, "changed": changes or {}}
            if previous.get("concurrency") != spec.concurrency:
                entry["concurrency"] = {"was": previous.get("concurrency"), "now": spec.concurrency}
            document["resumes"].append(entry)
        try:
            write_json_atomic(self.job_file, document)
        except OSError as exc:
            raise JobDirError(f"{self.job_file}: cannot write: {exc.strerror or exc}") from None
        return document
