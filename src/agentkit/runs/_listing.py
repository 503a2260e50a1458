"""Listing the run directories of a folder: what a table of runs shows."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import attrs

from agentkit.rundir import MANIFEST, RunDirError
from agentkit.runs._reader import Run

__all__ = ["RunListing", "list_runs"]


@attrs.frozen(kw_only=True)
class RunListing:
    """One run directory in :func:`~agentkit.runs.list_runs`: what a table of runs shows."""

    path: Path
    created_at: float
    taskset: str | None
    harness: str | None
    model: str | None
    planned: int
    finished: int
    #: Rollouts that errored (those that could not run included).
    errors: int
    mean_reward: float | None
    cost: float | None
    complete: bool
    #: Rollouts that could not run (infrastructure failures: no reward, in no statistic).
    infra_errors: int = 0
    #: pass@k over the tasks, by k as a string (``{"1": 0.6, "2": 0.7}``).
    pass_at_k: dict[str, float] = attrs.field(factory=dict)
    #: Why the run's rollouts could not be read (a corrupt line of rollouts.jsonl: the
    #: file and the line), or None. Such a run is listed from its manifest alone.
    error: str | None = None


def list_runs(folder: str | os.PathLike[str] = "runs") -> list[RunListing]:
    """Every run directory directly under ``folder``, newest first.

    Reads each run's manifest and its summary.json when that is current
    (its count matches rollouts.jsonl); otherwise recomputes the counts.
    Folders that are not runs are skipped. A run whose rollouts cannot be read
    (a corrupt line) is listed from its manifest, with ``error`` saying why; the
    others are listed as usual.
    """
    root = Path(folder)
    if not root.is_dir():
        raise RunDirError(f"{root}: no such folder of runs")
    out = []
    for child in root.iterdir():
        if not (child / MANIFEST).is_file():
            continue
        try:
            run = Run(child)
        except RunDirError:
            continue
        try:
            out.append(_listing(run))
        except RunDirError as exc:
            out.append(_unreadable(run, str(exc)))
    out.sort(key=lambda r: r.created_at, reverse=True)
    return out


def _listing(run: Run) -> RunListing:
    info = run.info
    stored = run.stored_summary()
    summary = stored if stored is not None and stored.get("finished") == len(run) else run.summary()
    usage = summary.get("usage") or {}
    cost = usage.get("cost")
    return RunListing(
        **_what(run),
        planned=int(summary.get("planned") or info.planned),
        finished=int(summary.get("finished") or 0),
        errors=int(summary.get("errors") or 0),
        infra_errors=int(summary.get("infra_errors") or 0),
        mean_reward=summary.get("mean_reward"),
        cost=float(cost) if isinstance(cost, (int, float)) else None,
        complete=bool(summary.get("complete")),
        pass_at_k={str(k): float(v) for k, v in (summary.get("pass_at_k") or {}).items()},
    )


def _unreadable(run: Run, error: str) -> RunListing:
    """The listing of a run whose rollouts cannot be read: its manifest, and why."""
    return RunListing(
        **_what(run),
        planned=run.info.planned,
        finished=0,
        errors=0,
        mean_reward=None,
        cost=None,
        complete=False,
        error=error,
    )


def _what(run: Run) -> dict[str, Any]:
    """What the run is, from its manifest: the listing's first fields."""
    info = run.info
    return {
        "path": run.path,
        "created_at": info.created_at,
        "taskset": info.taskset,
        "harness": info.harness,
        "model": info.model,
    }
