"""A job: cells expanded from one file, run as run directories under one job directory.

:meth:`Job.run` prepares every cell's run first (each an ordinary
:class:`~agentkit.AgentEnv` run, with everything such a run checks), so that
an error in any cell stops the job before anything is written; then it runs
the cells together in one event loop, every rollout of every cell holding a
token of one :class:`anyio.CapacityLimiter` (the job's ``concurrency``), with
one progress display. A cell whose run stops with an error does not stop the
others; it is reported and ``--resume`` runs it again.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import anyio
import attrs

from agentkit._errors import AgentkitError, SpecError
from agentkit._limits import max_rollouts
from agentkit._redact import MARKER, Redactor
from agentkit.env import AgentEnv, EvalResults, Session, execute, prepare
from agentkit.jobs._cell import CellSpec
from agentkit.jobs._layout import JOB_FILE
from agentkit.jobs._progress import JobProgress
from agentkit.jobs._resume import diff_cells
from agentkit.jobs._spec import JobSpec, read_job, read_job_file, with_changes
from agentkit.jobs._store import JobDirError, JobStore, file_digest, read_job_json
from agentkit.rundir import dated_dir

__all__ = ["CellError", "CellResult", "Job", "JobResults", "default_job_dir"]


class CellError(AgentkitError):
    """One cell of a job cannot run: the cell's name, and the error of its run."""

    def __init__(self, cell: str, error: AgentkitError) -> None:
        self.cell = cell
        self.error = error
        super().__init__(f"cell {cell}: {error}")


@attrs.frozen(kw_only=True)
class CellResult:
    """How one cell's run went: its results, or the error that stopped it."""

    name: str
    run_dir: Path
    #: The run's results (None when it stopped with an error).
    results: EvalResults | None = None
    #: The message of the error that stopped the cell's run (None: it ran).
    error: str | None = None

    @property
    def complete(self) -> bool:
        """Every planned rollout of the cell finished and ran."""
        return self.results is not None and bool(self.results.summary.get("complete"))

    def to_json(self) -> dict[str, Any]:
        """The cell in ``agentkit job run --json``: ``name``, ``run_dir``, ``error``,
        ``summary`` (as in its summary.json)."""
        return {
            "name": self.name,
            "run_dir": str(self.run_dir),
            "error": self.error,
            "summary": None if self.results is None else self.results.summary,
        }


@attrs.frozen(kw_only=True)
class JobResults:
    """What :meth:`Job.run` did: the job directory and every cell's result, in order."""

    job_dir: Path
    name: str
    cells: tuple[CellResult, ...]

    @property
    def complete(self) -> bool:
        """Every cell complete."""
        return all(c.complete for c in self.cells)

    @property
    def failed(self) -> list[CellResult]:
        """The cells whose run stopped with an error."""
        return [c for c in self.cells if c.error is not None]

    def cell(self, name: str) -> CellResult:
        """One cell's result, by name."""
        for c in self.cells:
            if c.name == name:
                return c
        raise KeyError(name)

    def to_json(self) -> dict[str, Any]:
        """What ``agentkit job run --json`` prints."""
        return {
            "job_dir": str(self.job_dir),
            "name": self.name,
            "complete": self.complete,
            "failed": [c.name for c in self.failed],
            "cells": [c.to_json() for c in self.cells],
        }


@attrs.frozen(kw_only=True)
class _Prepared:
    cell: CellSpec
    run_dir: Path
    session: Session


