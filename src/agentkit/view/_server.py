"""The viewer's HTTP server (aiohttp): the page, its JSON API, live streams and run files.

Routes:

* ``/``, ``/run/<run>``, ``/run/<run>/rollout/<id>``, ``/job/<job>``,
  ``/compare/<a>/<b>/...``: the single page (``static/index.html``), which
  routes in the browser;
* ``/api/...``: JSON built by :class:`agentkit.view._api.Viewer`;
* ``/api/.../stream``: server-sent events: the server looks at the run's
  files a few times a second (a ``stat``, and the ``live/`` files of running
  rollouts) and tells the page what changed;
* ``/files/<run>/<path>``: a file of the run (artifacts, sandbox files),
  only inside the served directory, sent so that the browser never runs it;
* ``/static/...``: the page's own script and style, from the installed package.

Reading the runs happens in one worker thread, so the server stays
responsive while a large run is scanned. Nothing is ever written.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import mimetypes
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from aiohttp import web

from agentkit._rundir import RunDirError
from agentkit.stats import clustered_mean_of_groups
from agentkit.view._api import Viewer
from agentkit.view._hosts import is_loopback, url_host
from agentkit.view._paths import NotFound, Refused

__all__ = ["STATIC", "create_app", "serve"]

STATIC = Path(__file__).parent / "static"

#: How often the streams look at the files (seconds).
RUN_POLL_S = 0.5
ROLLOUT_POLL_S = 0.25
RUNS_POLL_S = 1.0
#: A comment line this often keeps a quiet stream open (and finds closed tabs).
HEARTBEAT_S = 15.0

_T = TypeVar("_T")

VIEWER = web.AppKey("viewer", Viewer)
EXECUTOR = web.AppKey("executor", ThreadPoolExecutor)
STOPPING = web.AppKey("stopping", asyncio.Event)
HOSTS = web.AppKey("hosts", set)

_PAGE_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; "
        "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}
_FILE_HEADERS = {
    # a run's files are shown, never executed: no scripts, no plugins, no same origin
    "Content-Security-Policy": (
        "sandbox; default-src 'none'; img-src 'self'; style-src 'unsafe-inline'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}
_IMAGES = {
    ".png": "image/png",
    ".jpg": "image/jpeg",
    ".jpeg": "image/jpeg",
    ".gif": "image/gif",
    ".webp": "image/webp",
}


def create_app(root: str | Path, *, allowed_hosts: set[str] | None = None) -> web.Application:
    """The viewer as an aiohttp application over ``root`` (a run or a folder of runs).

    ``allowed_hosts`` (``host:port`` values of the ``Host`` header) guards a
    loopback server against DNS rebinding; None accepts any.
    """
    app = web.Application(middlewares=[_guard, _errors])
    app[VIEWER] = Viewer(root)
    app[EXECUTOR] = ThreadPoolExecutor(max_workers=1, thread_name_prefix="agentkit-view")
    app[STOPPING] = asyncio.Event()
    app[HOSTS] = set(allowed_hosts or ())
    r = app.router
    r.add_get("/api/runs", _runs)
    r.add_get("/api/runs/stream", _runs_stream)
    r.add_get("/api/run/{run}", _run)
    r.add_get("/api/run/{run}/rollouts", _rollouts)
    r.add_get("/api/run/{run}/tasks", _tasks)
    r.add_get("/api/run/{run}/stream", _run_stream)
    r.add_get("/api/run/{run}/rollout/{rid}", _rollout)
    r.add_get("/api/run/{run}/rollout/{rid}/stream", _rollout_stream)
    r.add_get("/api/run/{run}/rollout/{rid}/call/{index}", _call_json)
    r.add_get("/api/job/{job}", _job)
    r.add_get("/api/compare/{names:.+}", _compare)
    r.add_get("/api/charts", _charts)
    r.add_get("/api/{tail:.*}", _api_unknown)
    r.add_get("/files/{run}/{path:.+}", _file)
    r.add_static("/static/", STATIC, follow_symlinks=False)
    r.add_get("/{tail:.*}", _page)
    app.on_shutdown.append(_stop_streams)
    app.on_cleanup.append(_stop_executor)
    return app


async def _stop_streams(app: web.Application) -> None:
    app[STOPPING].set()


async def _stop_executor(app: web.Application) -> None:
    app[EXECUTOR].shutdown(wait=False, cancel_futures=True)


async def _call(request: web.Request, fn: Callable[..., _T], *args: Any) -> _T:
    """Run a Viewer method in the viewer's worker thread."""
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(request.app[EXECUTOR], functools.partial(fn, *args))


