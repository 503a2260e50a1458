"""A model endpoint of the test's own on loopback (aiohttp), for what the scripted server
cannot be made to do: answer any path, or misbehave in one exact way.

``Upstream(handler)`` serves ``handler(request)`` on 127.0.0.1 (``url`` ends in ``/v1``)
and keeps every request that reached it in ``seen`` (method, raw path, the key it was
sent) before the handler runs.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from aiohttp import web

Handler = Callable[[web.BaseRequest], Awaitable[web.StreamResponse]]


class Upstream:
    """An aiohttp server answering every request with ``handler``; see the module."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.seen: list[tuple[str, str, str | None]] = []
        self.runner: web.ServerRunner | None = None
        self.url = ""

    async def _handle(self, request: web.BaseRequest) -> web.StreamResponse:
        self.seen.append((request.method, request.raw_path, request.headers.get("authorization")))
        return await self.handler(request)

    async def __aenter__(self) -> Upstream:
        self.runner = web.ServerRunner(
            web.Server(self._handle, handler_cancellation=True), handle_signals=False
        )
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        self.url = f"http://127.0.0.1:{self.runner.addresses[0][1]}/v1"
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.runner is not None
        await self.runner.cleanup()
