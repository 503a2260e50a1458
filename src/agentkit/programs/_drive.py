"""Driving an agent program started in a sandbox: its input, its live output, its end."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agentkit._events import EventRecorder
    from agentkit._sandbox import ExecResult, Process

__all__ = ["STDERR_TAIL", "drive", "kill_shielded", "stderr_tail", "time_left", "timeout_error"]

#: How much of a program's standard error (its end) is logged and quoted.
STDERR_TAIL = 4000


async def drive(
    proc: Process,
    *,
    on_line: Callable[[str], Awaitable[None]],
    timeout: float | None,
    stdin: bytes | None = None,
    recorder: EventRecorder | None = None,
) -> ExecResult:
    """Send ``stdin`` (then close it), hand each line of standard output to
    ``on_line`` as it is printed, and wait for the exit.

    On timeout the process tree is killed and the result says ``timed_out``;
    ``on_line`` may call ``proc.kill()`` to stop the program early. Whatever
    ends this call otherwise (an exception, cancellation) kills the tree
    first, so no process is left behind. A failing ``on_line`` is reported
    as a ``log`` warning on ``recorder`` and the program keeps running.
    """

    async def pump() -> None:
        async for line in proc.stdout_lines():
            try:
                await on_line(line)
            except Exception as exc:  # a reader bug must not leave the program running blind
                if recorder is not None:
                    await recorder.emit(
                        "log",
                        level="warning",
                        message=f"could not read a line of output: {type(exc).__name__}: {exc}",
                    )

    reader = asyncio.ensure_future(pump())
    try:
        await proc.write_stdin(stdin or b"", close=True)
        outcome = await proc.wait(timeout)
        await reader
        return outcome
    except BaseException:
        reader.cancel()
        await kill_shielded(proc)
        raise


async def kill_shielded(proc: Process) -> None:
    """Kill ``proc``'s tree and reap it, even while the calling task is being cancelled."""
    import anyio

    with anyio.CancelScope(shield=True), contextlib.suppress(Exception):
        await proc.kill()
        await proc.wait(5)


def time_left(timeout: float | None, started: float) -> float | None:
    """What is left of ``timeout`` seconds counted from ``started`` (a
    :func:`time.monotonic` reading taken before the program's set-up), at least
    a millisecond; None without a timeout."""
    if timeout is None:
        return None
    return max(0.001, timeout - (time.monotonic() - started))


def timeout_error(program: str, timeout: float | None) -> str:
    """The error of a run killed at its timeout, naming ``program`` as users know it."""
    if timeout is None:
        return f"{program} timed out"
    return f"{program} did not finish within {timeout:g} s; its process tree was killed"


async def stderr_tail(
    outcome: ExecResult,
    redact: Callable[[str], str],
    recorder: EventRecorder,
    *,
    source: str,
) -> str:
    """The program's standard error, redacted and cut to its last
    :data:`STDERR_TAIL` characters; when there is any it is recorded as an info
    ``log`` event from ``source`` (``<harness>.stderr``)."""
    stderr = redact(outcome.stderr.strip())[-STDERR_TAIL:]
    if stderr:
        await recorder.emit("log", level="info", source=source, message=stderr)
    return stderr
