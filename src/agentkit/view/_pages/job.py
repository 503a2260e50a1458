"""A job's page (``/job/JOB``): its cells, their leaderboard and the tasks × cells heat map.

``/api/job/JOB`` has the job's row (as the runs page lists it), every cell
(where it sits on the axes, its run and state), the cells' leaderboard with
intervals and the heat map of mean rewards. A settled cell is read from its
summary alone, so a 100,000-rollout job opens without a scan of its rollouts.
The page follows the runs page's stream (``/api/runs/stream``).
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from agentkit.rundir import RunDirError
from agentkit.view._catalog import Catalog
from agentkit.view._http import CATALOG, in_worker, json_response
from agentkit.view._listing import job_listing, run_listing, settled_listing
from agentkit.view._paths import NotFound
from agentkit.view._stats import Scored, heatmap, leaderboard

__all__ = ["job", "routes"]

routes = web.RouteTableDef()


def job(catalog: Catalog, name: str) -> dict[str, Any]:
    """A job: its cells (where each sits on the axes, its run and state), their leaderboard
    with intervals, and the tasks × cells heat map of mean rewards."""
    served = catalog.job(name)
    jd = served.job
    prefix = catalog.cell_prefix(name)
    cells = []
    scored: list[Scored] = []
    listings: dict[str, dict[str, Any] | None] = {}
    for c in jd.cells:
        run = prefix + c.name if served.started(c.name) else None
        listing = None
        error = None
        if run is not None:
            try:
                cached = catalog.run(run, refresh=False)
                stored = cached.settled()
                if stored is not None:  # a 100,000-rollout job opens without a scan
                    listing = settled_listing(catalog, run, cached, stored)
                else:
                    cached.refresh()
                    listing = run_listing(catalog, run, cached)
                scored.append((run, cached.scores(), cached.row(c.name)))
            except NotFound:
                run = None
            except RunDirError as exc:  # a corrupt line: the cell says so, the rest shows
                run, listing, error = None, None, str(exc)
        listings[c.name] = listing
        cells.append(
            {
                "name": c.name,
                "run": run,
                "axes": c.axes,
                "state": listing["state"] if listing else "broken" if error else "not started",
                "listing": listing,
                "error": error,
            }
        )
    axes_of = {prefix + c.name: c.axes for c in jd.cells}
    board = leaderboard(scored)
    for record in board:
        record["axes"] = axes_of.get(record["run"], {})
    return {
        **job_listing(name, served, listings),
        "path": str(jd.path),
        "concurrency": jd.concurrency,
        "cell_list": cells,
        "leaderboard": board,
        "heatmap": heatmap(scored),
        "labels": {prefix + c.name: c.name for c in jd.cells},
    }


@routes.get("/api/job/{job}")
async def _job(request: web.Request) -> web.StreamResponse:
    catalog = request.app[CATALOG]
    return json_response(await in_worker(request, job, catalog, request.match_info["job"]))
