"""UpstreamClient: the model proxy's calls to model servers, on httpcore.

httpcore is the HTTP client agentkit's chat client uses (``agentkit._endpoint``):
connection pools kept across calls and rollouts, ``https`` with the system's
certificate authorities (``SSL_CERT_FILE`` honoured), an HTTP proxy when the
environment names one for the endpoint (``ProxyRoute.http_proxy``). The target
(path and query) goes exactly as given: nothing is normalised or re-encoded on
the way. An answer's body is read decoded (a ``Content-Encoding`` gzip or
deflate undone in pieces of bounded size, :mod:`agentkit.proxy._encoding`).

A failure is an :class:`UpstreamError`: ``answered`` False when no answer
started (the server could not be reached, or closed the connection before its
status line), True when the answer broke off.
"""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from urllib.parse import urlsplit

import httpcore

from agentkit.proxy._encoding import DecodingError, decoder_for
from agentkit.proxy._http import Headers, field_bytes

__all__ = ["CONNECT_TIMEOUT", "Answer", "UpstreamClient", "UpstreamError"]

#: Seconds to open a connection to the server. Reading the answer has no timeout of
#: its own: the agent's and the rollout's bound it.
CONNECT_TIMEOUT = 60.0
#: Seconds an idle connection to a server is kept for the next call.
KEEPALIVE = 30.0

#: What httpcore raises for a call that failed on the way.
_FAILURES = (
    httpcore.TimeoutException,
    httpcore.NetworkError,
    httpcore.ProtocolError,
    httpcore.ProxyError,
    httpcore.UnsupportedProtocol,
)


class UpstreamError(Exception):
    """A call to the model server failed; ``answered``: after its answer had started."""

    def __init__(self, message: str, *, answered: bool) -> None:
        super().__init__(message)
        self.answered = answered


class Answer:
    """The server's answer: ``status``, ``reason``, ``headers``; the body from
    :meth:`chunks`."""

    __slots__ = ("_response", "headers", "reason", "status")

    def __init__(self, response: httpcore.Response) -> None:
        self._response = response
        self.status = response.status
        reason = response.extensions.get("reason_phrase", b"")
        self.reason = reason.decode("latin-1") if isinstance(reason, bytes) else ""
        self.headers = Headers(
            (name.decode("latin-1"), value.decode("latin-1")) for name, value in response.headers
        )

    def __repr__(self) -> str:
        return f"Answer({self.status})"

    async def chunks(self) -> AsyncIterator[bytes]:
        """The body as it arrives, decoded; raises :class:`UpstreamError` when it
        breaks off or cannot be decoded."""
        decoder = decoder_for(self.headers.get("content-encoding"))
        try:
            async for data in self._response.aiter_stream():
                if decoder is None:
                    yield data
                else:
                    for piece in decoder.feed(data):
                        yield piece
            if decoder is not None:
                tail = decoder.flush()
                if tail:
                    yield tail
        except _FAILURES as exc:
            raise UpstreamError(f"{type(exc).__name__}: {exc}", answered=True) from exc
        except DecodingError as exc:
            raise UpstreamError(str(exc), answered=True) from exc

    async def read(self, limit: int) -> bytes | None:
        """The whole body, decoded; None when it is larger than ``limit`` bytes."""
        parts: list[bytes] = []
        size = 0
        async for chunk in self.chunks():
            size += len(chunk)
            if size > limit:
                return None
            parts.append(chunk)
        return b"".join(parts)


class UpstreamClient:
    """Pools of connections to model servers, one per HTTP proxy and scheme."""

    def __init__(self) -> None:
        self._pools: dict[tuple[str | None, bool], httpcore.AsyncConnectionPool] = {}
        self._origins: dict[str, tuple[bytes, bytes, int | None, bytes]] = {}
        self._ssl: ssl.SSLContext | None = None

    def __repr__(self) -> str:
        return f"UpstreamClient({len(self._pools)} pools)"

    @asynccontextmanager
    async def request(
        self,
        method: str,
        origin: str,
        target: str,
        *,
        headers: list[tuple[str, str]],
        body: bytes | None,
        proxy: str | None = None,
        timeout: float | None = None,
    ) -> AsyncIterator[Answer]:
        """Send ``method target`` to ``origin`` (``scheme://host[:port]``) and hold its
        answer for the block. ``body`` None: no body (and no ``Content-Length``).
        ``timeout``: seconds for each step (connecting, each read and write); None:
        :data:`CONNECT_TIMEOUT` to connect, no limit after."""
        scheme, host, port, netloc = self._origin(origin)
        url = httpcore.URL(scheme=scheme, host=host, port=port, target=target.encode("latin-1"))
        fields = [(b"Host", netloc)]
        fields += [(field_bytes(name), field_bytes(value)) for name, value in headers]
        steps = {"connect": CONNECT_TIMEOUT, "read": None, "write": None, "pool": None}
        if timeout is not None:
            steps = dict.fromkeys(steps, timeout)
        pool = self._pool(proxy, scheme == b"https")
        answered = False
        try:
            async with pool.stream(
                method.encode("ascii"),
                url,
                headers=fields,
                content=body,
                extensions={"timeout": steps},
            ) as response:
                answered = True
                yield Answer(response)
        except _FAILURES as exc:
            raise UpstreamError(f"{type(exc).__name__}: {exc}", answered=answered) from exc

    async def close(self) -> None:
        """Close every connection."""
        pools = list(self._pools.values())
        self._pools.clear()
        for pool in pools:
            await pool.aclose()

    def _origin(self, origin: str) -> tuple[bytes, bytes, int | None, bytes]:
        found = self._origins.get(origin)
        if found is None:
            parts = urlsplit(origin)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise UpstreamError(f"{origin!r} is not an http(s) origin", answered=False)
            netloc = parts.netloc.rpartition("@")[2]  # what the Host header names
            found = (
                parts.scheme.encode(),
                parts.hostname.encode("idna"),
                parts.port,
                netloc.encode("idna"),
            )
            if len(self._origins) < 256:
                self._origins[origin] = found
        return found

    def _pool(self, proxy: str | None, https: bool) -> httpcore.AsyncConnectionPool:
        pool = self._pools.get((proxy, https))
        if pool is None:
            context = self._context() if https else None
            if proxy is not None:
                pool = httpcore.AsyncHTTPProxy(
                    proxy_url=proxy, ssl_context=context, max_connections=None,
                    keepalive_expiry=KEEPALIVE,
                )  # fmt: skip
            else:
                pool = httpcore.AsyncConnectionPool(
                    ssl_context=context, max_connections=None, keepalive_expiry=KEEPALIVE
                )
            self._pools[(proxy, https)] = pool
        return pool

    def _context(self) -> ssl.SSLContext:
        """The system's certificate authorities (``SSL_CERT_FILE`` and ``SSL_CERT_DIR``
        honoured), made once: loading them costs tens of milliseconds."""
        if self._ssl is None:
            self._ssl = ssl.create_default_context()
        return self._ssl
