"""A run's page (``/run/RUN``): its header, its rollouts and tasks × rollouts, live.

``/api/run/RUN`` has the header, options, rubric and metrics;
``/api/run/RUN/rollouts`` one page of its rollouts, filtered and sorted, with
the rollouts running now; ``/api/run/RUN/tasks`` one page of the tasks ×
rollouts grid; ``/api/run/RUN/stream`` says when the run changed.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping
from typing import Any

from aiohttp import web

from agentkit.rundir import ROLLOUTS, RunDirError
from agentkit.runs import Rollout
from agentkit.view._cached_run import CachedRun, size
from agentkit.view._catalog import Catalog
from agentkit.view._http import CATALOG, changes_stream, in_worker, json_response
from agentkit.view._listing import rollout_row, run_listing
from agentkit.view._paths import NotFound

__all__ = ["MAX_PAGE", "RUN_POLL_S", "rollouts", "routes", "run", "run_snapshot", "tasks"]

#: Rows per page at most.
MAX_PAGE = 500
#: How often the stream looks at the run's files (seconds).
RUN_POLL_S = 0.5

#: Query parameters that filter the rollout table.
_FILTERS = ("status", "failed", "errored", "could_not_run", "error_kind", "task", "metric")

#: Sortable columns: the value a rollout sorts by (None sorts last either way).
_SORT_KEYS: dict[str, Callable[[Rollout], Any]] = {
    "task": lambda r: (r.group, r.rollout_index),
    "reward": lambda r: r.reward,
    "status": lambda r: r.status,
    "error_kind": lambda r: r.error_kind,
    "turns": lambda r: r.usage.requests,
    "tokens": lambda r: r.usage.input_tokens + r.usage.output_tokens,
    "cost": lambda r: r.cost,
    "duration": lambda r: r.timings.duration_s,
    "finished": lambda r: r.timings.finished_at,
}

routes = web.RouteTableDef()


def run(catalog: Catalog, name: str) -> dict[str, Any]:
    """A run's header, options, rubric and metrics."""
    cached = catalog.run(name)
    info = cached.run.info
    m = info.manifest
    state = cached.run.state()
    summary = cached.summary(running=state == "running")
    stored = cached.run.stored_summary() or {}
    means = summary.get("metrics") or {}
    return {
        **run_listing(catalog, name, cached),
        "path": str(cached.path),
        "state": state,
        "resumed_at": info.resumed_at,
        "rollouts_per_task": info.rollouts_per_task,
        "tasks": len(info.task_ids),
        "summary": {k: v for k, v in summary.items() if k != "tasks"},
        "stopped": stored.get("stopped"),
        "interrupted": bool(stored.get("interrupted")) and state != "running",
        "torn_tail": cached.run.torn_tail,
        "metrics": [{**x, "mean": means.get(x["name"])} for x in cached.metrics()],
        "rubric": m.get("rubric"),
        "options": {
            "taskset": m.get("taskset"),
            "harness": m.get("harness"),
            "context": m.get("context"),
            "plan": {k: v for k, v in (m.get("plan") or {}).items() if k != "task_ids"},
            "sandbox": m.get("sandbox"),
            "sandbox_warning": m.get("sandbox_warning"),
            "options": m.get("options"),
            "pricing": m.get("pricing"),
            "resumes": m.get("resumes"),
            "agentkit_version": m.get("agentkit_version"),
            "python": m.get("python"),
            "platform": m.get("platform"),
            "plugins": m.get("plugins"),
        },
        "error_kinds": sorted((summary.get("error_kinds") or {}).keys()),
    }


