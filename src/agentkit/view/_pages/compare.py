"""Runs compared (``/compare/A/B/...``): leaderboard, each against a baseline, heat map.

``/api/compare/A/B/C?baseline=B`` has the runs' rows, their leaderboard
with intervals, each run against the baseline (the first run unless named)
paired on the tasks both scored, the tasks × runs heat map and, for two
runs, which tasks one passes and the other does not. Every number comes from
:mod:`agentkit.stats` through :mod:`agentkit.view._stats`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from aiohttp import web

from agentkit.view._cached_run import CachedRun
from agentkit.view._catalog import Catalog, distinct
from agentkit.view._http import CATALOG, in_worker, json_response
from agentkit.view._listing import run_listing
from agentkit.view._paths import NotFound
from agentkit.view._stats import Scored, against, heatmap, leaderboard

__all__ = ["compare", "routes"]

routes = web.RouteTableDef()


def compare(catalog: Catalog, names: Sequence[str], baseline: str | None = None) -> dict[str, Any]:
    """Two runs or more: their leaderboard with intervals, each against ``baseline`` (the
    first run unless named) paired on the tasks both scored, the tasks × runs heat map; for
    two runs, also which tasks one passes and the other does not."""
    names = distinct(names)
    if len(names) < 2:
        raise NotFound("a comparison needs two runs or more: /compare/RUN_A/RUN_B/...")
    base = baseline or names[0]
    if base not in names:
        raise NotFound(f"the baseline {base!r} is not one of the runs compared")
    labels = _labels(catalog, names)
    scored: list[Scored] = []
    for name in names:
        cached = catalog.run(name)
        scored.append((name, cached.scores(), cached.row(labels[name])))
    runs = [catalog.run(name) for name in names]  # each with the lines appended meanwhile
    doc: dict[str, Any] = {
        "runs": [run_listing(catalog, name, r) for name, r in zip(names, runs, strict=True)],
        "labels": labels,
        "same_taskset": len({r.run.info.taskset for r in runs}) == 1,
        "baseline": base,
        "leaderboard": leaderboard(scored),
        "against": against(scored[names.index(base)], [s for s in scored if s[0] != base]),
        "heatmap": heatmap(scored),
    }
    if len(names) == 2:
        doc["a"] = run_listing(catalog, names[0], runs[0])
        doc["b"] = run_listing(catalog, names[1], runs[1])
        doc.update(_verdicts(runs[0], runs[1]))
    return doc


def _labels(catalog: Catalog, names: Sequence[str]) -> dict[str, str]:
    """What to call each run on a page: a cell by its name when every run is a cell of one
    job, else ``JOB › CELL``; any other run by its name."""
    cells = {name: catalog.cell_of(name) for name in names}
    jobs = {job for job, _ in cells.values()}
    out = {}
    for name, (job, cell) in cells.items():
        if job is None or cell is None:
            out[name] = name
        else:
            out[name] = cell if len(jobs) == 1 else f"{job} › {cell}"
    return out


def _verdicts(ra: CachedRun, rb: CachedRun) -> dict[str, Any]:
    """Two runs per task: which tasks one passes and the other does not."""
    sa = ra.summary(running=ra.run.state() == "running")
    sb = rb.summary(running=rb.run.state() == "running")
    ta = {t["task_id"]: t for t in sa.get("tasks") or []}
    tb = {t["task_id"]: t for t in sb.get("tasks") or []}
    order = list(ra.run.info.task_ids) + [t for t in rb.run.info.task_ids if t not in ta]
    rows = []
    counts = {"both": 0, "a_only": 0, "b_only": 0, "neither": 0, "missing": 0}
    for task_id in order:
        x, y = _side(ta.get(task_id), ra, task_id), _side(tb.get(task_id), rb, task_id)
        if x is None or y is None or x["passed"] is None or y["passed"] is None:
            verdict = "missing"
        elif x["passed"] and y["passed"]:
            verdict = "both"
        elif x["passed"]:
            verdict = "a_only"
        elif y["passed"]:
            verdict = "b_only"
        else:
            verdict = "neither"
        counts[verdict] += 1
        rows.append({"task_id": task_id, "a": x, "b": y, "verdict": verdict})
    return {"counts": counts, "tasks": rows}


def _side(stats: dict[str, Any] | None, cached: CachedRun, task_id: str) -> dict[str, Any] | None:
    """One run's side of a task's verdict: its statistics and its rollouts."""
    if stats is None:
        return None
    rollouts = cached.task_rollouts(task_id)
    scored = [r for r in rollouts if r.reward is not None]
    return {
        "finished": stats.get("rollouts", 0),
        "mean_reward": stats.get("mean_reward"),
        "pass_at_1": (stats.get("pass_at_k") or {}).get("1"),
        "errors": stats.get("errors", 0),
        "infra_errors": stats.get("infra_errors", 0),
        # a task passes when its pass@1 is at least one half (most rollouts passed)
        "passed": None if not scored else sum(1 for r in scored if r.passed) * 2 >= len(scored),
        "rollouts": [
            {
                "rollout_id": r.rollout_id,
                "reward": r.reward,
                "passed": r.passed,
                "ok": r.ok,
                "infrastructure": r.infrastructure,
            }
            for r in rollouts
        ],
    }


@routes.get("/api/compare/{names:.+}")
async def _compare(request: web.Request) -> web.StreamResponse:
    catalog = request.app[CATALOG]
    names = request.match_info["names"].strip("/").split("/")
    baseline = request.query.get("baseline") or None
    return json_response(await in_worker(request, compare, catalog, names, baseline))
