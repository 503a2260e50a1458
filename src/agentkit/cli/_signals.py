"""Stopping a run on a signal: Ctrl-C, SIGTERM and SIGHUP stop it cleanly and resumably.

A stop signal never raises ``KeyboardInterrupt`` wherever the main thread
happens to be: an exception thrown into the middle of the event loop's own
bookkeeping can stop the loop with callbacks still pending, such as the one
that tells the async runtime's worker threads to exit, and the process then
never exits (it waits for those threads at interpreter shutdown). Instead
the first signal asks the event loop to cancel the run, which unwinds like
any cancellation: rollouts in flight stop, sandboxes close, summary.json is
written, worker threads are told to exit. A second signal exits at once,
which the run directory survives as it survives ``kill -9``; it works even
when a harness keeps the event loop busy.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path
from types import FrameType
from typing import Any, TypeVar

import anyio

__all__ = ["STOP_SIGNALS", "run_resumable", "run_stoppable"]

T = TypeVar("T")

#: The signals that stop a run: Ctrl-C, ``kill PID`` and a closed terminal.
STOP_SIGNALS: tuple[signal.Signals, ...] = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def run_stoppable(start: Callable[[], Awaitable[T]], received: list[int]) -> T:
    """Run ``start()`` on a new event loop; a stop signal cancels it cleanly.

    Returns what ``start()`` returns. When a signal stopped it, its number is
    appended to ``received`` and :class:`KeyboardInterrupt` is raised once
    everything has been cleaned up.
    """
    running: dict[str, Any] = {}

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        if received:
            _exit_now(signum)
        received.append(signum)
        loop, scope = running.get("loop"), running.get("scope")
        if loop is None or scope is None:
            raise KeyboardInterrupt  # nothing runs yet: there is nothing to unwind
        try:
            loop.call_soon_threadsafe(scope.cancel)
        except RuntimeError:  # the loop is closing: the run is over anyway
            pass

    async def main() -> list[T]:
        with anyio.CancelScope() as scope:
            running["loop"], running["scope"] = asyncio.get_running_loop(), scope
            return [await start()]
        return []

    if threading.current_thread() is not threading.main_thread():
        outcome = anyio.run(main)
    else:
        previous = {sig: signal.signal(sig, on_signal) for sig in STOP_SIGNALS}
        try:
            outcome = anyio.run(main)
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
    if not outcome:
        raise KeyboardInterrupt
    return outcome[0]


def run_resumable(start: Callable[[], Awaitable[T]], where: Path | None, command: str) -> T:
    """:func:`run_stoppable`; when a signal stopped it, say where the finished rollouts
    are and how to continue (``command --resume where``), then exit with 128 plus the
    signal's number."""
    received: list[int] = []
    try:
        return run_stoppable(start, received)
    except KeyboardInterrupt:
        sys.stderr.write(
            f"Interrupted. Finished rollouts are saved in {where}; continue with: "
            f"{command} --resume {where}\n"
        )
        sys.exit(128 + (received[0] if received else signal.SIGINT))


def _exit_now(signum: int) -> None:
    sys.stderr.write(
        "agentkit: stopped at once by a second signal; every finished rollout is saved "
        "(continue with agentkit run --resume DIR)\n"
    )
    sys.stderr.flush()
    os._exit(128 + signum)
