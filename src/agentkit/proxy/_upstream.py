"""UpstreamClient: the model proxy's calls to model servers, HTTP/1.1 by h11 on asyncio streams.

h11 (the library httpcore's HTTP/1.1 is built on) frames each request and reads
each answer; this module keeps the connections: a stack of idle ones per
endpoint (and HTTP proxy), reused while the server keeps them open and for at
most :data:`KEEPALIVE` seconds; ``https`` with the system's certificate
authorities (``SSL_CERT_FILE`` honoured) and the endpoint's host name checked;
through an HTTP proxy when the environment names one for the endpoint
(``ProxyRoute.http_proxy``: a ``CONNECT`` tunnel for ``https``, the absolute
URL for ``http``). httpcore's own pool costs about 0.3 ms of CPU per call
here, more than the whole budget the proxy has per call (docs/model-proxy.md,
speed).

The target (path and query) goes exactly as given: nothing is normalised or
re-encoded on the way. An answer's body is read decoded (a ``Content-Encoding``
gzip or deflate undone in pieces of bounded size,
:mod:`agentkit.proxy._encoding`). A connection whose answer was not read to
its end, or failed, is closed, never reused.

A failure is an :class:`UpstreamError`: ``answered`` False when no answer
started (the server could not be reached, or closed the connection before its
status line), True when the answer broke off.
"""

from __future__ import annotations

import asyncio
import base64
import ssl
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from urllib.parse import unquote, urlsplit

import attrs
import h11

from agentkit.proxy._encoding import DecodingError, decoder_for
from agentkit.proxy._http import Headers, field_bytes, read_at_most

__all__ = ["CONNECT_TIMEOUT", "KEEPALIVE", "Answer", "UpstreamClient", "UpstreamError"]

#: Seconds to open a connection to the server (through the HTTP proxy and TLS
#: included). Reading the answer has no timeout of its own: the agent's and the
#: rollout's bound it.
CONNECT_TIMEOUT = 60.0
#: Seconds an idle connection to a server is kept for the next call.
KEEPALIVE = 30.0
#: The most bytes an answer's head (status line and header fields) may hold.
MAX_HEAD = 64 * 1024
#: The most idle connections kept per endpoint.
MAX_IDLE = 1024
_READ = 64 * 1024


class UpstreamError(Exception):
    """A call to the model server failed; ``answered``: after its answer had started."""

    def __init__(self, message: str, *, answered: bool) -> None:
        super().__init__(message)
        self.answered = answered


@attrs.frozen
class _Origin:
    """Where calls to one endpoint go: the server, and the HTTP proxy on the way."""

    https: bool
    host: str
    port: int
    #: The Host header's value (``host[:port]`` as the endpoint's URL wrote it).
    netloc: bytes
    proxy: _Proxy | None


@attrs.frozen
class _Proxy:
    host: str
    port: int
    tls: bool
    #: ``Proxy-Authorization``, from the proxy URL's user and password.
    authorization: bytes | None


class _Connection:
    """One connection to a server (or to the HTTP proxy, for ``http``)."""

    __slots__ = ("h11", "idle_since", "reader", "writer")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.h11 = h11.Connection(h11.CLIENT, max_incomplete_event_size=MAX_HEAD)
        self.idle_since = 0.0

    def reusable(self, now: float) -> bool:
        """Open, not closed by the server, and not idle too long."""
        return (
            now - self.idle_since < KEEPALIVE
            and not self.writer.is_closing()
            and not self.reader.at_eof()
        )

    def abort(self) -> None:
        self.writer.transport.abort()

    async def next_event(self, timeout: float | None) -> object:
        event = self.h11.next_event()
        if event is not h11.NEED_DATA:
            return event
        async with asyncio.timeout(timeout):
            while event is h11.NEED_DATA:
                self.h11.receive_data(await self.reader.read(_READ))
                event = self.h11.next_event()
        return event


