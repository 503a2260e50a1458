"""HttpServer: the model proxy's HTTP/1.1 server, on asyncio streams, parsed by h11.

h11 (the sans-IO HTTP/1.1 library httpcore, and so agentkit's chat client, is
built on) reads every request and frames every answer; this module moves the
bytes and keeps the rules of one connection:

- one request at a time (h11's state machine): a request pipelined behind
  another waits, unread, until the first is answered (asyncio's stream holds
  at most twice :data:`READ_LIMIT` bytes of them, then stops reading);
- a request whose head is not HTTP/1.1 h11 reads, or holds both
  ``Content-Length`` and ``Transfer-Encoding``, gets a 400 (a head longer than
  :data:`MAX_HEAD` bytes a 431, a transfer coding other than chunked a 501)
  and the connection is closed;
- a request head must arrive within :data:`IDLE_TIMEOUT` seconds of the
  connection being ready for it (a kept-alive connection idle that long is
  closed), and a body may pause that long between two reads;
- an agent that sends ``Expect: 100-continue`` gets its ``100 Continue`` when
  the handler starts to read the body;
- once the body has been read, the handler runs until it has answered, unless
  the agent hangs up first (asyncio's protocol tells of the connection's end at
  once): then the handler is cancelled (the proxy records that the agent left,
  and drops the server's answer);
- an answer sent before the request's body was read closes the connection
  (``Connection: close``), without cutting the answer off; a handler that fails
  drops the connection.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable, Coroutine
from http import HTTPStatus
from typing import Any

import h11

from agentkit.proxy._http import (
    ClientGone,
    Headers,
    Request,
    Response,
    StreamResponse,
    field_bytes,
)

__all__ = ["IDLE_TIMEOUT", "MAX_HEAD", "READ_LIMIT", "HttpServer"]

#: The most bytes a request's head (request line and header fields) may hold.
MAX_HEAD = 64 * 1024
#: Seconds a connection may wait for a request's whole head, or between two reads of a
#: body (aiohttp's keep-alive timeout).
IDLE_TIMEOUT = 75.0
#: A connection's stream buffer (asyncio's ``limit``): what an agent sends ahead, such as
#: a request pipelined behind the one being answered, is read up to twice this.
READ_LIMIT = 64 * 1024
#: Seconds a connection closed before its request's body was read goes on reading (and
#: dropping) what the agent still sends, so the agent reads its answer before the close.
LINGER_SECONDS = 2.0
_READ = 64 * 1024

Handler = Callable[[Request], Coroutine[Any, Any, "Response | StreamResponse"]]
#: Makes the answer to a request the server cannot read: ``(status, message)``.
Malformed = Callable[[int, str], Response]

_log = logging.getLogger("agentkit")


class HttpServer:
    """Serves ``handler`` on ``host:port`` (``port`` 0: one the system chooses).

    :meth:`start` binds it and returns the port; :meth:`close` stops listening and
    cancels the requests in flight. ``malformed`` makes the answer to a request that
    is not HTTP/1.1 the server can read (plain text if None).
    """

    def __init__(
        self,
        handler: Handler,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        malformed: Malformed | None = None,
        backlog: int = 4096,
    ) -> None:
        self.host = host
        self.port = port
        self._handler = handler
        self._malformed = malformed
        self._backlog = backlog
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()

    def __repr__(self) -> str:
        state = f"{self.host}:{self.port}" if self._server is not None else "not running"
        return f"HttpServer({state}, {len(self._connections)} connections)"

    async def start(self) -> int:
        """Listen; returns the port."""
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            lambda: _Protocol(self._serve), self.host, self.port, backlog=self._backlog
        )
        self.port = self._server.sockets[0].getsockname()[1]
        return self.port

    async def close(self) -> None:
        """Stop listening and cut every connection (their handlers are cancelled and
        given a few seconds to finish)."""
        server, self._server = self._server, None
        if server is None:
            return
        server.close()
        tasks = list(self._connections)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=5)
        await server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        protocol = writer.transport.get_protocol()
        assert isinstance(protocol, _Protocol)
        try:
            await _Connection(self, reader, writer, protocol, task).run()
        except asyncio.CancelledError:
            pass  # close() cut the connection; asyncio's own callback must not see it
        finally:
            self._connections.discard(task)


class _Protocol(asyncio.StreamReaderProtocol):
    """asyncio's stream protocol, which also says at once when the agent's end of the
    connection closes (:attr:`gone`, and ``on_gone``)."""

    def __init__(
        self, connected: Callable[[asyncio.StreamReader, asyncio.StreamWriter], Any]
    ) -> None:
        super().__init__(asyncio.StreamReader(limit=READ_LIMIT), connected)
        self.gone = False
        self.on_gone: Callable[[], None] | None = None

    def eof_received(self) -> bool | None:
        keep = super().eof_received()
        self._went()
        return keep

    def connection_lost(self, exc: Exception | None) -> None:
        super().connection_lost(exc)
        self._went()

    def _went(self) -> None:
        self.gone = True
        if self.on_gone is not None:
            self.on_gone()


class _Connection:
    """One agent's connection: its requests, one at a time (see the module)."""

    def __init__(
        self,
        server: HttpServer,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        protocol: _Protocol,
        task: asyncio.Task[None],
    ) -> None:
        self._h11 = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD)
        self._handler = server._handler
        self._malformed = server._malformed
        self._reader = reader
        self._writer = writer
        self._protocol = protocol
        self._task = task
        self._method = b""
        self._watching = False  # the handler works on a read request: a hang-up stops it
        self._aborted = False
        protocol.on_gone = self._on_gone

    async def run(self) -> None:
        try:
            while True:
                request = await self._next_request()
                if request is None or not await self._answer(request):
                    break
                self._h11.start_next_cycle()
        except OSError:
            self.abort()
        except asyncio.CancelledError:  # the server closes
            self.abort()
            raise
        finally:
            await self._close()

    async def _read(self) -> bytes:
        try:
            return await self._reader.read(_READ)
        except OSError:  # reset by the agent: as if it closed
            return b""

    async def _next_request(self) -> Request | None:
        """The next request's head (None: the agent closed, was idle too long, or sent
        what is not HTTP, which is answered here)."""
        try:
            event = await self._event()
        except TimeoutError:
            return None
        except h11.RemoteProtocolError as exc:
            await self._refuse(exc.error_status_hint, _why(exc))
            return None
        if not isinstance(event, h11.Request):
            return None  # ConnectionClosed
        self._method = event.method
        headers = Headers(
            (name.decode("latin-1"), value.decode("latin-1"))
            for name, value in event.headers.raw_items()
        )
        if "transfer-encoding" in headers and "content-length" in headers:
            # a body framed two ways may be read otherwise by another server (smuggling)
            await self._refuse(400, "the request has both Content-Length and Transfer-Encoding")
            return None
        return Request(event.method.decode("ascii"), event.target.decode("latin-1"), headers, self)

    async def _event(self) -> object:
        """The next event h11 reads; more bytes are read while it needs them, for at most
        IDLE_TIMEOUT seconds (TimeoutError)."""
        event = self._h11.next_event()
        if event is h11.NEED_DATA:
            async with asyncio.timeout(IDLE_TIMEOUT):
                while event is h11.NEED_DATA:
                    self._h11.receive_data(await self._read())
                    event = self._h11.next_event()
        return event

    async def _answer(self, request: Request) -> bool:
        """Run the handler and send its answer; whether the connection goes on."""
        try:
            answer = await self._handler(request)
        except asyncio.CancelledError:
            # the agent hung up (or the server closes, or the handler dropped the
            # connection itself): nothing more goes on this connection
            self.abort()
            return False
        except Exception as failure:
            if not isinstance(failure, (ClientGone, OSError)):
                _log.error("the model proxy failed to answer %r", request, exc_info=failure)
                if self._h11.our_state is h11.SEND_RESPONSE:
                    await self._refuse(500, "the model proxy failed (see its log)")
                    return False
            self.abort()
            return False
        finally:
            self._watching = False
        if self._aborted:
            return False
        if isinstance(answer, Response):
            await self._send(answer)
        elif not answer.ended:  # a stream the handler left unfinished: cut off
            self.abort()
            return False
        return self._h11.our_state is h11.DONE and self._h11.their_state is h11.DONE

    def _on_gone(self) -> None:
        if self._watching:  # the agent hung up while its request is handled
            self._watching = False
            self._task.cancel()

    # -- what a Request and its answer use (agentkit.proxy._http.Exchange) --

    async def body_events(self) -> AsyncIterator[bytes]:
        """The request body's bytes as they arrive; the connection is watched for the
        agent hanging up once the body has ended."""
        if self._h11.they_are_waiting_for_100_continue:
            self._writer.write(
                self._h11.send(h11.InformationalResponse(status_code=100, headers=[])) or b""
            )
        while True:
            try:
                event = await self._event()
            except TimeoutError:
                message = f"the agent sent no more of its body for {IDLE_TIMEOUT:g} s"
                raise ClientGone(message) from None
            except h11.RemoteProtocolError as exc:
                raise ClientGone(f"the request body ended badly: {exc}") from None
            if isinstance(event, h11.Data):
                yield bytes(event.data)
            elif isinstance(event, h11.EndOfMessage) or event is h11.PAUSED:
                # read: from now on a hang-up stops the handler
                self._watching = True
                if self._protocol.gone:
                    self._on_gone()
                return
            else:
                raise ClientGone("the agent closed the connection before its body ended")

    async def start(self, status: int, reason: str | None, headers: list[tuple[str, str]]) -> None:
        self._check_open()
        self._writer.write(self._head(status, reason, headers) or b"")
        await self._writer.drain()

    async def write(self, data: bytes) -> None:
        self._check_open()
        self._writer.write(self._h11.send(h11.Data(data=data)) or b"")
        await self._writer.drain()

    async def end(self) -> None:
        self._check_open()
        self._writer.write(self._h11.send(h11.EndOfMessage()) or b"")
        await self._writer.drain()

    def abort(self) -> None:
        if not self._aborted:
            self._aborted = True
            self._writer.transport.abort()

    # -- the connection's own --

    def _check_open(self) -> None:
        if self._aborted or self._writer.is_closing():
            raise ConnectionResetError("the agent's connection is closed")

    def _head(
        self, status: int, reason: str | None, headers: list[tuple[str, str]]
    ) -> bytes | None:
        fields = [(field_bytes(name), field_bytes(value)) for name, value in headers]
        if not self._read_through():
            # answered before its body was read: the connection cannot carry another
            fields.append((b"Connection", b"close"))
        return self._h11.send(
            h11.Response(status_code=status, headers=fields, reason=_reason(status, reason))
        )

    def _read_through(self) -> bool:
        """Whether the request's body has been read, reading (and dropping) what of it
        is here already: an empty body, or one the handler did not need."""
        try:
            while self._h11.their_state is h11.SEND_BODY:
                event = self._h11.next_event()
                if event is h11.NEED_DATA:
                    return False
        except h11.RemoteProtocolError:
            return False
        return True

    async def _send(self, response: Response) -> None:
        """A whole answer, in one write."""
        self._check_open()
        headers = response.headers
        if response.status >= 200 and response.status not in (204, 304):
            headers = [*headers, ("Content-Length", str(len(response.body)))]
        out = [self._head(response.status, response.reason, headers) or b""]
        if response.body and self._method != b"HEAD":
            out.append(self._h11.send(h11.Data(data=response.body)) or b"")
        out.append(self._h11.send(h11.EndOfMessage()) or b"")
        self._writer.write(b"".join(out))
        await self._writer.drain()

    async def _refuse(self, status: int, message: str) -> None:
        """Answer a request the server will not read further, and close after it."""
        if self._h11.our_state not in (h11.IDLE, h11.SEND_RESPONSE):
            return
        text = f"agentkit model proxy: {message}"
        if self._malformed is not None:
            answer = self._malformed(status, text)
        else:
            answer = Response(status, text.encode(), content_type="text/plain; charset=utf-8")
        answer.headers.append(("Connection", "close"))
        try:
            await self._send(answer)
        except (OSError, h11.LocalProtocolError):
            self.abort()

    async def _close(self) -> None:
        if self._aborted:
            return
        writer = self._writer
        if self._h11.their_state in (h11.SEND_BODY, h11.ERROR) and writer.can_write_eof():
            # the agent may still be sending: let it read the answer before the close
            # (closing with its bytes unread would reset the connection under it)
            try:
                writer.write_eof()
                async with asyncio.timeout(LINGER_SECONDS):
                    while await self._read():
                        pass
            except (TimeoutError, OSError):
                pass
            except asyncio.CancelledError:
                self.abort()
                raise
        writer.close()


def _why(exc: h11.RemoteProtocolError) -> str:
    if exc.error_status_hint == 431:
        return f"the request's head is larger than {MAX_HEAD} bytes"
    return f"the request is not HTTP/1.1 the proxy can read ({exc})"


def _reason(status: int, reason: str | None) -> bytes:
    if reason:
        return field_bytes(reason)
    try:
        return HTTPStatus(status).phrase.encode()
    except ValueError:
        return b""
