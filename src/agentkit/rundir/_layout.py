"""The run directory's layout: its file names and schema versions, in one place.

The writer (the run store, the live logs) and every reader take the layout from
here; the format itself is documented in ``docs/run-directory.md``.
"""

from __future__ import annotations

import time
from pathlib import Path

from agentkit._errors import RunDirError

__all__ = [
    "ARTIFACTS_DIR",
    "CALLS_DIR",
    "EVENTS_DIR",
    "GROUPS",
    "IMAGES_DIR",
    "LIVE_DIR",
    "LOCK",
    "MANIFEST",
    "READABLE_SCHEMA_VERSIONS",
    "ROLLOUTS",
    "RUN_SCHEMA_VERSION",
    "SANDBOX_DIR",
    "SUMMARY",
    "TASKS",
    "RunDirError",
    "dated_dir",
]

#: Version of the rollouts.jsonl / groups.jsonl / summary.json / manifest.json schema.
#: 2: a rollout id may have several lines in rollouts.jsonl (the last wins: a
#: rollout run again on resume), a task several lines in groups.jsonl (the
#: last wins), tasks.jsonl, and the context's headers, limits and pricing.
RUN_SCHEMA_VERSION = 2
#: Versions this agentkit reads (version 1 is version 2 without those additions).
READABLE_SCHEMA_VERSIONS: tuple[int, ...] = (1, 2)

#: What was run, with which settings.
MANIFEST = "manifest.json"
#: One line per finished rollout (the last line of a rollout id wins).
ROLLOUTS = "rollouts.jsonl"
#: One line per completed group (the last line of a task wins).
GROUPS = "groups.jsonl"
#: The run's summary, written at the end of each session.
SUMMARY = "summary.json"
#: The run's plan: one line per task.
TASKS = "tasks.jsonl"
#: ``events/<rollout_id>.jsonl``: a finished rollout's events.
EVENTS_DIR = "events"
#: ``calls/<rollout_id>.jsonl``: a finished rollout's model calls (``agentkit._calls.ModelCall``).
CALLS_DIR = "calls"
#: ``artifacts/<rollout_id>/``: the files a rollout kept.
ARTIFACTS_DIR = "artifacts"
#: ``rollouts/<rollout_id>/``: a rollout's sandbox directory.
SANDBOX_DIR = "rollouts"
#: ``live/<rollout_id>.jsonl``: a running rollout's events (see ``env/_livelog.py``).
LIVE_DIR = "live"
#: ``images/``: the build logs of the tasks' images.
IMAGES_DIR = "images"
#: The lock file the writing process holds.
LOCK = ".lock"


def dated_dir(parent: str, name: str) -> Path:
    """A new directory's default path: ``<parent>/<YYYYmmdd-HHMMSS>-<name>``, with ``-2``,
    ``-3``... when that exists (a run's ``runs/...``, a job's ``jobs/...``)."""
    base = Path(parent) / f"{time.strftime('%Y%m%d-%H%M%S')}-{name}"
    path, n = base, 1
    while path.exists():
        n += 1
        path = base.with_name(f"{base.name}-{n}")
    return path