class Answer:
    """The server's answer: ``status``, ``reason``, ``headers``; the body from
    :meth:`chunks`."""

    __slots__ = ("_connection", "_timeout", "complete", "headers", "reason", "status")

    def __init__(
        self, connection: _Connection, response: h11.Response, timeout: float | None
    ) -> None:
        self._connection = connection
        self._timeout = timeout
        self.status = response.status_code
        self.reason = bytes(response.reason).decode("latin-1")
        self.headers = Headers(
            (name.decode("latin-1"), value.decode("latin-1"))
            for name, value in response.headers.raw_items()
        )
        #: The body was read to its end.
        self.complete = False

    def __repr__(self) -> str:
        return f"Answer({self.status})"

    async def chunks(self) -> AsyncIterator[bytes]:
        """The body as it arrives, decoded; raises :class:`UpstreamError` when it
        breaks off or cannot be decoded. What one read of the connection brings comes
        as one chunk (a stream's events the server wrote at once, written on at once)."""
        decoder = decoder_for(self.headers.get("content-encoding"))
        state = self._connection.h11
        following: object = None  # an event read past the last chunk
        while True:
            try:
                event = following or await self._connection.next_event(self._timeout)
                following = None
                if isinstance(event, h11.Data):
                    data = bytes(event.data)
                    following = state.next_event()
                    if isinstance(following, h11.Data):  # more of the body, read already
                        parts = [data]
                        while isinstance(following, h11.Data):
                            parts.append(bytes(following.data))
                            following = state.next_event()
                        data = b"".join(parts)
                    if following is h11.NEED_DATA:
                        following = None
            except h11.RemoteProtocolError as exc:
                raise UpstreamError(f"RemoteProtocolError: {exc}", answered=True) from None
            except (OSError, TimeoutError) as exc:
                raise UpstreamError(f"{type(exc).__name__}: {exc}", answered=True) from None
            if isinstance(event, h11.Data):
                if decoder is None:
                    yield data
                    continue
                pieces = decoder.feed(data)  # a bounded piece at a time: never all at once
                while True:
                    try:
                        piece = next(pieces, None)
                    except DecodingError as exc:
                        raise UpstreamError(str(exc), answered=True) from None
                    if piece is None:
                        break
                    yield piece
            elif isinstance(event, h11.EndOfMessage):
                break
            else:  # ConnectionClosed: h11 ends a body only where its framing ends
                raise UpstreamError("the server closed the connection", answered=True)
        self.complete = True
        if decoder is not None:
            try:
                tail = decoder.flush()
            except DecodingError as exc:
                raise UpstreamError(str(exc), answered=True) from None
            if tail:
                yield tail

    async def read(self, limit: int) -> bytes | None:
        """The whole body, decoded; None when it is larger than ``limit`` bytes."""
        return await read_at_most(self.chunks(), limit)


class UpstreamClient:
    """Connections to model servers, kept per endpoint and HTTP proxy (see the module)."""

    def __init__(self) -> None:
        self._idle: dict[tuple[str, str | None], list[_Connection]] = {}
        self._origins: dict[tuple[str, str | None], _Origin] = {}
        self._ssl: ssl.SSLContext | None = None

    def __repr__(self) -> str:
        return f"UpstreamClient({sum(map(len, self._idle.values()))} idle connections)"

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
        """Send ``method target`` to ``origin`` (``scheme://host[:port]``), through the
        HTTP proxy ``proxy`` if given, and hold its answer for the block. ``body``
        None: no body (and no ``Content-Length``). ``timeout``: seconds for each step
        (connecting, each read); None: :data:`CONNECT_TIMEOUT` to connect, no limit
        after."""
        key = (origin, proxy)
        where = self._origins.get(key) or self._origin(origin, proxy)
        connection = self._reuse(key)
        answer: Answer | None = None
        try:
            if connection is None:
                connection = await self._connect(where, timeout)
            answer = await _send(connection, where, method, target, headers, body, timeout)
            yield answer
        except (OSError, TimeoutError, h11.RemoteProtocolError) as exc:
            if answer is not None:
                raise  # the caller's: the agent's connection, or its own time limit
            raise UpstreamError(f"{type(exc).__name__}: {exc}", answered=False) from None
        finally:
            if connection is not None:
                self._release(key, connection, answer is not None and answer.complete)

    async def close(self) -> None:
        """Close every idle connection (those in use close with their calls)."""
        idle = [c for stack in self._idle.values() for c in stack]
        self._idle.clear()
        for connection in idle:
            connection.abort()

    def _reuse(self, key: tuple[str, str | None]) -> _Connection | None:
        stack = self._idle.get(key)
        now = time.monotonic()
        while stack:
            connection = stack.pop()
            if connection.reusable(now):
                return connection
            connection.abort()
        return None

    def _release(self, key: tuple[str, str | None], connection: _Connection, done: bool) -> None:
        state = connection.h11
        if not (done and state.our_state is h11.DONE and state.their_state is h11.DONE):
            connection.abort()  # not read to its end, failed, or the server closes it
            return
        state.start_next_cycle()
        now = connection.idle_since = time.monotonic()
        stack = self._idle.setdefault(key, [])
        while stack and not stack[0].reusable(now):  # the longest idle, gone stale
            stack.pop(0).abort()
        if len(stack) < MAX_IDLE:
            stack.append(connection)
        else:
            connection.abort()

    def _origin(self, origin: str, proxy: str | None) -> _Origin:
        parts = urlsplit(origin)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise UpstreamError(f"{origin!r} is not an http(s) origin", answered=False)
        https = parts.scheme == "https"
        where = _Origin(
            https=https,
            host=parts.hostname,
            port=parts.port or (443 if https else 80),
            netloc=_host_bytes(parts.netloc.rpartition("@")[2]),
            proxy=None if proxy is None else _proxy(proxy),
        )
        if len(self._origins) < 256:
            self._origins[(origin, proxy)] = where
        return where

    async def _connect(self, where: _Origin, timeout: float | None) -> _Connection:
        proxy = where.proxy
        async with asyncio.timeout(timeout or CONNECT_TIMEOUT):
            if proxy is None:
                reader, writer = await asyncio.open_connection(
                    where.host,
                    where.port,
                    ssl=self._context() if where.https else None,
                    server_hostname=where.host if where.https else None,
                )
                return _Connection(reader, writer)
            reader, writer = await asyncio.open_connection(
                proxy.host,
                proxy.port,
                ssl=self._context() if proxy.tls else None,
                server_hostname=proxy.host if proxy.tls else None,
            )
            if where.https:
                try:
                    await _tunnel(reader, writer, where, proxy)
                    await writer.start_tls(self._context(), server_hostname=where.host)
                except BaseException:
                    writer.transport.abort()
                    raise
            return _Connection(reader, writer)

    def _context(self) -> ssl.SSLContext:
        """The system's certificate authorities (``SSL_CERT_FILE`` and ``SSL_CERT_DIR``
        honoured), made once: loading them costs tens of milliseconds."""
        if self._ssl is None:
            self._ssl = ssl.create_default_context()
        return self._ssl


