"""A running sandbox command: live stdout lines, stdin, wait with timeout, tree kill."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
from collections.abc import AsyncIterator, Callable
from typing import Any

from agentkit._sandbox import ExecResult

__all__ = ["CommandProcess", "SandboxProcess", "read_json_fd", "spawn", "wait_readable"]

#: After the command exits, how long to keep reading output that background
#: children (``server &``) may still hold open.
DRAIN_GRACE_SEC = 0.2
_CHUNK = 1 << 16


class _ExitAwareProtocol(asyncio.subprocess.SubprocessStreamProtocol):
    """Signals the process's exit at once: ``Process.wait()`` (Python < 3.12)
    also waits for every pipe to close, which a background child can delay forever."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(limit=_CHUNK, loop=loop)
        self.exited = asyncio.Event()

    def process_exited(self) -> None:
        super().process_exited()
        self.exited.set()


async def wait_readable(fd: int) -> None:
    """Wait until ``fd`` can be read (or is at EOF) without blocking the event loop."""
    loop = asyncio.get_running_loop()
    ready: asyncio.Future[None] = loop.create_future()

    def wake() -> None:
        if not ready.done():
            ready.set_result(None)

    loop.add_reader(fd, wake)
    try:
        await ready
    finally:
        loop.remove_reader(fd)


async def read_json_fd(fd: int) -> Any:
    """Read one JSON document from pipe ``fd`` without blocking the event loop.

    Reads until the text parses; raises ``ValueError`` when the writer closes
    its end before that.
    """
    os.set_blocking(fd, False)
    data = b""
    while True:
        await wait_readable(fd)
        try:
            chunk = os.read(fd, 4096)
        except BlockingIOError:
            continue
        data += chunk
        if not chunk or data.rstrip().endswith(b"}"):
            try:
                return json.loads(data)
            except ValueError:
                if not chunk:
                    raise


async def spawn(
    argv: list[str],
    *,
    stdin: bool,
    env: dict[str, str],
    cwd: str | None,
    pass_fds: tuple[int, ...] = (),
) -> tuple[asyncio.subprocess.Process, asyncio.Event, asyncio.SubprocessTransport]:
    """Start ``argv`` in a new session with piped output; return it, its exit event
    and its transport (for :class:`SandboxProcess` to close once it is done)."""
    loop = asyncio.get_running_loop()
    transport, protocol = await loop.subprocess_exec(
        lambda: _ExitAwareProtocol(loop),
        *argv,
        stdin=asyncio.subprocess.PIPE if stdin else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
        cwd=cwd,
        start_new_session=True,
        pass_fds=pass_fds,
    )
    return asyncio.subprocess.Process(transport, protocol, loop), protocol.exited, transport


class _Stream:
    """Output of one pipe, kept up to a byte limit, split into lines as it comes."""

    def __init__(self, limit: int) -> None:
        self.lines: list[bytes] = []
        self.size = 0
        self.limit = limit
        self.truncated = False
        self.done = False
        self.changed = asyncio.Event()
        self._partial = b""

    def feed(self, data: bytes) -> None:
        if self.truncated:
            return
        data = self._partial + data
        *complete, self._partial = data.split(b"\n")
        for line in complete:
            self._add(line + b"\n")
        if len(self._partial) > self.limit:
            self._add(self._partial)
            self._partial = b""
        self.changed.set()

    def _add(self, line: bytes) -> None:
        if self.truncated:
            return
        if self.size + len(line) > self.limit:
            self.truncated = True
            return
        self.lines.append(line)
        self.size += len(line)

    def finish(self) -> None:
        if self._partial:
            self._add(self._partial)
            self._partial = b""
        self.done = True
        self.changed.set()

    def text(self) -> str:
        out = b"".join(self.lines).decode("utf-8", errors="replace")
        return out + ("\n[agentkit: output truncated]\n" if self.truncated else "")


