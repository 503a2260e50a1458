"""ModelProxy: the HTTP server every rollout's model calls pass, one per event loop.

A process runs one proxy per event loop (the driver with the local executor;
each Ray worker process on its node), on ``127.0.0.1`` and a port the system
chooses, shared by every rollout of that loop. A rollout gets a
:class:`~agentkit.proxy.ProxyRoute`: a key of its own, which the agent holds
as its API key and the proxy finds the rollout by. Requests without a known
key get a 401 in their protocol's error format; requests with a route's key
that are not model calls or start-up requests (``agentkit.proxy._paths``) a
403, recorded on the route. Its HTTP is h11 on asyncio streams, towards the
agents (:mod:`agentkit.proxy._http_server`) and the servers
(:mod:`agentkit.proxy._upstream`): the library agentkit's chat client loads anyway
(httpcore is built on it), so a proxied run imports almost nothing more.

:func:`acquire_proxy` and :func:`release_proxy` share the loop's proxy:
started by the first user, stopped when the last one lets go.
"""

from __future__ import annotations

import asyncio
import json
import weakref
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager

from agentkit._proxy_settings import ProxySettings
from agentkit.proxy._encoding import DecodingError
from agentkit.proxy._errors import error_body, protocol_of
from agentkit.proxy._forward import MAX_BODY, forward, key_of, refuse
from agentkit.proxy._http import Request, Response, StreamResponse, read_at_most
from agentkit.proxy._http_server import HttpServer
from agentkit.proxy._paths import PathRefused, check_request
from agentkit.proxy._route import Endpoint, ProxyRoute
from agentkit.proxy._upstream import UpstreamClient

__all__ = ["ModelProxy", "acquire_proxy", "release_proxy", "shared_proxy"]


_DEFAULT_SETTINGS = ProxySettings()


