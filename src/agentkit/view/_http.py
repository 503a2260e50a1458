"""What every page's handlers share: the worker thread, JSON answers, errors, live streams.

A page module (:mod:`agentkit.view._pages`) reads the runs in one worker
thread (:func:`in_worker`), so the server stays responsive while a large run
is scanned, and answers with :func:`json_response`. Errors are raised, not
answered: :func:`errors` turns :class:`~agentkit.view._paths.Refused` into
403, :class:`~agentkit.view._paths.NotFound` into 404 and a run directory
that cannot be read into 422, each as ``{"error": ...}``. :func:`guard`
answers a loopback server's requests only when they are addressed to it (DNS
rebinding). The live streams are server-sent events: :func:`open_stream`,
:func:`send_event` and :func:`ticks`, which paces a stream's looks at the
files and says when a heartbeat is due; :func:`changes_stream` is a stream
that says when what a page shows has changed.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from aiohttp import web

from agentkit._sse import sse_event
from agentkit.rundir import RunDirError
from agentkit.view._catalog import Catalog
from agentkit.view._paths import NotFound, Refused

__all__ = [
    "CATALOG",
    "EXECUTOR",
    "HEARTBEAT_S",
    "HOSTS",
    "STOPPING",
    "changes_stream",
    "errors",
    "guard",
    "in_worker",
    "json_response",
    "open_stream",
    "ping",
    "send_event",
    "ticks",
]

#: A comment line this often keeps a quiet stream open (and finds closed tabs).
HEARTBEAT_S = 15.0

_T = TypeVar("_T")

#: The served folder.
CATALOG = web.AppKey("catalog", Catalog)
#: The one worker thread that reads the runs.
EXECUTOR = web.AppKey("executor", ThreadPoolExecutor)
#: Set when the server stops: the live streams end.
STOPPING = web.AppKey("stopping", asyncio.Event)
#: ``host:port`` values of the ``Host`` header a loopback server answers (empty: any).
HOSTS = web.AppKey("hosts", set)


async def in_worker(request: web.Request, fn: Callable[..., _T], *args: Any) -> _T:
    """``fn(*args)`` in the viewer's worker thread."""
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(request.app[EXECUTOR], functools.partial(fn, *args))


def json_response(data: Any, status: int = 200) -> web.Response:
    """``data`` as strict JSON (no NaN), never cached, never sniffed."""
    return web.json_response(
        data,
        status=status,
        dumps=functools.partial(json.dumps, default=str, allow_nan=False),
        headers={"Cache-Control": "no-store", "X-Content-Type-Options": "nosniff"},
    )


@web.middleware
async def guard(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    """On loopback, answer only requests addressed to this server (DNS rebinding)."""
    hosts = request.app[HOSTS]
    if hosts and request.host.lower() not in hosts:
        return web.Response(status=421, text="misdirected request: unknown Host header\n")
    return await handler(request)


@web.middleware
async def errors(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    """A refused path is 403, nothing there 404, a run that cannot be read 422."""
    try:
        return await handler(request)
    except Refused as exc:
        return json_response({"error": str(exc)}, status=403)
    except NotFound as exc:
        return json_response({"error": str(exc)}, status=404)
    except RunDirError as exc:
        return json_response({"error": str(exc)}, status=422)


async def open_stream(request: web.Request) -> web.StreamResponse:
    """A server-sent events stream, opened."""
    resp = web.StreamResponse(
        headers={
            "Content-Type": "text/event-stream",
            "Cache-Control": "no-store",
            "X-Accel-Buffering": "no",
        }
    )
    await resp.prepare(request)
    return resp


async def send_event(resp: web.StreamResponse, event: str, data: Any) -> None:
    """One event named ``event`` with ``data`` as JSON."""
    text = json.dumps(data, default=str, separators=(",", ":"))
    await resp.write(sse_event(text, event))


async def ping(resp: web.StreamResponse) -> None:
    """A comment line: the heartbeat of a quiet stream."""
    await resp.write(b": ping\n\n")


async def ticks(request: web.Request, interval: float) -> AsyncIterator[bool]:
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


async def changes_stream(
    request: web.Request,
    interval: float,
    read: Callable[[], Any],
    event: str,
    data: Callable[[Any, Any], Any],
    *,
    gone: tuple[type[Exception], ...] = (),
) -> web.StreamResponse:
    """A stream that looks at ``read()`` (in the worker thread) every ``interval`` seconds
    and, when it differs from the last look, sends ``event`` with ``data(last, now)`` (a
    heartbeat when a quiet stream is due one); a ``gone`` error ends it with a ``gone``
    event naming the error."""
    resp = await open_stream(request)
    last: Any = None
    with contextlib.suppress(ConnectionError, asyncio.CancelledError):
        async for heartbeat in ticks(request, interval):
            try:
                now = await in_worker(request, read)
            except gone as exc:
                await send_event(resp, "gone", {"error": str(exc)})
                break
            if now != last:
                await send_event(resp, event, data(last, now))
                last = now
            elif heartbeat:
                await ping(resp)
    return resp