class CommandProcess:
    """What a command running in any sandbox shares (see :meth:`agentkit.Sandbox.start`).

    Output is read as it comes and kept (up to ``max_output`` bytes per
    stream) for the final :class:`~agentkit.ExecResult`; its lines are read
    live; a timeout kills the command and everything it started. Each kind
    says how the command ends, is killed and gives its result.
    """

    def __init__(self, *, max_output: int, on_exit: Callable[[Any], None] | None) -> None:
        self._on_exit = on_exit
        self._stdout = _Stream(max_output)
        self._stderr = _Stream(max_output)
        self._result: ExecResult | None = None
        self._timed_out = False

    async def stdout_lines(self) -> AsyncIterator[str]:
        """Lines of standard output as they come (without the newline)."""
        i = 0
        stream = self._stdout
        while True:
            while i < len(stream.lines):
                yield stream.lines[i].rstrip(b"\n").decode("utf-8", errors="replace")
                i += 1
            if stream.done:
                return
            stream.changed.clear()
            if i < len(stream.lines) or stream.done:
                continue
            await stream.changed.wait()

    async def write_stdin(self, data: bytes, *, close: bool = True) -> None:
        """Send ``data`` to standard input (and close it, by default)."""
        raise NotImplementedError

    def output_so_far(self) -> str:
        """What the command wrote so far (its kept standard output, then its standard
        error), while it still runs."""
        return self._stdout.text() + self._stderr.text()

    async def wait(self, timeout: float | None = None) -> ExecResult:
        """Wait for the exit; on timeout kill the tree and set ``timed_out``."""
        if self._result is not None:
            return self._result
        try:
            await asyncio.wait_for(self._until_exit(), timeout)
        except TimeoutError:
            self._timed_out = True
            await self.kill()
        except BaseException:
            await self.kill()
            raise
        self._result = await self._finish()
        if self._on_exit is not None:
            self._on_exit(self)
        return self._result

    async def _until_exit(self) -> None:
        """Return once the command has exited."""
        raise NotImplementedError

    async def _finish(self) -> ExecResult:
        """The result of the command that exited (or was killed): its output read to
        the end, its connections closed."""
        raise NotImplementedError

    async def kill(self) -> None:
        """Kill the command and everything it started."""
        raise NotImplementedError


class SandboxProcess(CommandProcess):
    """A command started on the host for a sandbox (the local and host sandboxes).

    ``kill_tree`` kills the command and everything it started.
    """

    def __init__(
        self,
        proc: asyncio.subprocess.Process,
        exited: asyncio.Event,
        kill_tree: Callable[[], None],
        *,
        max_output: int,
        on_exit: Callable[[SandboxProcess], None] | None = None,
        transport: asyncio.SubprocessTransport | None = None,
    ) -> None:
        super().__init__(max_output=max_output, on_exit=on_exit)
        self._proc = proc
        self._transport = transport
        self._exited = exited
        self._kill_tree = kill_tree
        self._readers = [
            asyncio.ensure_future(self._pump(proc.stdout, self._stdout)),
            asyncio.ensure_future(self._pump(proc.stderr, self._stderr)),
        ]

    @property
    def pid(self) -> int:
        """The host pid of the process agentkit spawned for this command."""
        return self._proc.pid

    @staticmethod
    async def _pump(reader: asyncio.StreamReader | None, stream: _Stream) -> None:
        try:
            if reader is not None:
                while chunk := await reader.read(_CHUNK):
                    stream.feed(chunk)
        finally:
            stream.finish()

    async def write_stdin(self, data: bytes, *, close: bool = True) -> None:
        """Send ``data`` to standard input (and close it, by default)."""
        stdin = self._proc.stdin
        if stdin is None:
            raise RuntimeError("this process was started without a stdin pipe")
        try:
            stdin.write(data)
            await stdin.drain()
            if close:
                stdin.close()
        except (BrokenPipeError, ConnectionResetError):
            pass

    async def _until_exit(self) -> None:
        await self._exited.wait()

    async def _finish(self) -> ExecResult:
        # Background children may hold the pipes open: read what is there, briefly.
        _, pending = await asyncio.wait(self._readers, timeout=DRAIN_GRACE_SEC)
        for task in pending:
            task.cancel()
        for task in pending:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._proc.stdin is not None:
            self._proc.stdin.close()
        if self._transport is not None:
            # Pipes a background child still holds are closed now, in this event
            # loop: left to the garbage collector, they would be closed after it.
            self._transport.close()
        code = self._proc.returncode
        return ExecResult(
            exit_code=code if code is not None else -1,
            stdout=self._stdout.text(),
            stderr=self._stderr.text(),
            timed_out=self._timed_out,
        )

    async def kill(self) -> None:
        """Kill the process and everything it started."""
        self._kill_tree()
        if self._proc.returncode is None:
            # os.kill, not Popen.kill: Popen polls (reaps) first, which hides the
            # exit status from asyncio's child watcher.
            with contextlib.suppress(ProcessLookupError):
                os.kill(self._proc.pid, signal.SIGKILL)
            await self._exited.wait()
