"""Read run directories: the public reader for notebooks, ``agentkit show`` and viewers.

>>> import agentkit.runs
>>> run = agentkit.runs.open("runs/20260101-120000-chat")        # doctest: +SKIP
>>> run.info.model, len(run)                                      # doctest: +SKIP
>>> for r in run.rollouts(0, 50, failed=True):                    # doctest: +SKIP
...     print(r.rollout_id, r.reason)
>>> run.rollout("add-1").messages, run.steps("add-1")             # doctest: +SKIP
>>> run.calls("add-1")             # the model calls, as the proxy recorded them  # doctest: +SKIP
>>> agentkit.runs.list_runs("runs")                               # doctest: +SKIP
>>> run.refresh(), run.state(), run.live_rollouts()               # doctest: +SKIP

Everything is read lazily: opening reads the manifest, listing indexes line
offsets and parses only the rollouts asked for (their small fields; a
transcript is read when used), so a run of 10,000 rollouts lists a page in
milliseconds. The on-disk format is documented, with its versions, in
docs/run-directory.md.
"""

from __future__ import annotations

from agentkit._calls import ModelCall
from agentkit.rundir import (
    LiveRollout,
    Metric,
    Rollout,
    RunInfo,
    RunState,
    Step,
    TaskInfo,
    Timings,
)
from agentkit.runs._listing import RunListing, list_runs
from agentkit.runs._reader import Run, open_run

#: ``agentkit.runs.open(path)``: the same as :func:`open_run`.
open = open_run

__all__ = [
    "LiveRollout",
    "Metric",
    "ModelCall",
    "Rollout",
    "Run",
    "RunInfo",
    "RunListing",
    "RunState",
    "Step",
    "TaskInfo",
    "Timings",
    "list_runs",
    "open",
    "open_run",
]