def rollouts(catalog: Catalog, name: str, params: Mapping[str, str]) -> dict[str, Any]:
    """One page of the run's rollouts, filtered and sorted, and the rollouts running now."""
    cached = catalog.run(name)
    offset = max(0, _int(params.get("offset"), 0))
    limit = min(MAX_PAGE, max(1, _int(params.get("limit"), 50)))
    state = cached.run.state()
    sort, desc = params.get("sort") or "task", bool(params.get("desc"))
    if sort == "task" and not any(params.get(k) for k in _FILTERS):
        # task order from the index alone: only the page's lines are parsed
        ids = cached.run.rollout_ids(order="task")
        if desc:
            ids.reverse()
        total = len(ids)
        page = [cached.run.rollout(r) for r in ids[offset : offset + limit]]
    else:
        rows = _sorted(_filtered(cached, params), sort, desc)
        total = len(rows)
        page = rows[offset : offset + limit]
    live = [
        {
            "rollout_id": x.rollout_id,
            "task_id": x.task_id,
            "rollout_index": x.rollout_index,
            "attempt": x.attempt,
            "started_at": x.started_at,
            "events": x.events,
            "status": "running" if state == "running" else "interrupted",
        }
        for x in cached.run.live_rollouts()
        if _live_matches(x.task_id, params)
    ]
    return {
        "run": name,
        "state": state,
        "total": total,
        "finished": len(cached.run),
        "planned": cached.run.info.planned,
        "offset": offset,
        "limit": limit,
        "rows": [rollout_row(r) for r in page],
        "live": live,
    }


def _filtered(cached: CachedRun, params: Mapping[str, str]) -> list[Rollout]:
    """The finished rollouts the filters keep, in task order."""
    status = params.get("status") or None
    task = (params.get("task") or "").strip()
    failed = params.get("failed") in ("1", "true")
    errored = params.get("errored") in ("1", "true")
    could_not_run = params.get("could_not_run") in ("1", "true")
    kind = params.get("error_kind") or None
    metric = params.get("metric") or None
    op = params.get("op") or "lt"
    value = _float(params.get("value"))
    if task and task in cached.run.info.task_ids:
        rows = [cached.run.rollout(r) for r in cached.run.rollout_ids(task_id=task)]
    elif task:
        rows = [r for r in cached.rows() if task in r.task_id]
    else:
        rows = cached.rows()
    out = []
    for r in rows:
        if status is not None and r.status != status:
            continue
        # a rollout that could not run is no answer: neither passed nor failed
        if failed and (r.infrastructure or (r.ok and r.passed is not False)):
            continue
        if errored and (r.infrastructure or r.ok):
            continue
        if could_not_run and not r.infrastructure:
            continue
        if kind is not None and r.error_kind != kind:
            continue
        if metric is not None:
            v = r.rewards.get(metric)
            if not isinstance(v, (int, float)):
                continue
            if value is not None and not _compare(float(v), op, value):
                continue
        out.append(r)
    return out


def tasks(catalog: Catalog, name: str, params: Mapping[str, str]) -> dict[str, Any]:
    """One page of the tasks × rollouts grid: per task its statistics and rollouts."""
    cached = catalog.run(name)
    offset = max(0, _int(params.get("offset"), 0))
    limit = min(MAX_PAGE, max(1, _int(params.get("limit"), 50)))
    state = cached.run.state()
    summary = cached.summary(running=state == "running")
    stats = {t["task_id"]: t for t in summary.get("tasks") or []}
    task_ids = cached.run.info.task_ids or sorted(cached.by_task())
    query = (params.get("task") or "").strip()
    if query:
        task_ids = [t for t in task_ids if query in t]
    live: dict[str, list[Any]] = {}
    for x in cached.run.live_rollouts():
        live.setdefault(x.task_id, []).append(x)
    per_task = cached.run.info.rollouts_per_task
    page = []
    for task_id in task_ids[offset : offset + limit]:
        done = {r.rollout_index: r for r in cached.task_rollouts(task_id)}
        running = {x.rollout_index: x for x in live.get(task_id, [])}
        t = stats.get(task_id) or {}
        page.append(
            {
                "task_id": task_id,
                "rollouts": len(done),
                "planned": per_task,
                "mean_reward": t.get("mean_reward"),
                "pass_at_k": t.get("pass_at_k") or {},
                "errors": t.get("errors", 0),
                "infra_errors": t.get("infra_errors", 0),
                "cells": [_cell(i, done, running, state) for i in range(per_task)],
            }
        )
    return {"run": name, "total": len(task_ids), "offset": offset, "limit": limit, "tasks": page}