async def _send(
    connection: _Connection,
    where: _Origin,
    method: str,
    target: str,
    headers: list[tuple[str, str]],
    body: bytes | None,
    timeout: float | None,
) -> Answer:
    """Write the request; read the answer's head (interim 1xx answers skipped)."""
    state = connection.h11
    if where.proxy is not None and not where.https:  # through the proxy: the whole URL
        raw_target = b"http://" + where.netloc + target.encode("latin-1")
    else:
        raw_target = target.encode("latin-1")
    fields = [(b"Host", where.netloc)]
    fields += [(field_bytes(name), field_bytes(value)) for name, value in headers]
    if where.proxy is not None and not where.https and where.proxy.authorization:
        fields.append((b"Proxy-Authorization", where.proxy.authorization))
    if body is not None:
        fields.append((b"Content-Length", str(len(body)).encode()))
    out = [state.send(h11.Request(method=method, target=raw_target, headers=fields)) or b""]
    if body:
        out.append(state.send(h11.Data(data=body)) or b"")
    out.append(state.send(h11.EndOfMessage()) or b"")
    connection.writer.write(b"".join(out))
    await connection.writer.drain()
    while True:
        event = await connection.next_event(timeout)
        if isinstance(event, h11.Response):
            return Answer(connection, event, timeout)
        if not isinstance(event, h11.InformationalResponse):
            raise UpstreamError(
                "the server closed the connection without answering", answered=False
            )


async def _tunnel(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, where: _Origin, proxy: _Proxy
) -> None:
    """Ask the HTTP proxy for a tunnel to the server (``CONNECT host:port``)."""
    state = h11.Connection(h11.CLIENT, max_incomplete_event_size=MAX_HEAD)
    authority = _host_bytes(f"{where.host}:{where.port}")
    if ":" in where.host:  # an IPv6 address
        authority = f"[{where.host}]:{where.port}".encode()
    fields = [(b"Host", authority)]
    if proxy.authorization:
        fields.append((b"Proxy-Authorization", proxy.authorization))
    writer.write(
        (state.send(h11.Request(method=b"CONNECT", target=authority, headers=fields)) or b"")
        + (state.send(h11.EndOfMessage()) or b"")
    )
    await writer.drain()
    event = state.next_event()
    while event is h11.NEED_DATA or isinstance(event, h11.InformationalResponse):
        if event is h11.NEED_DATA:
            state.receive_data(await reader.read(_READ))
        event = state.next_event()
    status = event.status_code if isinstance(event, h11.Response) else None
    if status is None or not 200 <= status < 300:
        answer = "closed the connection" if status is None else f"answered HTTP {status}"
        raise UpstreamError(f"the HTTP proxy {answer} to CONNECT", answered=False)
    if state.trailing_data[0]:
        raise UpstreamError("the HTTP proxy sent bytes before the tunnel", answered=False)


def _proxy(url: str) -> _Proxy:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UpstreamError(f"the HTTP proxy {parts.scheme}://... is not http(s)", answered=False)
    authorization = None
    if parts.username is not None:
        pair = f"{unquote(parts.username)}:{unquote(parts.password or '')}"
        authorization = b"Basic " + base64.b64encode(pair.encode())
    tls = parts.scheme == "https"
    return _Proxy(parts.hostname, parts.port or (443 if tls else 80), tls, authorization)


def _host_bytes(host: str) -> bytes:
    """A host name (with its port) as it goes in a request: ASCII as it is, or IDNA
    (whose codec loads only for a name that needs it)."""
    return host.encode("ascii") if host.isascii() else host.encode("idna")
