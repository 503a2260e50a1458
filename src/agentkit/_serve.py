"""Serving an aiohttp runner on a TCP port (the scripted model server, the rollout service's
front)."""

from __future__ import annotations

import ssl

from aiohttp import web

__all__ = ["start_site"]


async def start_site(
    runner: web.BaseRunner,
    host: str,
    port: int,
    *,
    backlog: int = 128,
    ssl_context: ssl.SSLContext | None = None,
) -> int:
    """Set ``runner`` up and serve it on ``host:port`` (port 0: a free one); the port it
    serves on. When the port cannot be had, the runner is cleaned up and the error raised."""
    await runner.setup()
    site = web.TCPSite(runner, host, port, backlog=backlog, ssl_context=ssl_context)
    try:
        await site.start()
    except BaseException:
        await runner.cleanup()
        raise
    bound: int = runner.addresses[0][1]
    return bound
