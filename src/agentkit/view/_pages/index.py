"""The runs page (``/``): every run and job in the served directory, live.

``/api/runs`` lists every run (a job's cells with their ``job`` and
``cell``), every job (its cells summed, its best cell) and what cannot be
read (``broken``: a job.json or a run with its error); ``/api/runs/stream``
says when any of that changed.
"""

from __future__ import annotations

import functools
from typing import Any

from aiohttp import web

from agentkit.jobs import JOB_FILE, JobDirError
from agentkit.rundir import MANIFEST, ROLLOUTS, RunDirError
from agentkit.view._cached_run import mtime, size
from agentkit.view._catalog import Catalog, ServedJob
from agentkit.view._http import CATALOG, changes_stream, in_worker, json_response
from agentkit.view._listing import job_listing, run_listing
from agentkit.view._paths import NotFound

__all__ = ["RUNS_POLL_S", "routes", "runs", "runs_snapshot"]

#: How often the stream looks at the folder (seconds).
RUNS_POLL_S = 1.0

routes = web.RouteTableDef()


def runs(catalog: Catalog) -> dict[str, Any]:
    """Every run (a job's cells with their ``job`` and ``cell``) and every job: what the
    runs page shows."""
    run_dirs, job_dirs = catalog.scan()
    cell_of: dict[str, tuple[str, str]] = {}
    found: dict[str, ServedJob] = {}
    broken: list[dict[str, str | None]] = []
    for job, path in job_dirs.items():
        try:
            found[job] = served = catalog.job_dir(path)
        except JobDirError as exc:
            broken.append({"name": job, "kind": "job", "error": str(exc)})
            continue
        prefix = catalog.cell_prefix(job)
        for c in served.run_dirs:
            cell_of[prefix + c] = (job, c)
    out = []
    for name in run_dirs:
        try:
            out.append(run_listing(catalog, name, catalog.run(name)))
        except (NotFound, RunDirError) as exc:
            # one run that cannot be read (a corrupt line) is listed with its error; the
            # others are still listed
            of_job, cell = catalog.cell_of(name)
            broken.append(
                {"name": name, "kind": "run", "job": of_job, "cell": cell, "error": str(exc)}
            )
    out.sort(key=lambda r: r["created_at"] or 0.0, reverse=True)
    listed = {r["name"]: r for r in out}
    job_list = []
    for job, served in found.items():
        cells = {c: listed.get(run) for run, (j, c) in cell_of.items() if j == job}
        job_list.append(job_listing(job, served, cells))
    job_list.sort(key=lambda r: r["created_at"] or 0.0, reverse=True)
    return {
        "root": str(catalog.root),
        "single": catalog.single,
        "single_job": catalog.single_job,
        "runs": out,
        "jobs": job_list,
        "broken": broken,
    }


def runs_snapshot(catalog: Catalog) -> list[Any]:
    """What changes on the runs page: names, line counts and states, and the jobs' job.json
    (for live updates)."""
    run_dirs, job_dirs = catalog.scan()
    out: list[Any] = [[name, mtime(path / JOB_FILE)] for name, path in job_dirs.items()]
    for name, path in run_dirs.items():
        out.append([name, size(path / ROLLOUTS), mtime(path / MANIFEST)])
        try:
            out[-1].append(catalog.run(name).run.state())
        except (NotFound, RunDirError):
            out[-1].append("broken")
    return out


@routes.get("/api/runs")
async def _runs(request: web.Request) -> web.StreamResponse:
    return json_response(await in_worker(request, runs, request.app[CATALOG]))


@routes.get("/api/runs/stream")
async def _runs_stream(request: web.Request) -> web.StreamResponse:
    read = functools.partial(runs_snapshot, request.app[CATALOG])
    return await changes_stream(
        request, RUNS_POLL_S, read, "runs", lambda last, now: {"changed": last is not None}
    )
