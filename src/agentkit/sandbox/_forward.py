"""Reaching the run's model endpoint from a sandbox that has no network.

The sandbox's network namespace has only its own loopback. When the holder
starts, a tiny script (run by the orchestrator's own Python, bound read-only)
binds a listening socket to the endpoint's address *inside* that namespace,
hands the socket to the orchestrator over an inherited Unix socket
(``SCM_RIGHTS``) and turns into ``sleep``. The orchestrator accepts on it and
relays each connection to the real endpoint from the host's network. So
``http://127.0.0.1:PORT/v1`` works unchanged inside, and nothing else does.
A hostname endpoint (``https://api.example.com/v1``) is mapped to 127.0.0.1 in
the sandbox's ``/etc/hosts`` and relayed as raw TCP, so TLS stays end to end.
"""

from __future__ import annotations

import array
import asyncio
import ipaddress
import os
import socket
import sys
from urllib.parse import urlsplit

import attrs

from agentkit._errors import SandboxError
from agentkit.sandbox._process import wait_readable

__all__ = [
    "HOLDER_SCRIPT",
    "Endpoint",
    "Relay",
    "loopback_endpoint",
    "parse_endpoint",
    "python_for_holder",
    "receive_listener",
    "recv_fd",
]

#: Runs inside the sandbox: argv = host, port, fd of the Unix socket to the host,
#: the shell line to wait with afterwards (the lifeline, see ``_bwrap.LIFELINE``).
HOLDER_SCRIPT = """\
import array, os, _socket as socket, sys  # not socket: it imports enum (milliseconds)
host, port, chan_fd = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
family = socket.AF_INET6 if ":" in host else socket.AF_INET
lo = socket.socket(family, socket.SOCK_STREAM)
lo.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
lo.bind((host, port))
lo.listen(256)
chan = socket.socket(fileno=chan_fd)
fds = array.array("i", [lo.fileno()])
chan.sendmsg([b"L"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, fds)])
chan.close()
lo.close()
os.write(1, b"ready\\n")
os.execv("/bin/sh", ["sh", "-c", sys.argv[4]])
"""


@attrs.frozen
class Endpoint:
    """Where the model endpoint listens, and how the sandbox sees it."""

    url: str
    host: str
    port: int
    bind_host: str
    hosts_entry: str | None


def parse_endpoint(url: str) -> Endpoint:
    """Split ``url`` into what the relay connects to and what the sandbox binds."""
    parts = urlsplit(url)
    host = parts.hostname
    if parts.scheme not in ("http", "https") or not host:
        raise SandboxError(f"model endpoint {url!r}: expected an http(s) URL with a host")
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        raise SandboxError(f"model endpoint {url!r}: invalid port") from None
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        ip = None
    if ip is None:
        if host == "localhost":
            return Endpoint(url, host, port, "127.0.0.1", None)
        return Endpoint(url, host, port, "127.0.0.1", host)
    if not ip.is_loopback:
        raise SandboxError(
            f"model endpoint {url!r} cannot be forwarded into a sandbox without network: "
            "use a loopback address or a hostname, or allow the network"
        )
    return Endpoint(url, host, port, str(ip), None)


def loopback_endpoint(url: str) -> Endpoint | None:
    """The endpoint when a sandbox *with* network still needs the relay to reach it
    (a loopback address: the sandbox's loopback is its own), else None (a hostname
    or another address: reachable over its network)."""
    try:
        ep = parse_endpoint(url)
    except SandboxError:
        return None
    if ep.hosts_entry is not None:
        return None
    return ep


def python_for_holder() -> tuple[str, str]:
    """(interpreter, prefix to bind read-only) of the Python running agentkit."""
    exe = os.path.realpath(sys.executable)
    prefix = os.path.realpath(sys.base_prefix)
    if exe.startswith("/usr/"):
        return exe, ""
    if not exe.startswith(prefix + "/"):
        raise SandboxError(
            f"cannot expose this Python ({exe}) inside the sandbox for the model-endpoint "
            "forwarder; allow the network or run agentkit with a Python under /usr or its prefix"
        )
    return exe, prefix


def recv_fd(chan: socket.socket) -> socket.socket:
    """Receive the listening socket the holder sent over ``chan``."""
    fds = array.array("i")
    _, ancdata, _, _ = chan.recvmsg(1, socket.CMSG_SPACE(fds.itemsize))
    for level, kind, data in ancdata:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(data[: fds.itemsize])
    if not fds:
        raise SandboxError("the sandbox's model-endpoint forwarder sent no socket")
    return socket.socket(fileno=fds[0])


async def receive_listener(
    chan: socket.socket, holder: asyncio.subprocess.Process, *, timeout: float
) -> socket.socket:
    """The listening socket the holder sends over ``chan``, without waiting forever.

    Waits until ``chan`` can be read (the socket came, or every copy of its
    other end is closed), the ``holder`` process exits or ``timeout`` seconds
    pass, whichever comes first; a holder that is gone or sent nothing by then
    is a :class:`SandboxError` (the caller takes the sandbox down).
    """
    chan.setblocking(False)
    readable = asyncio.ensure_future(wait_readable(chan.fileno()))
    exited = asyncio.ensure_future(holder.wait())
    try:
        await asyncio.wait({readable, exited}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiting in (readable, exited):
            waiting.cancel()
        await asyncio.gather(readable, exited, return_exceptions=True)
    try:
        return recv_fd(chan)
    except (BlockingIOError, InterruptedError):
        why = "exited" if holder.returncode is not None else f"did not within {timeout:g} s"
        raise SandboxError(
            f"the sandbox's model-endpoint forwarder sent no socket (its holder {why})"
        ) from None


class Relay:
    """Accepts on the in-sandbox listening socket and relays to the real endpoint."""

    def __init__(self, listener: socket.socket, endpoint: Endpoint) -> None:
        self._listener = listener
        self._endpoint = endpoint
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        self._listener.setblocking(False)
        self._server = await asyncio.start_server(self._handle, sock=self._listener)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        try:
            try:
                up_r, up_w = await asyncio.open_connection(self._endpoint.host, self._endpoint.port)
            except OSError:
                return
            try:
                await asyncio.gather(_pump(reader, up_w), _pump(up_r, writer))
            finally:
                up_w.close()  # ended (or cancelled by close): the endpoint sees it go
        finally:
            writer.close()
            if task is not None:
                self._tasks.discard(task)

    async def close(self) -> None:
        """Stop accepting, end every relayed connection and wait for them, close the
        listener. A cancellation of the caller (or a Ctrl-C) meanwhile goes through:
        only what the connections themselves ended with is not raised here."""
        if self._server is not None:
            self._server.close()
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        try:
            if tasks:
                # asyncio.wait raises nothing of the tasks', and lets this task's own
                # cancellation through
                await asyncio.wait(tasks)
            for task in tasks:
                if task.done() and not task.cancelled():
                    task.exception()  # retrieved: a connection's own failure is not ours
        finally:
            self._listener.close()


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(1 << 16):
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except (ConnectionError, OSError):
        writer.close()
