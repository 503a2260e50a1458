"""The run directory's format: its layout, records, writer and reader, in one place.

A run directory (``docs/run-directory.md``) is written by ``AgentEnv`` and
``agentkit run`` and read by ``agentkit show``, ``agentkit export``, the viewer,
the statistics and notebooks. Everything that reads or writes one does it
through this package: the file names and schema versions, the rollout record,
the writer and the readers.
"""

from __future__ import annotations

from agentkit.rundir._json import to_utf8, write_json_atomic
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
    dated_dir,
)
from agentkit.rundir._lines import load_groups, load_rollouts
from agentkit.rundir._live import lock_held
from agentkit.rundir._manifest import read_manifest, run_id_of
from agentkit.rundir._records import PREFIX_STATUS, RolloutRecord, branch_point_id
from agentkit.rundir._rollout_calls import ForeignCallsError, read_rollout_calls
from agentkit.rundir._run import RunReader
from agentkit.rundir._store import RunDirWriteError, RunStore
from agentkit.rundir._types import (
    LiveRollout,
    Metric,
    Rollout,
    RunInfo,
    RunState,
    Step,
    TaskInfo,
    Timings,
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
    "PREFIX_STATUS",
    "READABLE_SCHEMA_VERSIONS",
    "ROLLOUTS",
    "RUN_SCHEMA_VERSION",
    "SANDBOX_DIR",
    "SUMMARY",
    "TASKS",
    "ForeignCallsError",
    "LiveRollout",
    "Metric",
    "Rollout",
    "RolloutRecord",
    "RunDirError",
    "RunDirWriteError",
    "RunInfo",
    "RunReader",
    "RunState",
    "RunStore",
    "Step",
    "TaskInfo",
    "Timings",
    "branch_point_id",
    "dated_dir",
    "load_groups",
    "load_rollouts",
    "lock_held",
    "read_manifest",
    "read_rollout_calls",
    "run_id_of",
    "to_utf8",
    "write_json_atomic",
]
