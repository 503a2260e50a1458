"""Jobs: tasksets × harnesses × models × any other setting, each cell an ordinary run.

>>> import agentkit
>>> job = agentkit.Job.from_toml("job.toml")                        # doctest: +SKIP
>>> [c.name for c in job.cells]                                     # doctest: +SKIP
>>> results = await job.run(out="jobs/sweep", progress=True)        # doctest: +SKIP
>>> results = await job.run(resume="jobs/sweep")                    # doctest: +SKIP
>>> jobdir = agentkit.jobs.open("jobs/sweep")                       # doctest: +SKIP
>>> [(c.name, c.axes, c.state()) for c in jobdir.cells]             # doctest: +SKIP
>>> rows = jobdir.leaderboard()                                     # doctest: +SKIP

A job file names tasksets, harnesses and models with their settings, a
matrix of any other run setting, and rollouts per task; the cross product
(less ``[[exclude]]``, plus ``[[cells]]``) gives the cells. Each cell runs as
an ordinary run directory under ``JOBDIR/cells/<cell>/``, all of them in one
event loop with one budget of running rollouts (``concurrency``), so
``agentkit show``, ``agentkit.runs``, the viewer and ``agentkit compare``
work on a cell as on any run. ``JOBDIR/job.json`` holds the job (no secrets)
and its cells. The schema, the directory and resuming are in docs/jobs.md.
"""

from __future__ import annotations

from agentkit.jobs._cell import CellSpec
from agentkit.jobs._job import CellError, CellResult, Job, JobResults, default_job_dir
from agentkit.jobs._layout import CELLS_DIR, JOB_FILE, JOB_FORMAT_VERSION
from agentkit.jobs._reader import CellState, JobCell, JobDir, JobState, is_job_dir, open_job
from agentkit.jobs._store import JobDirError

#: ``agentkit.jobs.open(path)``: the same as :func:`open_job`.
open = open_job

__all__ = [
    "CELLS_DIR",
    "JOB_FILE",
    "JOB_FORMAT_VERSION",
    "CellError",
    "CellResult",
    "CellSpec",
    "CellState",
    "Job",
    "JobCell",
    "JobDir",
    "JobDirError",
    "JobResults",
    "JobState",
    "default_job_dir",
    "is_job_dir",
    "open",
    "open_job",
]
