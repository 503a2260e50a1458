"""The HTTP messages the proxy's handlers see: a request, and the answers they give.

:class:`Request` is an agent's request as the proxy's server
(:mod:`agentkit.proxy._http_server`) read its head: method, target as it came,
headers; its body is read on demand, decoded (:meth:`Request.iter_body`). A
handler answers with a :class:`Response` (a whole answer, sent in one write)
or a :class:`StreamResponse` it writes chunk by chunk as the answer arrives.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Iterator
from typing import Protocol

from agentkit.proxy._encoding import decoder_for

__all__ = [
    "ClientGone",
    "Headers",
    "Request",
    "Response",
    "StreamResponse",
    "field_bytes",
    "read_at_most",
]


async def read_at_most(chunks: AsyncIterator[bytes], limit: int) -> bytes | None:
    """A body's chunks joined; None as soon as they come to more than ``limit`` bytes (the
    rest is left unread)."""
    parts: list[bytes] = []
    size = 0
    async for chunk in chunks:
        size += len(chunk)
        if size > limit:
            return None
        parts.append(chunk)
    return b"".join(parts)


class ClientGone(ConnectionError):
    """The agent closed its connection, or stopped sending, before its request's body
    ended."""


class Headers:
    """Header fields in the order they came, names as written and repeats kept
    (:meth:`items`); :meth:`get` and ``in`` ignore the names' case."""

    __slots__ = ("_first", "_items")

    def __init__(self, items: Iterable[tuple[str, str]]) -> None:
        self._items = list(items)
        self._first: dict[str, str] = {}
        for name, value in self._items:
            self._first.setdefault(name.lower(), value)

    def get(self, name: str, default: str | None = None) -> str | None:
        """The first value of ``name`` (any case), else ``default``."""
        return self._first.get(name.lower(), default)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name.lower() in self._first

    def items(self) -> list[tuple[str, str]]:
        """Every field, ``(name, value)``, in order."""
        return list(self._items)

    def __iter__(self) -> Iterator[tuple[str, str]]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __repr__(self) -> str:
        return f"Headers({self._items!r})"


class Exchange(Protocol):
    """What a request and its answer need of the connection they came on (the server's
    side of one request)."""

    def body_events(self) -> AsyncIterator[bytes]:
        """The request body's bytes as they arrive, as sent (still encoded)."""
        ...

    async def start(self, status: int, reason: str | None, headers: list[tuple[str, str]]) -> None:
        """Send the answer's status line and headers."""
        ...

    async def write(self, data: bytes) -> None:
        """Send part of the answer's body."""
        ...

    async def end(self) -> None:
        """Send the answer's end."""
        ...

    def abort(self) -> None:
        """Drop the connection at once."""
        ...


class Request:
    """An agent's request: ``method``, ``raw_path`` (the target exactly as sent:
    path and query, or whatever else the agent wrote there) and ``headers``."""

    __slots__ = ("_exchange", "headers", "method", "raw_path")

    def __init__(self, method: str, raw_path: str, headers: Headers, exchange: Exchange) -> None:
        self.method = method
        self.raw_path = raw_path
        self.headers = headers
        self._exchange = exchange

    def __repr__(self) -> str:
        return f"Request({self.method} {self.raw_path})"

    @property
    def content_length(self) -> int | None:
        """The body's length as the ``Content-Length`` header gives it (None: none)."""
        value = self.headers.get("content-length")
        return int(value) if value is not None and value.isdigit() else None

    async def iter_body(self) -> AsyncIterator[bytes]:
        """The body as it arrives, its ``Content-Encoding`` (gzip, deflate) undone in
        pieces of bounded size (:mod:`agentkit.proxy._encoding`): a caller that stops
        reading at a cap never holds more than the cap and a piece. Raises
        :class:`ClientGone` when the agent leaves before the body ends, and
        :class:`~agentkit.proxy._encoding.DecodingError`."""
        decoder = decoder_for(self.headers.get("content-encoding"))
        async for data in self._exchange.body_events():
            if decoder is None:
                yield data
            else:
                for piece in decoder.feed(data):
                    yield piece
        if decoder is not None:
            tail = decoder.flush()
            if tail:
                yield tail

    def abort(self) -> None:
        """Drop the agent's connection at once (it sees the connection fail, as when
        the server's did)."""
        self._exchange.abort()


class Response:
    """A whole answer: ``status``, ``headers`` and ``body``, sent in one write."""

    __slots__ = ("body", "headers", "reason", "status")

    def __init__(
        self,
        status: int,
        body: bytes = b"",
        *,
        reason: str | None = None,
        headers: Iterable[tuple[str, str]] = (),
        content_type: str | None = None,
    ) -> None:
        self.status = status
        self.reason = reason
        self.body = body
        self.headers = list(headers)
        if content_type is not None:
            self.headers.append(("Content-Type", content_type))

    def __repr__(self) -> str:
        return f"Response({self.status}, {len(self.body)} bytes)"


class StreamResponse:
    """An answer written as it arrives: add to :attr:`headers`, then :meth:`prepare`
    (sends the status and headers), :meth:`write` each chunk, :meth:`write_eof`."""

    __slots__ = ("_exchange", "ended", "headers", "reason", "status")

    def __init__(self, status: int, reason: str | None = None) -> None:
        self.status = status
        self.reason = reason
        self.headers: list[tuple[str, str]] = []
        self._exchange: Exchange | None = None
        #: The answer's end was sent.
        self.ended = False

    def __repr__(self) -> str:
        return f"StreamResponse({self.status}, prepared={self.prepared})"

    @property
    def prepared(self) -> bool:
        """Whether the status and headers were sent."""
        return self._exchange is not None

    async def prepare(self, request: Request) -> None:
        """Send the status and headers to ``request``'s agent."""
        self._exchange = request._exchange
        await self._exchange.start(self.status, self.reason, self.headers)

    async def write(self, data: bytes) -> None:
        """Send ``data`` (raises an :class:`OSError` when the agent's connection is gone)."""
        assert self._exchange is not None, "prepare() first"
        if data:
            await self._exchange.write(data)

    async def write_eof(self) -> None:
        """End the answer."""
        assert self._exchange is not None, "prepare() first"
        if not self.ended:
            self.ended = True
            await self._exchange.end()


def field_bytes(text: str) -> bytes:
    """A header field's name or value as bytes: Latin-1 (what it was read as), or UTF-8
    for a value of the run's own that Latin-1 cannot hold."""
    try:
        return text.encode("latin-1")
    except UnicodeEncodeError:
        return text.encode("utf-8")
