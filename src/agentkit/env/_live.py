"""Delivering harness events to ``trace_callback`` live, without letting it stall runs.

Policy (documented in docs/agentenv.md):

* every rollout has its own bounded buffer (``event_buffer`` events, 1000 by
  default); the harness's ``on_event`` only puts the event there and never
  waits, so a slow callback cannot slow a harness down;
* one consumer per rollout calls the callback in sequence order; an ``async``
  callback is awaited on the event loop, a plain function runs in a worker
  thread, so it cannot block the loop either;
* when a buffer is full, the newest event is dropped for the callback (it is
  still stored in the run directory) and counted on the rollout record;
* a callback that raises is reported once (a warning, and in summary.json)
  and receives no further events; scoring never depends on it;
* at the end of the run, consumers get ``drain_timeout`` seconds to catch up;
  what is left is dropped and counted (a plain function still running in its
  daemon thread is abandoned: its event counts as dropped, and it cannot keep
  the process alive at exit).
"""

from __future__ import annotations

import concurrent.futures
import inspect
import logging
import threading
from collections.abc import Callable
from typing import Any

import anyio
from anyio.abc import TaskGroup

from agentkit._events import Event

__all__ = ["LiveEvents", "RolloutEvents"]

log = logging.getLogger("agentkit")


class _Abandoned(Exception):
    """A plain callback still running when the drain deadline passed."""


class LiveEvents:
    """The run-wide side of live delivery: the callback, its failure and drop counts."""

    def __init__(
        self,
        callback: Callable[[Event], Any] | None,
        *,
        buffer: int = 1000,
        drain_timeout: float = 5.0,
    ) -> None:
        self.callback = callback
        self.buffer = buffer
        self.drain_timeout = drain_timeout
        self.is_async = callback is not None and (
            inspect.iscoroutinefunction(callback)
            or inspect.iscoroutinefunction(type(callback).__call__)
        )
        self.error: str | None = None
        self.delivered = 0
        self.dropped = 0
        self.queued = 0
        self.processed = 0
        self._tg: TaskGroup | None = None
        self._limiter = anyio.CapacityLimiter(4)
        self._abandoned = threading.Event()

    def attach(self, tg: TaskGroup) -> None:
        """Consumers run in ``tg``, which outlives the rollouts."""
        self._tg = tg

    def for_rollout(self, rollout_id: str, task_id: str) -> RolloutEvents:
        """The ``on_event`` side for one rollout."""
        return RolloutEvents(self, rollout_id, task_id)

    async def _consume(self, rollout: RolloutEvents, receive: Any) -> None:
        async with receive:
            async for event in receive:
                if self.error is not None:
                    rollout.dropped += 1
                    self.dropped += 1
                else:
                    await self._deliver(event)
                self.processed += 1

    async def _deliver(self, event: Event) -> None:
        assert self.callback is not None
        try:
            if self.is_async:
                await self.callback(event)
            else:
                ret = await anyio.to_thread.run_sync(
                    self._call_in_daemon_thread,
                    event,
                    limiter=self._limiter,
                    abandon_on_cancel=True,
                )
                if inspect.isawaitable(ret):
                    await ret
            self.delivered += 1
        except _Abandoned:
            pass
        except Exception as exc:
            if self.error is None:
                self.error = f"{type(exc).__name__}: {exc}"
                log.warning(
                    "agentkit: trace_callback raised %s; it gets no further events "
                    "(scoring is not affected)",
                    self.error,
                )

    def _call_in_daemon_thread(self, event: Event) -> Any:
        """Call a plain callback in a daemon thread and wait for it (in a worker thread).

        anyio's worker threads are joined when the interpreter exits, so a
        callback that never returns, run in one of them, would keep the
        process alive after the run. Here it runs in a daemon thread; the
        worker waits only until :meth:`count_undelivered` gives up on it.
        """
        assert self.callback is not None
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        callback = self.callback

        def call() -> None:
            try:
                future.set_result(callback(event))
            except BaseException as exc:
                future.set_exception(exc)

        threading.Thread(target=call, name="agentkit-trace-callback", daemon=True).start()
        while not self._abandoned.is_set():
            try:
                return future.result(timeout=0.05)
            except concurrent.futures.TimeoutError:
                continue
        raise _Abandoned

    def count_undelivered(self) -> None:
        """After the drain deadline: what is still buffered counts as dropped."""
        self._abandoned.set()
        self.dropped += max(0, self.queued - self.processed)
        self.processed = self.queued

    def report(self) -> dict[str, Any]:
        """What goes into summary.json under ``trace_callback``."""
        return {
            "set": self.callback is not None,
            "delivered": self.delivered,
            "dropped": self.dropped,
            "error": self.error,
        }


class RolloutEvents:
    """One rollout's events: kept for the run directory and queued for the callback."""

    def __init__(self, live: LiveEvents, rollout_id: str, task_id: str) -> None:
        self.live = live
        self.rollout_id = rollout_id
        self.task_id = task_id
        self.events: list[Event] = []
        self.retries: list[dict[str, Any]] = []
        self.dropped = 0
        self._send: Any = None
        #: Called with every event as it arrives (the run directory's live log), or None.
        self.tap: Callable[[Event], None] | None = None

    def reset(self) -> None:
        """Forget the events of a failed attempt before a retry."""
        self.events = []

    def on_event(self, event: Event) -> None:
        """The harness's ``on_event``: never blocks, never raises."""
        self.events.append(event)
        if self.tap is not None:
            try:
                self.tap(event)
            except Exception as exc:  # the live view must never break a rollout
                log.warning("agentkit: live event log failed: %s", exc)
                self.tap = None
        live = self.live
        if live.callback is None:
            return
        if self._send is None:
            if live._tg is None:
                return
            send, receive = anyio.create_memory_object_stream[Event](live.buffer)
            self._send = send
            live._tg.start_soon(live._consume, self, receive)
        try:
            self._send.send_nowait(event)
            live.queued += 1
        except anyio.WouldBlock:
            self.dropped += 1
            live.dropped += 1
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            pass

    def close(self) -> None:
        """No more events: let the consumer finish what is buffered."""
        if self._send is not None:
            self._send.close()
            self._send = None
