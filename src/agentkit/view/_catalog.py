"""What the viewer serves: the runs and jobs in one directory, and the runs kept open.

:class:`Catalog` serves one directory: a run directory, a job directory, or
a folder whose direct children are runs and jobs. It names every run the
pages can show (a job's cell is the run ``JOB~CELL``, or just ``CELL`` when
the directory is the job itself) and keeps one
:class:`~agentkit.view._cached_run.CachedRun` per run, opened again when its
manifest changes. It never writes anything, and is not thread-safe: the
server calls it from one worker thread.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from agentkit._rundir import MANIFEST, RunDirError
from agentkit.view._cached_run import CachedRun, mtime
from agentkit.view._jobs import JOB_FILE, JOINER, JobDir, is_job_dir, open_job
from agentkit.view._paths import NotFound, Refused, inside, is_safe_name

__all__ = ["JOINER", "Catalog", "distinct"]


class Catalog:
    """The runs and jobs in ``root`` (a run directory, a job directory or a folder of them)."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        given = Path(root)
        if not given.is_dir():
            raise RunDirError(f"{given}: no such directory of runs")
        self.root = given.resolve()
        self._runs: dict[str, CachedRun] = {}
        #: Job directories read, with their job.json's mtime when read.
        self._jobs: dict[Path, tuple[float, JobDir]] = {}

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
            return self._cells(job, self.root, prefix=""), {job: self.root}
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
                runs.update(self._cells(child.name, path, prefix=child.name + JOINER))
        return runs, jobs

    def _cells(self, job: str, path: Path, *, prefix: str) -> dict[str, Path]:
        """The started cells' runs of the job at ``path``, named ``prefix + cell``."""
        try:
            found = self.job_dir(job, path)
        except RunDirError:
            return {}
        return {prefix + c.name: c.run_dir for c in found.cells if c.started}

    def job_dir(self, name: str, path: Path) -> JobDir:
        """The job at ``path`` (read again when its job.json changed)."""
        changed = mtime(path / JOB_FILE)
        cached = self._jobs.get(path)
        if cached is None or cached[0] != changed:
            cached = self._jobs[path] = (changed, open_job(path, self.root))
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

    def job(self, name: str) -> JobDir:
        """The job called ``name``, or NotFound."""
        path = self.job_dirs().get(name) if is_safe_name(name) else None
        if path is None:
            raise NotFound(f"no job {name!r} in {self.root}")
        try:
            return self.job_dir(name, path)
        except RunDirError as exc:
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
