"""A command running in a container (``docker exec``): live output, stdin, wait, tree kill.

Output arrives over the exec's attached stream (stdout and stderr
multiplexed); it is kept as the local sandbox keeps it (capped, split into
lines). The command has exited when the engine closes that stream: right
away, or, when a background child still holds the command's output open,
after the engine's own grace of 2 s (as with ``docker exec``). On timeout or
kill the command's process tree (its descendants and its session) is killed
from the host, found from the exec's host pid.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Any

from agentkit._errors import SandboxError
from agentkit._sandbox import ExecResult
from agentkit.sandbox._process import CommandProcess
from agentkit.sandbox._proctree import kill_tree

__all__ = ["DockerProcess"]

#: After a kill, how long to wait for the engine to close the command's output.
_KILL_DRAIN_SEC = 5.0


class DockerProcess(CommandProcess):
    """A command started with :meth:`DockerSandbox.exec` or :meth:`DockerSandbox.start`."""

    def __init__(
        self,
        execution: Any,
        stream: Any,
        find_pid: Callable[[Any], Awaitable[int]],
        *,
        max_output: int,
        exit_note: Callable[[int], Awaitable[str | None]] | None = None,
        on_exit: Callable[[DockerProcess], None] | None = None,
    ) -> None:
        super().__init__(max_output=max_output, on_exit=on_exit)
        self._exec = execution
        self._stream = stream
        self._find_pid = find_pid
        #: The command's host pid, once known (found when it must be killed).
        self.pid = 0
        self._exit_note = exit_note
        self._done = asyncio.Event()
        self._reader = asyncio.ensure_future(self._pump())
        self._stdin_closed = False

    async def _pump(self) -> None:
        try:
            while True:
                msg = await self._stream.read_out()
                if msg is None:
                    break
                (self._stderr if msg.stream == 2 else self._stdout).feed(msg.data)
        except Exception:
            pass  # the connection went away: the command is over for us
        finally:
            self._stdout.finish()
            self._stderr.finish()
            self._done.set()

    async def write_stdin(self, data: bytes, *, close: bool = True) -> None:
        """Send ``data`` to standard input (and close it, by default)."""
        if self._stdin_closed:
            raise RuntimeError("this process's stdin is closed")
        try:
            await self._stream.write_in(data)
            if close:
                self._close_stdin()
        except (ConnectionError, RuntimeError, OSError):
            pass

    def _close_stdin(self) -> None:
        """Half-close the attached connection: the command reads end-of-file."""
        self._stdin_closed = True
        resp = getattr(self._stream, "_resp", None)
        transport = getattr(getattr(resp, "connection", None), "transport", None)
        if transport is None or not transport.can_write_eof():
            raise SandboxError("cannot close the command's stdin on this connection")
        transport.write_eof()

    async def _until_exit(self) -> None:
        await self._done.wait()

    async def _finish(self) -> ExecResult:
        code = -1
        with contextlib.suppress(Exception):
            info = await self._exec.inspect()
            if info.get("ExitCode") is not None and not info.get("Running"):
                code = int(info["ExitCode"])
        await self._close()
        stderr = self._stderr.text()
        if self._exit_note is not None and not self._timed_out:
            note = await self._exit_note(code)
            if note:
                stderr += f"\n[agentkit: {note}]\n"
        return ExecResult(
            exit_code=code,
            stdout=self._stdout.text(),
            stderr=stderr,
            timed_out=self._timed_out,
        )

    async def kill(self) -> None:
        """Kill the command and everything it started (its descendants and session)."""
        if not self.pid:
            self.pid = await self._find_pid(self._exec)
        if self.pid > 1:  # never 0 or 1: a session id 0 is most of the host's processes
            await asyncio.to_thread(kill_tree, [self.pid], [self.pid])
        if self._done.is_set():
            return
        try:
            await asyncio.wait_for(asyncio.shield(self._done.wait()), _KILL_DRAIN_SEC)
        except TimeoutError:
            await self._close()

    async def _close(self) -> None:
        if not self._reader.done():
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._reader
        with contextlib.suppress(Exception):
            await self._stream.close()
