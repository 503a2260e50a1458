"""The public reader of a run directory: :class:`agentkit.rundir.RunReader`, with the
run's summary recomputed from its rollouts."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from agentkit.rundir import RunReader
from agentkit.stats._summary import summarize

__all__ = ["Run", "open_run"]


def open_run(path: str | os.PathLike[str]) -> Run:
    """Open the run directory at ``path`` (reads its manifest; errors name the file)."""
    return Run(Path(path))


class Run(RunReader):
    """A run directory, read lazily. See the module doc and docs/run-directory.md."""

    def summary(self) -> dict[str, Any]:
        """The summary.json document, recomputed from the rollouts (partial runs too)."""
        records = self.records()
        info = self.info
        example = {r.task_id: r.example_id for r in records}
        planned = [(t, example.get(t, t.split(":", 1)[-1])) for t in info.task_ids]
        stored = self.stored_summary() or {}
        return summarize(
            records,
            planned,
            info.rollouts_per_task,
            threshold=float(info.options.get("pass_threshold", 1.0)),
            complete=len(records) >= info.planned,
            extra={
                "run_dir": str(self.path),
                "stopped": stored.get("stopped"),
                "repair_note": self.torn_tail,
                "unsupported_tasks": list(
                    (info.manifest.get("plan") or {}).get("unsupported") or []
                ),
            },
        )
