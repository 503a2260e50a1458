"""The job directory's layout: its file names and format version, in one place.

The writer (:mod:`agentkit.jobs._store`) and the reader
(:mod:`agentkit.jobs._reader`) both take the layout from here; the format
itself is documented in ``docs/jobs.md``::

    JOBDIR/
    ├── job.json          what the job is: its spec (no secrets) and its cells
    ├── .lock             held while ``agentkit job run`` runs the job
    └── cells/<cell>/     each cell an ordinary run directory
"""

from __future__ import annotations

__all__ = [
    "CELLS_DIR",
    "JOB_FILE",
    "JOB_FORMAT_VERSION",
    "JOB_KIND",
    "LOCK",
    "READABLE_FORMAT_VERSIONS",
]

#: ``job.json``: the job's spec and its cells.
JOB_FILE = "job.json"
#: ``cells/<cell name>/``: one run directory per cell.
CELLS_DIR = "cells"
#: Held (``flock``) by the process running the job.
LOCK = ".lock"
#: ``job.json``'s ``kind``.
JOB_KIND = "agentkit.job"
#: Version of the ``job.json`` format this agentkit writes.
JOB_FORMAT_VERSION = 1
#: Versions this agentkit reads.
READABLE_FORMAT_VERSIONS: tuple[int, ...] = (1,)
