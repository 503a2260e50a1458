"""The rows the pages list: a run's and a job's (the runs page), a rollout's (a run's page).

A run's row (:func:`run_listing`) has its taskset, harness, model, progress,
state, mean reward, pass@k, errors, tokens and cost; a run no process
writes, whose summary counts every line, is listed from the summary alone
(:func:`settled_listing`, which a 100,000-rollout job's page relies on). A
job's row (:func:`job_listing`) sums its cells' rows and names its best cell.
A rollout's row (:func:`rollout_row`) is its line in a run's rollouts table.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from agentkit.jobs import JobDir
from agentkit.runs import Rollout
from agentkit.view._cached_run import CachedRun
from agentkit.view._catalog import Catalog, ServedJob

__all__ = ["job_listing", "rollout_row", "run_listing", "settled_listing"]


def run_listing(catalog: Catalog, name: str, cached: CachedRun) -> dict[str, Any]:
    """The run's row on the runs page (a cell's with its ``job`` and ``cell``)."""
    state = cached.run.state()
    summary = cached.summary(running=state == "running")
    running = len(cached.run.live_rollouts()) if state == "running" else 0
    return _row(catalog, name, cached, summary, len(cached.run), state, running)


def settled_listing(
    catalog: Catalog, name: str, cached: CachedRun, stored: dict[str, Any]
) -> dict[str, Any]:
    """:func:`run_listing` of a run no process writes, from its current summary alone: its
    state as :meth:`agentkit.runs.Run.state` gives it, where the finished rollouts are the
    summary's count (it counts every line)."""
    finished = int(stored.get("finished") or 0)
    if finished >= cached.run.info.planned:
        state = "incomplete" if int(stored.get("infra_errors") or 0) else "complete"
    else:
        state = "stopped" if stored.get("stopped") else "interrupted"
    return _row(catalog, name, cached, stored, finished, state, 0)


def _row(
    catalog: Catalog,
    name: str,
    cached: CachedRun,
    summary: Mapping[str, Any],
    finished: int,
    state: str,
    running: int,
) -> dict[str, Any]:
    """A run's row from its summary (``summary.json``'s fields), ``finished`` rollouts,
    ``state`` and ``running`` rollouts."""
    info = cached.run.info
    job, cell = catalog.cell_of(name)
    usage = summary.get("usage") or {}
    return {
        "name": name,
        "job": job,
        "cell": cell,
        "created_at": info.created_at,
        "taskset": info.taskset,
        "harness": info.harness,
        "model": info.model,
        "planned": int(summary.get("planned") or info.planned),
        "finished": finished,
        "errors": int(summary.get("errors") or 0),
        "infra_errors": int(summary.get("infra_errors") or 0),
        "mean_reward": summary.get("mean_reward"),
        "pass_at_k": summary.get("pass_at_k") or {},
        "cost": usage.get("cost") if isinstance(usage.get("cost"), (int, float)) else None,
        "tokens": int((usage.get("input_tokens") or 0) + (usage.get("output_tokens") or 0)),
        "state": state,
        "running": running,
    }


def job_listing(
    name: str, served: ServedJob, cells: Mapping[str, dict[str, Any] | None]
) -> dict[str, Any]:
    """A job's row: its cells' progress, errors and cost summed, its best cell. ``cells``:
    each cell's run row, None for a cell not started (or that cannot be read)."""
    started = [x for x in cells.values() if x is not None]
    costs = [x["cost"] for x in started if x["cost"] is not None]
    scored = [x for x in started if x["mean_reward"] is not None]
    best = max(scored, key=lambda x: x["mean_reward"], default=None)
    job = served.job
    return {
        "name": name,
        "job_name": job.name,
        "created_at": job.created_at,
        "state": _job_state(job, started, len(job.cells)),
        "cells": len(job.cells),
        "started": len(started),
        "axes": job.axes,
        "planned": sum(x["planned"] for x in started),
        "finished": sum(x["finished"] for x in started),
        "errors": sum(x["errors"] for x in started),
        "infra_errors": sum(x["infra_errors"] for x in started),
        "cost": math.fsum(costs) if costs else None,
        "running": sum(x["running"] for x in started),
        "best": None if best is None else _best(best),
    }


def _job_state(job: JobDir, started: list[dict[str, Any]], cells: int) -> str:
    """``running`` (its process holds the job's lock, or a cell runs), ``not started``,
    ``complete`` (every cell complete) or ``incomplete``."""
    if job.running() or any(x["state"] == "running" for x in started):
        return "running"
    if not started:
        return "not started"
    if len(started) == cells and all(x["state"] == "complete" for x in started):
        return "complete"
    return "incomplete"


def _best(listing: dict[str, Any]) -> dict[str, Any]:
    return {"run": listing["name"], "cell": listing["cell"], "mean_reward": listing["mean_reward"]}


def rollout_row(r: Rollout) -> dict[str, Any]:
    """A finished rollout's row in a run's rollouts table."""
    u = r.usage
    return {
        "rollout_id": r.rollout_id,
        "task_id": r.task_id,
        "example_id": r.example_id,
        "rollout_index": r.rollout_index,
        "group": r.group,
        "status": r.status,
        "reward": r.reward,
        "passed": r.passed,
        "ok": r.ok,
        "error_kind": r.error_kind,
        "reason": r.reason,
        "infrastructure": r.infrastructure,
        "turns": u.requests,
        "input_tokens": u.input_tokens,
        "output_tokens": u.output_tokens,
        "tokens": u.input_tokens + u.output_tokens,
        "cost": r.cost,
        "duration_s": r.timings.duration_s,
        "finished_at": r.timings.finished_at,
        "attempts": r.attempts,
        "rewards": r.rewards,
    }
