"""What the viewer serves: the runs and jobs in one directory, and the runs kept open.

:class:`Catalog` serves one directory: a run directory, a job directory, or
a folder whose direct children are runs and jobs. It names every run the
pages can show (a job's cell is the run ``JOB~CELL``, or just ``CELL`` when
the directory is the job itself; ``~`` is in no job's or cell's name) and
keeps one :class:`~agentkit.view._cached_run.CachedRun` per run, opened again
when its manifest changes. It never writes anything, and is not
thread-safe: the server calls it from one worker thread.

A job is read by :mod:`agentkit.jobs` (its ``job.json``, strictly, with each
cell's run directory inside the job directory) and kept until its
``job.json`` changes (:class:`ServedJob`). A job one of whose cells' run
directories leads outside the served directory (a symbolic link to
elsewhere) is refused as a whole, as :mod:`agentkit.jobs` refuses a
``run_dir`` outside the job directory: a :class:`~agentkit.jobs.JobDirError`
naming the file, the cell's field and what was expected.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import attrs

from agentkit.jobs import JOB_FILE, JobDir, JobDirError, is_job_dir, open_job
from agentkit.rundir import MANIFEST, RunDirError
from agentkit.view._cached_run import CachedRun, mtime
from agentkit.view._paths import NotFound, Refused, inside, is_safe_name

__all__ = ["JOINER", "Catalog", "ServedJob", "distinct", "serve_job"]

#: Between a job's name and a cell's in the name of a cell's run.
JOINER = "~"


@attrs.frozen
class ServedJob:
    """A job as the viewer serves it: :mod:`agentkit.jobs`' reading of it, and where each
    of its cells' runs is (resolved, inside the served directory)."""

    job: JobDir
    #: Cell name -> its run directory (as written in job.json until it exists).
    run_dirs: dict[str, Path]

    def started(self, cell: str) -> bool:
        """Whether the cell's run directory holds a run yet (its manifest was written)."""
        return (self.run_dirs[cell] / MANIFEST).is_file()


def serve_job(path: Path, root: Path) -> ServedJob:
    """The job at ``path`` (:func:`agentkit.jobs.open_job`), each cell's run directory
    inside ``root``: a :class:`~agentkit.jobs.JobDirError` when one leads outside."""
    job = open_job(path)
    run_dirs: dict[str, Path] = {}
    for i, cell in enumerate(job.cells):
        relative = cell.run_dir.relative_to(job.path).as_posix()
        try:
            run_dirs[cell.name] = inside(root, relative, base=job.path)
        except NotFound:
            run_dirs[cell.name] = cell.run_dir  # not started yet
        except Refused:
            raise JobDirError(
                f"{job.path / JOB_FILE}: cells[{i}].run_dir: expected a directory inside the "
                f"served directory, got {relative!r}, which leads outside it"
            ) from None
    return ServedJob(job, run_dirs)