def _at_least_one(_instance: Any, _attribute: Any, value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise SpecError(f"concurrency must be at least 1, got {value!r}")


@attrs.frozen(kw_only=True)
class Job:
    """Tasksets × harnesses × models × matrix values, each cell an ordinary run.

    >>> job = agentkit.Job.from_toml("job.toml")                      # doctest: +SKIP
    >>> [c.name for c in job.cells]                                   # doctest: +SKIP
    >>> results = await job.run(out="jobs/sweep")                     # doctest: +SKIP
    >>> results = await job.run(resume="jobs/sweep")                  # doctest: +SKIP

    ``concurrency`` is the one budget every cell's rollouts share: at no
    moment do more than ``concurrency`` rollouts run across the cells
    (``attrs.evolve(job, concurrency=64)`` changes it). docs/jobs.md
    describes the job file, the job directory and resuming.
    """

    name: str
    concurrency: int = attrs.field(validator=_at_least_one)
    cells: tuple[CellSpec, ...]
    #: The job file as read, normalised (what job.json keeps as ``spec``).
    document: dict[str, Any]
    #: The job's axes and their labels, in order (``taskset``, ``harness``, ``model``,
    #: then the matrix keys).
    axes: dict[str, list[str]]
    #: The job file this job was read from (None: built from a mapping).
    source: str | None = None
    #: SHA-256 of that file as it was read.
    source_sha256: str | None = None

    # -- construction ------------------------------------------------------------
    @classmethod
    def from_toml(
        cls,
        path: str | os.PathLike[str],
        *,
        replace: Mapping[str, Any] | None = None,
        override: Mapping[str, Any] | None = None,
    ) -> Job:
        """Read a job file, strictly: an error names the file, the key and what was
        expected. ``replace`` and ``override`` are the command line's changes (the
        axes it gives; settings of every cell)."""
        path = Path(path)
        digest = file_digest(path)
        spec = read_job_file(path, replace=replace, override=override)
        return cls._of(spec, source=str(path.resolve()), source_sha256=digest)

    @classmethod
    def from_mapping(
        cls, data: Mapping[str, Any], *, source: str | None = None, name: str = "job"
    ) -> Job:
        """A job from its document as a mapping (a parsed TOML or JSON file);
        ``source`` names it in errors, ``name`` is its name when ``[job]`` gives none."""
        spec = read_job(dict(data), source=source, default_name=name)
        return cls._of(spec, source=None, source_sha256=None)

    @classmethod
    def from_job_dir(
        cls,
        job_dir: str | os.PathLike[str],
        *,
        replace: Mapping[str, Any] | None = None,
        override: Mapping[str, Any] | None = None,
    ) -> Job:
        """The job stored in a job directory's ``job.json`` (to resume it as it was;
        ``replace`` and ``override`` as in :meth:`from_toml`)."""
        job_dir = Path(job_dir)
        stored = read_job_json(job_dir)
        document = stored.get("spec")
        hidden = _hidden(document or {})
        if hidden:
            raise JobDirError(
                f"the job in {job_dir} held secrets ({', '.join(hidden)}), which are not "
                f"stored; give its job file again: agentkit job run JOB.toml --resume {job_dir}"
            )
        if isinstance(document, dict):
            document = with_changes(document, replace or {}, override or {})
        spec = read_job(document, source=str(job_dir / JOB_FILE))
        return cls._of(spec, source=stored.get("source"), source_sha256=stored.get("source_sha256"))

    @classmethod
    def _of(cls, spec: JobSpec, *, source: str | None, source_sha256: str | None) -> Job:
        return cls(
            name=spec.name,
            concurrency=spec.concurrency,
            cells=spec.cells,
            document=spec.document,
            axes=spec.axes,
            source=source,
            source_sha256=source_sha256,
        )

    def cell(self, name: str) -> CellSpec:
        """One cell, by name (a :class:`~agentkit.SpecError` names the cells there are)."""
        for c in self.cells:
            if c.name == name:
                return c
        raise SpecError(f"job {self.name!r} has no cell {name!r}; its cells: {_names(self)}")

    def _spec(self) -> JobSpec:
        """The job as job.json stores it (its budget as it is now)."""
        job_table = {**self.document.get("job", {}), "concurrency": self.concurrency}
        return JobSpec(
            name=self.name,
            concurrency=self.concurrency,
            cells=self.cells,
            document={**self.document, "job": job_table},
            axes=self.axes,
        )

    # -- planning and running ----------------------------------------------------
    def plan(
        self,
        out: str | os.PathLike[str] | None = None,
        *,
        resume: str | os.PathLike[str] | None = None,
        retry_errors: bool = False,
    ) -> dict[str, Any]:
        """What :meth:`run` would do, running nothing (``agentkit job run --dry-run``).

        Every cell's run is planned as ``AgentEnv.plan`` plans it (its
        tasksets loaded and options checked; nothing contacted, created or
        modified): the cells with their settings, run directories and how
        many rollouts are planned, finished and to run.
        """
        job_dir = _job_dir(out, resume)
        if resume is not None:
            self._check_resume(job_dir)
        prepared = self._prepare(job_dir, resume=resume is not None, retry_errors=retry_errors)
        cells = []
        for p in prepared:
            plan = _public_plan(p.cell, p.session.describe())
            cells.append(
                {
                    **p.cell.to_json(),
                    "run_dir": str(p.run_dir),
                    "resume": plan["resume"],
                    "tasks": len(plan["tasks"]),
                    "rollouts_per_task": plan["rollouts_per_task"],
                    "planned": plan["planned"],
                    "already_finished": plan["already_finished"],
                    "to_run": plan["to_run"],
                    "rerun": plan["rerun"],
                    "unsupported_warning": plan["unsupported_warning"],
                    "sandbox": plan["sandbox"],
                    "context": plan["context"],
                }
            )
        return {
            "job_dir": str(job_dir),
            "name": self.name,
            "resume": resume is not None,
            "concurrency": self.concurrency,
            "axes": self.axes,
            "planned": sum(c["planned"] for c in cells),
            "to_run": sum(c["to_run"] for c in cells),
            "cells": cells,
        }

    async def run(
        self,
        out: str | os.PathLike[str] | None = None,
        *,
        resume: str | os.PathLike[str] | None = None,
        retry_errors: bool = False,
        progress: bool | None = False,
        on_cell_start: Callable[[str, dict[str, Any]], None] | None = None,
    ) -> JobResults:
        """Run every cell into ``out`` (a new job directory), or finish the job in ``resume``.

        On resume each cell's run resumes (missing rollouts, and those that
        could not run; with ``retry_errors`` those that errored too) and a
        cell never started is started; a job whose cells differ from the
        stored ones in what changes results is refused, naming each
        difference. ``progress``: the job's display on stderr (True: rows
        redrawn on a terminal, plain lines elsewhere; None: the same, only on
        a terminal). ``on_cell_start(cell_name, info)`` is called as each cell's run
        starts, with its ``on_start`` plan (warnings, counts).
        """
        job_dir = _job_dir(out, resume)
        store = JobStore(job_dir)
        previous: dict[str, Any] | None = None
        changes: dict[str, dict[str, list[Any]]] = {}
        if resume is not None:
            if not job_dir.is_dir():
                raise JobDirError(f"{job_dir}: no such job directory")
            store.lock()
        try:
            if resume is not None:
                previous, changes = self._check_resume(job_dir)
            prepared = self._prepare(job_dir, resume=resume is not None, retry_errors=retry_errors)
            if resume is None:
                store.create()
            store.write(
                self._spec(),
                source=self.source,
                source_sha256=self.source_sha256,
                previous=previous,
                changes=changes,
            )
            display = JobProgress(JobProgress.mode_for(progress))
            for p in prepared:
                session = p.session
                done = len(session.finished)
                display.add_cell(
                    p.cell.name, planned=len(session.planned) * session.rollouts_per_task, done=done
                )
            results: dict[str, CellResult] = {}
            limiter = anyio.CapacityLimiter(self.concurrency)
            with display:
                async with anyio.create_task_group() as tg:
                    for p in prepared:
                        tg.start_soon(_run_cell, p, limiter, display, results, on_cell_start)
            return JobResults(
                job_dir=job_dir,
                name=self.name,
                cells=tuple(results[p.cell.name] for p in prepared),
            )
        finally:
            store.unlock()

    def _check_resume(
        self, job_dir: Path
    ) -> tuple[dict[str, Any], dict[str, dict[str, list[Any]]]]:
        """The stored job, and what changes; refused (naming each difference) when the
        cells differ in what changes results."""
        stored = read_job_json(job_dir)
        refusals, changes = diff_cells(stored.get("cells") or [], [c.to_json() for c in self.cells])
        if refusals:
            raise JobDirError(
                f"cannot resume {job_dir}: the job's cells differ from those it was started "
                "with; " + "; ".join(refusals)
            )
        return stored, changes

    def _prepare(self, job_dir: Path, *, resume: bool, retry_errors: bool) -> list[_Prepared]:
        """Every cell's run, planned (nothing contacted or written); an error names the cell."""
        store = JobStore(job_dir)
        prepared: list[_Prepared] = []
        limit, total = max_rollouts(), 0
        for cell in self.cells:
            run_dir = store.cell_dir(cell)
            started = resume and (run_dir / "manifest.json").is_file()
            try:
                env = AgentEnv.from_names(
                    cell.taskset,
                    cell.harness,
                    taskset_options=dict(cell.taskset_options),
                    sandbox=str(cell.settings.get("sandbox") or "local"),
                    **cell.harness_options,
                )
                options = cell.run_options(
                    concurrency=self.concurrency,
                    out=None if started else run_dir,
                    resume=run_dir if started else None,
                    retry_errors=retry_errors and started,
                )
                # the cells' runs share one process: each counts against what the
                # cells before it left of the limit, before it allocates anything
                cells = "cell" if len(prepared) == 1 else "cells"
                took = f"the job's {len(prepared)} {cells} before it plan {total:,}"
                session = prepare(env, options, budget=(limit - total, took))
            except AgentkitError as exc:
                raise CellError(cell.name, exc) from None
            prepared.append(_Prepared(cell=cell, run_dir=run_dir, session=session))
            total += (len(session.planned) + len(session.unsupported)) * session.rollouts_per_task
        return prepared


async def _run_cell(
    p: _Prepared,
    limiter: anyio.CapacityLimiter,
    display: JobProgress,
    results: dict[str, CellResult],
    on_cell_start: Callable[[str, dict[str, Any]], None] | None,
) -> None:
    name = p.cell.name

    def on_start(info: dict[str, Any]) -> None:
        display.cell_started(name, info)
        if on_cell_start is not None:
            on_cell_start(name, info)

    session = p.session
    session.options = attrs.evolve(session.options, on_start=on_start)
    try:
        outcome = await execute(session, limiter=limiter, progress=display.sink(name))
    except AgentkitError as exc:
        results[name] = CellResult(name=name, run_dir=p.run_dir, error=str(exc))
        display.cell_failed(name, str(exc))
        return
    results[name] = CellResult(name=name, run_dir=p.run_dir, results=outcome)
    display.cell_finished(name, outcome.summary)


def _public_plan(cell: CellSpec, plan: dict[str, Any]) -> dict[str, Any]:
    """A cell's run plan as ``--dry-run`` shows it: its secret matrix values ``***`` (in
    the context's sampling arguments and headers, the sandbox's options) and every
    registered secret redacted."""
    plan = Redactor([]).json(copy.deepcopy(plan))
    for key in cell.secrets:
        table, _, sub = key.partition(".")
        holder: Any = None
        if table in ("sampling_args", "headers"):
            holder = (plan.get("context") or {}).get(table)
        elif table == "sandbox_options":
            holder = (plan.get("sandbox") or {}).get("options")
        if isinstance(holder, dict) and sub in holder:
            holder[sub] = MARKER
    return plan


def _job_dir(out: str | os.PathLike[str] | None, resume: str | os.PathLike[str] | None) -> Path:
    if resume is not None and out is not None and Path(resume) != Path(out):
        raise SpecError("give either out= (a new job) or resume= (an existing job), not both")
    if resume is not None:
        return Path(resume)
    if out is None:
        raise SpecError("a job writes a job directory: give out= (or resume= to continue one)")
    return Path(out)


def default_job_dir(name: str) -> Path:
    """``jobs/<YYYYmmdd-HHMMSS>-<name>`` (``-2``, ``-3``... when it exists)."""
    return dated_dir("jobs", name)


def _names(job: Job) -> str:
    names = [c.name for c in job.cells]
    return ", ".join(names[:10]) + (f" and {len(names) - 10} more" if len(names) > 10 else "")


def _hidden(value: Any, path: str = "") -> list[str]:
    """Where a stored document holds ``***`` (a secret not stored)."""
    if isinstance(value, Mapping):
        out: list[str] = []
        for k, v in value.items():
            out += _hidden(v, f"{path}.{k}" if path else str(k))
        return out
    if isinstance(value, list):
        out = []
        for i, v in enumerate(value):
            out += _hidden(v, f"{path}[{i}]")
        return out
    return [path] if value == MARKER or (isinstance(value, str) and ":***@" in value) else []
