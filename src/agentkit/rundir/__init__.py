"""The run directory's format: its layout, records, writer and reader, in one place.

A run directory (``docs/run-directory.md``) is written by ``AgentEnv`` and
``agentkit run`` and read by ``agentkit show``, ``agentkit export``, the viewer,
the statistics and notebooks. Everything that reads or writes one does it
through this package: the file names and schema versions, the rollout record,
the writer and the readers.
"""

from __future__ import annotations

from agentkit.rundir._layout import (
    ARTIFACTS_DIR,
    CALLS_DIR,
    EVENTS_DIR,
    GROUPS,
    IMAGES_DIR,
    LIVE_DIR,
    LOCK,
    MANIFEST,
    READABLE_SCHEMA_VERSIONS,
    ROLLOUTS,
    RUN_SCHEMA_VERSION,
    SANDBOX_DIR,
    SUMMARY,
    TASKS,
    RunDirError,
)

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
]