class Catalog:
    """The runs and jobs in ``root`` (a run directory, a job directory or a folder of them)."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        given = Path(root)
        if not given.is_dir():
            raise RunDirError(f"{given}: no such directory of runs")
        self.root = given.resolve()
        self._runs: dict[str, CachedRun] = {}
        #: Job directories read, with their job.json's mtime when read.
        self._jobs: dict[Path, tuple[float, ServedJob]] = {}

    @property
    def single(self) -> bool:
        """The root is itself a run directory."""
        return (self.root / MANIFEST).is_file()

    @property
    def single_job(self) -> bool:
        """The root is itself a job directory."""
        return not self.single and is_job_dir(self.root)

    def _root_name(self, default: str) -> str:
        return self.root.name if is_safe_name(self.root.name) else default

    def scan(self) -> tuple[dict[str, Path], dict[str, Path]]:
        """Runs (name -> directory) and jobs (name -> directory) under the root."""
        if self.single:
            return {self._root_name("run"): self.root}, {}
        if self.single_job:
            job = self._root_name("job")
            return self._cells(self.root, prefix=""), {job: self.root}
        runs: dict[str, Path] = {}
        jobs: dict[str, Path] = {}
        try:
            children = sorted(os.scandir(self.root), key=lambda e: e.name)
        except OSError:
            return {}, {}
        for child in children:
            if not is_safe_name(child.name):
                continue
            where = Path(child.path)
            is_run, is_job = (where / MANIFEST).is_file(), is_job_dir(where)
            if not is_run and not is_job:
                continue
            try:
                path = inside(self.root, child.name)
            except (Refused, NotFound):
                continue  # a symlink to a run or job elsewhere is not served
            if is_run:
                runs[child.name] = path
            else:
                jobs[child.name] = path
                runs.update(self._cells(path, prefix=child.name + JOINER))
        return runs, jobs

    def _cells(self, path: Path, *, prefix: str) -> dict[str, Path]:
        """The started cells' runs of the job at ``path``, named ``prefix + cell``."""
        try:
            found = self.job_dir(path)
        except JobDirError:
            return {}
        return {prefix + c: where for c, where in found.run_dirs.items() if found.started(c)}

    def job_dir(self, path: Path) -> ServedJob:
        """The job at ``path`` (read again when its job.json changed), or a
        :class:`~agentkit.jobs.JobDirError` naming what is wrong with it."""
        changed = mtime(path / JOB_FILE)
        cached = self._jobs.get(path)
        if cached is None or cached[0] != changed:
            cached = self._jobs[path] = (changed, serve_job(path, self.root))
        return cached[1]

    def run_dirs(self) -> dict[str, Path]:
        """Run name -> directory: the root itself, or each child holding a manifest.json, and
        the started cells of the jobs there (``JOB~CELL``; just ``CELL`` when the root is a
        job)."""
        return self.scan()[0]

    def job_dirs(self) -> dict[str, Path]:
        """Job name -> directory: the root itself, or each child holding a job.json."""
        return self.scan()[1]

    def cell_prefix(self, job: str) -> str:
        """What the names of the job's cells' runs start with."""
        return "" if self.single_job else job + JOINER

    def cell_of(self, run: str) -> tuple[str | None, str | None]:
        """``(job, cell)`` of a cell's run; ``(None, None)`` for a run of no job."""
        if self.single_job:
            return self._root_name("job"), run
        job, sep, cell = run.partition(JOINER)
        return (job, cell) if sep else (None, None)

    def job(self, name: str) -> ServedJob:
        """The job called ``name``, or NotFound (saying what is wrong with its job.json)."""
        path = self.job_dirs().get(name) if is_safe_name(name) else None
        if path is None:
            raise NotFound(f"no job {name!r} in {self.root}")
        try:
            return self.job_dir(path)
        except JobDirError as exc:
            raise NotFound(str(exc)) from None

    def run(self, name: str, *, refresh: bool = True) -> CachedRun:
        """The run called ``name`` (its new lines indexed unless ``refresh`` is false), or
        NotFound."""
        if not all(is_safe_name(part) for part in name.split(JOINER)) or name.count(JOINER) > 1:
            raise NotFound(f"no run {name!r}")
        path = self.run_dirs().get(name)
        if path is None:
            self._runs.pop(name, None)
            raise NotFound(f"no run {name!r} in {self.root}")
        cached = self._runs.get(name)
        if cached is None or cached.path != path or cached.manifest_mtime != mtime(path / MANIFEST):
            try:
                cached = self._runs[name] = CachedRun(path)
            except RunDirError as exc:
                raise NotFound(str(exc)) from None
        if refresh:
            cached.refresh()
        return cached


def distinct(names: Sequence[str]) -> list[str]:
    """Run names as a URL lists them: in order, each once, blanks left out."""
    return list(dict.fromkeys(n for n in names if n))