class ModelProxy:
    """An HTTP proxy for model calls on ``host`` (loopback), serving rollouts' routes.

    ``start()`` binds it (``port=0``: a free port), ``close()`` stops it (open
    calls are cut). :meth:`open_route` gives a rollout its route.
    """

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self.host = host
        self.port = port
        self._routes: dict[str, ProxyRoute] = {}
        self._endpoints: dict[str, Endpoint] = {}  # by upstream URL, read once
        self._server: HttpServer | None = None
        self._client: UpstreamClient | None = None

    def __repr__(self) -> str:
        where = self.url if self._server is not None else "not running"
        return f"ModelProxy({where}, {len(self._routes)} routes)"

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT``: where the proxy listens."""
        if self._server is None:
            raise RuntimeError("the model proxy is not running; await start() first")
        return f"http://{self.host}:{self.port}"

    @property
    def routes(self) -> int:
        """How many routes are open."""
        return len(self._routes)

    async def start(self) -> ModelProxy:
        """Listen; returns once the port is bound."""
        server = HttpServer(self._handle, host=self.host, port=self.port, malformed=_malformed)
        self._client = UpstreamClient()
        try:
            self.port = await server.start()
        except BaseException:
            await self._client.close()
            self._client = None
            raise
        self._server = server
        return self

    async def close(self) -> None:
        """Stop listening, cut open calls and close the connections to the endpoints."""
        server, self._server = self._server, None
        if server is not None:
            await server.close()
        client, self._client = self._client, None
        if client is not None:
            await client.close()
        for route in list(self._routes.values()):
            route.close()

    def open_route(
        self,
        *,
        rollout_id: str,
        upstream: str,
        api_key: str | None,
        headers: Mapping[str, str] | None = None,
        settings: ProxySettings | None = None,
    ) -> ProxyRoute:
        """A route for one rollout's calls to ``upstream`` (with ``api_key`` and
        ``headers``): the agent is given its ``base_url`` and ``key``."""
        endpoint = self._endpoints.get(upstream)
        if endpoint is None:
            endpoint = Endpoint.of(upstream)
            if len(self._endpoints) < 64:
                self._endpoints[upstream] = endpoint
        route = ProxyRoute(
            proxy_url=self.url,
            rollout_id=rollout_id,
            upstream=upstream,
            api_key=api_key,
            headers=headers or {},
            settings=settings or _DEFAULT_SETTINGS,
            on_close=self._forget,
            endpoint=endpoint,
        )
        self._routes[route.key] = route
        return route

    def _forget(self, route: ProxyRoute) -> None:
        self._routes.pop(route.key, None)

    async def _handle(self, request: Request) -> Response | StreamResponse:
        key = key_of(request.headers)
        route = None if key is None else self._routes.get(key)
        if route is None:
            return _unknown_key(request)
        try:
            checked = check_request(
                request.method,
                request.raw_path,
                route.base_path,
                translate=route.settings.translate_to_chat,
            )
        except PathRefused as exc:
            return refuse(route, request, 403, f"agentkit model proxy: {exc.reason}")
        protocol = None if checked.wire is None else checked.wire.protocol
        try:
            body = await _read_body(request)
        except DecodingError as exc:
            message = f"agentkit model proxy: the request body cannot be read: {exc}"
            return refuse(route, request, 400, message, protocol=protocol or "other")
        if body is None:
            message = f"agentkit model proxy: the request body is larger than {MAX_BODY} bytes"
            return refuse(route, request, 413, message, protocol=protocol or "other")
        assert self._client is not None
        return await forward(self._client, route, request, checked, body)


async def _read_body(request: Request) -> bytes | None:
    """The request's body, decoded (a ``Content-Encoding`` such as gzip is undone as it
    is read); None when it is larger than :data:`MAX_BODY` once decoded (the rest is left
    unread: a chunked body has no length to check first, and a small compressed one may
    expand to gigabytes)."""
    if (request.content_length or 0) > MAX_BODY:
        return None
    return await read_at_most(request.iter_body(), MAX_BODY)


def _unknown_key(request: Request) -> Response:
    message = (
        "agentkit model proxy: this key opens no rollout's route (the rollout ended, or the "
        "key is not one the proxy gave)"
    )
    protocol = protocol_of(request.raw_path, request.headers)
    body = error_body(protocol, 401, message, "invalid_api_key")
    return Response(401, json.dumps(body).encode(), content_type="application/json")


def _malformed(status: int, message: str) -> Response:
    """The answer to a request that is not HTTP the proxy reads (no route, no record)."""
    body = error_body("chat", status, message, "bad_request")
    return Response(status, json.dumps(body).encode(), content_type="application/json")


class _Shared:
    __slots__ = ("lock", "proxy", "users")

    def __init__(self) -> None:
        self.lock = asyncio.Lock()
        self.proxy: ModelProxy | None = None
        self.users = 0


_shared: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Shared] = weakref.WeakKeyDictionary()


async def acquire_proxy() -> ModelProxy:
    """The running loop's proxy, started if it is not yet; pair with :func:`release_proxy`."""
    loop = asyncio.get_running_loop()
    entry = _shared.get(loop)
    if entry is None:
        entry = _shared[loop] = _Shared()
    async with entry.lock:
        if entry.proxy is None:
            entry.proxy = await ModelProxy().start()
        entry.users += 1
        return entry.proxy


async def release_proxy(proxy: ModelProxy) -> None:
    """Let go of a proxy :func:`acquire_proxy` gave; the last user stops it."""
    loop = asyncio.get_running_loop()
    entry = _shared.get(loop)
    if entry is None or entry.proxy is not proxy:
        return
    async with entry.lock:
        entry.users -= 1
        if entry.users <= 0:
            entry.proxy = None
            entry.users = 0
            await proxy.close()


@asynccontextmanager
async def shared_proxy() -> AsyncIterator[ModelProxy]:
    """The running loop's proxy for the block (:func:`acquire_proxy`, :func:`release_proxy`)."""
    proxy = await acquire_proxy()
    try:
        yield proxy
    finally:
        await asyncio.shield(release_proxy(proxy))
