"""The viewer's HTTP server (aiohttp): the page, each page's JSON API and live stream, files.

Routes:

* ``/``, ``/run/<run>``, ``/run/<run>/rollout/<id>``, ``/job/<job>``,
  ``/compare/<a>/<b>/...``: the single page (``static/index.html``), which
  routes in the browser;
* ``/api/...``: each page's JSON, from its module in
  :mod:`agentkit.view._pages` (with its live stream, server-sent events:
  the server looks at the run's files a few times a second and tells the
  page what changed);
* ``/files/<run>/<path>``: a file of the run (artifacts, sandbox files),
  only inside the served directory, sent so that the browser never runs it;
* ``/static/...``: the page's own scripts and style, from the installed package.

Reading the runs happens in one worker thread (:mod:`agentkit.view._http`),
so the server stays responsive while a large run is scanned. Nothing is ever
written.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from aiohttp import web

from agentkit.stats import clustered_mean_of_groups
from agentkit.view._catalog import Catalog
from agentkit.view._hosts import is_loopback, url_host
from agentkit.view._http import (
    CATALOG,
    EXECUTOR,
    HOSTS,
    STOPPING,
    errors,
    guard,
    json_response,
)
from agentkit.view._pages import charts, compare, files, index, job, rollout, run

__all__ = ["STATIC", "create_app", "serve"]

STATIC = Path(__file__).parent / "static"

_PAGE_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; "
        "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}


def create_app(root: str | Path, *, allowed_hosts: set[str] | None = None) -> web.Application:
    """The viewer as an aiohttp application over ``root`` (a run or a folder of runs).

    ``allowed_hosts`` (``host:port`` values of the ``Host`` header) guards a
    loopback server against DNS rebinding; None accepts any.
    """
    app = web.Application(middlewares=[guard, errors])
    app[CATALOG] = Catalog(root)
    app[EXECUTOR] = ThreadPoolExecutor(max_workers=1, thread_name_prefix="agentkit-view")
    app[STOPPING] = asyncio.Event()
    app[HOSTS] = set(allowed_hosts or ())
    for page in (index, run, rollout, job, compare, charts, files):
        app.router.add_routes(page.routes)
    app.router.add_get("/api/{tail:.*}", _api_unknown)
    app.router.add_static("/static/", STATIC, follow_symlinks=False)
    app.router.add_get("/{tail:.*}", _page)
    app.on_shutdown.append(_stop_streams)
    app.on_cleanup.append(_stop_executor)
    return app


async def _stop_streams(app: web.Application) -> None:
    app[STOPPING].set()


async def _stop_executor(app: web.Application) -> None:
    app[EXECUTOR].shutdown(wait=False, cancel_futures=True)


async def _page(request: web.Request) -> web.StreamResponse:
    return web.FileResponse(STATIC / "index.html", headers=_PAGE_HEADERS)


async def _api_unknown(request: web.Request) -> web.StreamResponse:
    return json_response({"error": f"no such API: {request.path}"}, status=404)


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