def _cell(
    index: int, done: Mapping[int, Rollout], running: Mapping[int, Any], state: str
) -> dict[str, Any]:
    """Rollout ``index`` of a task in the grid: finished, running (or interrupted), or not
    yet."""
    if index in done:
        r = done[index]
        return {
            "rollout_id": r.rollout_id,
            "index": index,
            "status": r.status,
            "reward": r.reward,
            "passed": r.passed,
            "ok": r.ok,
            "infrastructure": r.infrastructure,
        }
    if index in running:
        return {
            "rollout_id": running[index].rollout_id,
            "index": index,
            "status": "running" if state == "running" else "interrupted",
        }
    return {"index": index, "status": "pending"}


def run_snapshot(catalog: Catalog, name: str) -> dict[str, Any]:
    """What changes on a run page (for live updates): counts, state, running rollouts."""
    cached = catalog.run(name)
    return {
        "finished": len(cached.run),
        "size": size(cached.path / ROLLOUTS),
        "planned": cached.run.info.planned,
        "state": cached.run.state(),
        "live": [[x.rollout_id, x.events, x.attempt] for x in cached.run.live_rollouts()],
    }


def _sorted(rows: list[Rollout], sort: str | None, desc: bool) -> list[Rollout]:
    """Rows (in task order) sorted by a column, ties kept in task order, None last."""
    key = _SORT_KEYS.get(sort or "task", _SORT_KEYS["task"])
    if (sort or "task") == "task" and not desc:
        return rows
    valued = [(key(r), r) for r in rows]
    known = [x for x in valued if x[0] is not None]
    known.sort(key=lambda x: x[0], reverse=desc)
    return [r for _, r in known] + [r for v, r in valued if v is None]


def _live_matches(task_id: str, params: Mapping[str, str]) -> bool:
    """Whether a running rollout of ``task_id`` is listed under the filters."""
    if params.get("status") not in (None, "", "running"):
        return False
    if any(params.get(k) in ("1", "true") for k in ("failed", "errored", "could_not_run")):
        return False
    if params.get("metric") or params.get("error_kind"):
        return False
    task = (params.get("task") or "").strip()
    return not task or task in task_id


def _compare(v: float, op: str, value: float) -> bool:
    if op == "ge":
        return v >= value
    if op == "gt":
        return v > value
    if op == "le":
        return v <= value
    if op == "eq":
        return math.isclose(v, value)
    return v < value


def _int(text: str | None, default: int) -> int:
    try:
        return int(text) if text not in (None, "") else default
    except ValueError:
        return default


def _float(text: str | None) -> float | None:
    try:
        return float(text) if text not in (None, "") else None
    except ValueError:
        return None


@routes.get("/api/run/{run}")
async def _run(request: web.Request) -> web.StreamResponse:
    catalog = request.app[CATALOG]
    return json_response(await in_worker(request, run, catalog, request.match_info["run"]))


@routes.get("/api/run/{run}/rollouts")
async def _rollouts(request: web.Request) -> web.StreamResponse:
    catalog, params = request.app[CATALOG], dict(request.query)
    name = request.match_info["run"]
    return json_response(await in_worker(request, rollouts, catalog, name, params))


@routes.get("/api/run/{run}/tasks")
async def _tasks(request: web.Request) -> web.StreamResponse:
    catalog, params = request.app[CATALOG], dict(request.query)
    name = request.match_info["run"]
    return json_response(await in_worker(request, tasks, catalog, name, params))


@routes.get("/api/run/{run}/stream")
async def _run_stream(request: web.Request) -> web.StreamResponse:
    catalog = request.app[CATALOG]
    name = request.match_info["run"]
    await in_worker(request, catalog.run, name)  # 404 before the stream opens
    read = functools.partial(run_snapshot, catalog, name)
    return await changes_stream(
        request, RUN_POLL_S, read, "run", lambda last, now: now, gone=(NotFound, RunDirError)
    )
