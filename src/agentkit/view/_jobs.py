"""Jobs as the viewer sees them: a job directory and the viewer's names of its cells' runs.

A job directory (``JOBDIR/job.json``, each cell an ordinary run directory
under ``JOBDIR/cells/``; the format ``agentkit job run`` writes, see
docs/jobs.md) is read here and kept until its ``job.json`` changes: its
``kind``, ``format_version`` (1), ``name``, ``created_at``, ``concurrency``,
``axes`` and each cell's ``name``, ``axes`` and ``run_dir``. A cell whose
``run_dir`` leads outside the served directory is listed, not served. In
the viewer a cell's run is named ``JOB~CELL`` (``~`` is in no job or cell
name), or just ``CELL`` when the served directory is the job itself, so
that every page and API of a run works on a cell unchanged.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs

from agentkit._rundir import MANIFEST, RunDirError
from agentkit.jobs._layout import JOB_FILE, JOB_KIND, READABLE_FORMAT_VERSIONS
from agentkit.jobs._store import JobDirError, read_job_json
from agentkit.runs._live import lock_held
from agentkit.view._paths import NotFound, Refused, inside, is_safe_name

__all__ = [
    "JOB_FILE",
    "JOB_KIND",
    "JOINER",
    "READABLE_FORMAT_VERSIONS",
    "JobCell",
    "JobDir",
    "is_job_dir",
    "open_job",
]

#: Between a job's name and a cell's in the name of a cell's run.
JOINER = "~"


@attrs.frozen(kw_only=True)
class JobCell:
    """One cell of a job: its name, where it sits on the job's axes, its run directory."""

    name: str
    run_dir: Path
    axes: dict[str, str]
    #: Its run directory leads outside the served directory (a symlink): not served.
    outside: bool = False

    @property
    def started(self) -> bool:
        """Whether its run directory holds a run yet (and is served)."""
        return not self.outside and (self.run_dir / MANIFEST).is_file()


class JobDir:
    """A job directory: ``job.json`` read, its cells' run directories inside ``root``."""

    def __init__(self, path: Path, root: Path) -> None:
        self.path = path
        try:  # read and checked as agentkit.jobs reads it
            data = read_job_json(path)
        except JobDirError as exc:
            raise RunDirError(str(exc)) from None
        self.data: dict[str, Any] = data
        self.cells: list[JobCell] = []
        for entry in data.get("cells") or []:
            if not isinstance(entry, dict):
                continue
            name = str(entry.get("name"))
            run_dir = str(entry.get("run_dir") or f"cells/{name}")
            if not is_safe_name(name) or JOINER in name:
                continue
            outside = False
            try:
                where = inside(root, run_dir, base=path)
            except NotFound:
                where = path / run_dir  # not started yet
            except Refused:
                where, outside = path / run_dir, True  # a cell's run elsewhere is not served
            axes = entry.get("axes") or {}
            self.cells.append(
                JobCell(
                    name=name,
                    run_dir=where,
                    axes={str(k): str(v) for k, v in axes.items()},
                    outside=outside,
                )
            )

    @property
    def name(self) -> str:
        """The job's name."""
        return str(self.data.get("name") or self.path.name)

    @property
    def created_at(self) -> float | None:
        """When the job started (Unix time)."""
        value = self.data.get("created_at")
        return float(value) if isinstance(value, (int, float)) else None

    @property
    def concurrency(self) -> int | None:
        """The budget of running rollouts its cells share."""
        value = self.data.get("concurrency")
        return value if isinstance(value, int) else None

    @property
    def axes(self) -> dict[str, list[str]]:
        """The job's axes and their labels, in order."""
        return {str(k): [str(x) for x in v] for k, v in (self.data.get("axes") or {}).items()}

    def running(self) -> bool:
        """Whether ``agentkit job run`` holds the job's lock now (false when that cannot
        be known, as for ``agentkit.jobs``' reader; its cells' runs still say whether
        they run)."""
        return bool(lock_held(self.path / ".lock"))


def is_job_dir(path: Path) -> bool:
    """Whether ``path`` holds a ``job.json``."""
    return (path / JOB_FILE).is_file()


def open_job(path: Path, root: Path) -> JobDir:
    """The job directory at ``path`` inside the served ``root``."""
    return JobDir(path, root)