def _json(data: Any, status: int = 200) -> web.Response:
    return web.json_response(
        data,
        status=status,
        dumps=functools.partial(json.dumps, default=str, allow_nan=False),
        headers={"Cache-Control": "no-store", "X-Content-Type-Options": "nosniff"},
    )


@web.middleware
async def _guard(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    """On loopback, answer only requests addressed to this server (DNS rebinding)."""
    hosts = request.app[HOSTS]
    if hosts and request.host.lower() not in hosts:
        return web.Response(status=421, text="misdirected request: unknown Host header\n")
    return await handler(request)


@web.middleware
async def _errors(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    try:
        return await handler(request)
    except Refused as exc:
        return _json({"error": str(exc)}, status=403)
    except NotFound as exc:
        return _json({"error": str(exc)}, status=404)
    except RunDirError as exc:
        return _json({"error": str(exc)}, status=422)


# -- the page ------------------------------------------------------------------


async def _page(request: web.Request) -> web.StreamResponse:
    return web.FileResponse(STATIC / "index.html", headers=_PAGE_HEADERS)


async def _api_unknown(request: web.Request) -> web.StreamResponse:
    return _json({"error": f"no such API: {request.path}"}, status=404)


# -- JSON ----------------------------------------------------------------------


async def _runs(request: web.Request) -> web.StreamResponse:
    return _json(await _call(request, request.app[VIEWER].runs))


async def _run(request: web.Request) -> web.StreamResponse:
    return _json(await _call(request, request.app[VIEWER].run, request.match_info["run"]))


async def _rollouts(request: web.Request) -> web.StreamResponse:
    viewer = request.app[VIEWER]
    params = dict(request.query)
    return _json(await _call(request, viewer.rollouts, request.match_info["run"], params))


async def _tasks(request: web.Request) -> web.StreamResponse:
    viewer = request.app[VIEWER]
    params = dict(request.query)
    return _json(await _call(request, viewer.tasks, request.match_info["run"], params))


async def _rollout(request: web.Request) -> web.StreamResponse:
    viewer = request.app[VIEWER]
    info = request.match_info
    return _json(await _call(request, viewer.rollout, info["run"], info["rid"]))


async def _call_json(request: web.Request) -> web.StreamResponse:
    viewer = request.app[VIEWER]
    info = request.match_info
    return _json(await _call(request, viewer.call, info["run"], info["rid"], info["index"]))


async def _job(request: web.Request) -> web.StreamResponse:
    return _json(await _call(request, request.app[VIEWER].job, request.match_info["job"]))


async def _compare(request: web.Request) -> web.StreamResponse:
    viewer = request.app[VIEWER]
    names = request.match_info["names"].strip("/").split("/")
    baseline = request.query.get("baseline") or None
    return _json(await _call(request, viewer.compare, names, baseline))


async def _charts(request: web.Request) -> web.StreamResponse:
    viewer = request.app[VIEWER]
    names = (request.query.get("runs") or "").split(",")
    return _json(await _call(request, viewer.charts, names))


# -- files -----------------------------------------------------------------------


async def _file(request: web.Request) -> web.StreamResponse:
    viewer = request.app[VIEWER]
    path = await _call(request, viewer.file, request.match_info["run"], request.match_info["path"])
    headers = dict(_FILE_HEADERS)
    name = path.name.replace('"', "")
    if request.query.get("download"):
        headers["Content-Type"] = "application/octet-stream"
        headers["Content-Disposition"] = f'attachment; filename="{name}"'
    else:
        headers["Content-Type"] = await _call(request, _inline_type, path)
        headers["Content-Disposition"] = f'inline; filename="{name}"'
    return web.FileResponse(path, headers=headers)


def _inline_type(path: Path) -> str:
    """Images as themselves; text as text/plain (never HTML); anything else as bytes."""
    image = _IMAGES.get(path.suffix.lower())
    if image:
        return image
    try:
        with open(path, "rb") as fh:
            head = fh.read(8192)
    except OSError:
        return "application/octet-stream"
    if b"\x00" in head:
        return "application/octet-stream"
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as exc:
        if exc.start < len(head) - 4:  # not just a character cut at the end
            return "application/octet-stream"
    guessed = mimetypes.guess_type(path.name)[0] or ""
    if guessed.startswith("image/") and guessed != "image/svg+xml":
        return guessed
    return "text/plain; charset=utf-8"


# -- live streams ------------------------------------------------------------------


async def _open_stream(request: web.Request) -> web.StreamResponse:
    resp = web.StreamResponse(
        headers={
            "Content-Type": "text/event-stream",
            "Cache-Control": "no-store",
            "X-Accel-Buffering": "no",
        }
    )
    await resp.prepare(request)
    return resp


async def _send(resp: web.StreamResponse, event: str, data: Any) -> None:
    text = json.dumps(data, default=str, separators=(",", ":"))
    await resp.write(f"event: {event}\ndata: {text}\n\n".encode())


async def _ticks(request: web.Request, interval: float) -> AsyncIterator[bool]:
    """Yield every ``interval`` seconds until the server stops; True when a heartbeat is due."""
    stopping = request.app[STOPPING]
    beat = time.monotonic()
    while not stopping.is_set():
        due = time.monotonic() - beat >= HEARTBEAT_S
        if due:
            beat = time.monotonic()
        yield due
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(stopping.wait(), interval)


async def _runs_stream(request: web.Request) -> web.StreamResponse:
    viewer = request.app[VIEWER]
    resp = await _open_stream(request)
    last: Any = None
    with contextlib.suppress(ConnectionError, asyncio.CancelledError):
        async for heartbeat in _ticks(request, RUNS_POLL_S):
            snapshot = await _call(request, viewer.runs_snapshot)
            if snapshot != last:
                await _send(resp, "runs", {"changed": last is not None})
                last = snapshot
            elif heartbeat:
                await resp.write(b": ping\n\n")
    return resp


async def _run_stream(request: web.Request) -> web.StreamResponse:
    viewer = request.app[VIEWER]
    name = request.match_info["run"]
    await _call(request, viewer.entry, name)  # 404 before the stream opens
    resp = await _open_stream(request)
    last: Any = None
    with contextlib.suppress(ConnectionError, asyncio.CancelledError):
        async for heartbeat in _ticks(request, RUN_POLL_S):
            try:
                snapshot = await _call(request, viewer.run_snapshot, name)
            except (NotFound, RunDirError) as exc:
                await _send(resp, "gone", {"error": str(exc)})
                break
            if snapshot != last:
                await _send(resp, "run", snapshot)
                last = snapshot
            elif heartbeat:
                await resp.write(b": ping\n\n")
    return resp


async def _rollout_stream(request: web.Request) -> web.StreamResponse:
    viewer = request.app[VIEWER]
    name, rid = request.match_info["run"], request.match_info["rid"]
    try:
        offset = max(0, int(request.query.get("offset", "0")))
    except ValueError:
        offset = 0
    await _call(request, viewer.entry, name)
    resp = await _open_stream(request)
    with contextlib.suppress(ConnectionError, asyncio.CancelledError):
        async for heartbeat in _ticks(request, ROLLOUT_POLL_S):
            try:
                found = await _call(request, viewer.live, name, rid, offset)
            except (NotFound, RunDirError) as exc:
                await _send(resp, "gone", {"error": str(exc)})
                break
            if found["events"]:
                offset = found["offset"]
                await _send(resp, "events", {"events": found["events"], "offset": offset})
            if found["finished"]:
                await _send(resp, "finished", {"state": found["state"]})
                break
            if found["state"] != "running":
                await _send(resp, "ended", {"state": found["state"]})
                break
            if heartbeat:
                await resp.write(b": ping\n\n")
    return resp


# -- serving -------------------------------------------------------------------------


def _load_statistics() -> None:
    """Compute one interval, so that the libraries intervals need are loaded."""
    clustered_mean_of_groups([(1, 0.0), (1, 1.0)])


async def serve(
    root: str | Path,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    on_ready: Callable[[str], None] | None = None,
    stop: asyncio.Event | None = None,
) -> None:
    """Serve ``root`` until ``stop`` is set (or forever); ``on_ready(url)`` once listening."""
    runner = web.AppRunner(
        create_app(root), access_log=None, handle_signals=False, shutdown_timeout=2.0
    )
    await runner.setup()
    try:
        site = web.TCPSite(runner, host, port)
        await site.start()
        bound = runner.addresses[0]
        actual = int(bound[1])
        if is_loopback(host):
            runner.app[HOSTS].update(
                f"{name}:{actual}" for name in ("127.0.0.1", "localhost", "[::1]", url_host(host))
            )
        url = f"http://{url_host(host)}:{actual}/"
        # the intervals' t quantiles need scipy, slow to import: the worker imports it
        # while the browser opens (a request meanwhile waits for it, as it would have)
        runner.app[EXECUTOR].submit(_load_statistics)
        if on_ready is not None:
            on_ready(url)
        await (stop or asyncio.Event()).wait()
    finally:
        await runner.cleanup()
