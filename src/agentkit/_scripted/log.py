"""The scripted model server's log of requests: what each request was (its secret headers
redacted), the model requests counted for those who wait for them, and those whose answers
``hold()`` keeps back."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import threading
import time
from typing import Any

import attrs
from aiohttp import web

from agentkit._scripted.script import Api

__all__ = ["RecordedRequest", "RequestLog", "recorded"]

_REDACTED = "[redacted]"
_SECRET_HEADERS = frozenset({"authorization", "api-key", "x-api-key", "proxy-authorization"})


@attrs.frozen(kw_only=True)
class RecordedRequest:
    """One request the server received.

    ``headers`` (names in lower case) has secret headers (``Authorization``,
    ``x-api-key``...) replaced by ``"[redacted]"``; ``api_key_sent`` says
    whether the server's ``api_key`` came with it, exactly (always False on a
    server given no key; a request with another key or none was refused with
    a 401 when the server has one). ``path`` includes the query string.
    ``body`` is the parsed JSON body (None when absent or not JSON; then
    ``body_text`` holds the text). ``api`` is the protocol of a model request
    (``chat``, ``messages``, ``responses``; None for other requests) and
    ``rule`` the index of the script rule that answered it (None: the default
    reply, or not a model request). ``sent`` is the token data the answer
    carried, filled once it is sent (empty when it carried none):
    ``prompt_token_ids`` and ``completion_token_ids``, and
    ``completion_logprobs`` when chat completions were asked for logprobs: all
    the completion's tokens, those a reply's ``drop_token_chunks`` kept out of
    the answer included (what the model sampled).
    """

    method: str
    path: str
    headers: dict[str, str]
    api_key_sent: bool
    body: Any
    body_text: str
    timestamp: float
    rule: int | None = None
    api: Api | None = None
    sent: dict[str, Any] = attrs.field(factory=dict, eq=False)


def recorded(
    request: web.BaseRequest,
    body: bytes,
    rule: int | None,
    api: Api | None,
    parsed: Any,
    *,
    key_sent: bool,
) -> RecordedRequest:
    """The log entry of ``request``: its body as JSON when it parses (``parsed``: already
    parsed), its secret headers redacted; ``key_sent``: it carried the server's key."""
    text = "" if parsed is not None else body.decode("utf-8", errors="replace")
    if text:
        with contextlib.suppress(ValueError):
            parsed = json.loads(text)
            text = ""
    headers = request.headers
    shown = {}
    for name, value in headers.items():
        name = name.lower()
        shown[name] = _REDACTED if name in _SECRET_HEADERS else value
    return RecordedRequest(
        method=request.method,
        path=request.raw_path,
        headers=shown,
        api_key_sent=key_sent,
        body=parsed,
        body_text=text,
        timestamp=time.time(),
        rule=rule,
        api=api,
    )


class RequestLog:
    """The requests received (the newest ``limit``; all of them when None), safe to
    read from any thread while the server adds to it."""

    def __init__(self, limit: int | None) -> None:
        self._requests: collections.deque[RecordedRequest] = collections.deque(maxlen=limit)
        self._lock = threading.Lock()
        # wait_for(): (how many model requests, the waiter's loop, its future)
        self._waiters: list[tuple[int, asyncio.AbstractEventLoop, asyncio.Future[None]]] = []
        self._model_received = 0  # model requests logged since the last clear()
        self._held: list[RecordedRequest] = []  # kept back by hold() since the last release()

    def add(self, entry: RecordedRequest, *, held: bool = False) -> None:
        """Log ``entry`` (``held``: its answer is kept back, at once: no one sees it in
        the log without it being held) and wake those waiting for as many model requests."""
        with self._lock:
            self._requests.append(entry)
            if held:  # in the log and held back at once: no one sees one without the other
                self._held.append(entry)
            if entry.api is not None:
                self._model_received += 1
                if self._waiters:
                    self._wake_waiters()

    def entries(self) -> list[RecordedRequest]:
        """A copy of the log, oldest first."""
        with self._lock:
            return list(self._requests)

    def clear(self) -> None:
        """Forget the logged requests (and the count of model requests)."""
        with self._lock:
            self._requests.clear()
            self._model_received = 0

    async def wait_for(self, count: int) -> None:
        """Return once at least ``count`` model requests were logged since the log was
        made or cleared; woken by :meth:`add`, never by the clock."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        waiter = (count, loop, future)
        with self._lock:
            if self._model_received >= count:
                future.set_result(None)
            else:
                self._waiters.append(waiter)
        try:
            await future
        finally:
            with self._lock:
                if waiter in self._waiters:
                    self._waiters.remove(waiter)

    def held(self) -> list[RecordedRequest]:
        """The requests whose answers are held back, oldest first."""
        with self._lock:
            return list(self._held)

    def unhold(self, entry: RecordedRequest) -> None:
        """``entry``'s answer is no longer held back (by identity: an equal request may be)."""
        with self._lock:
            self._held = [r for r in self._held if r is not entry]

    def release(self) -> None:
        """No answer is held back any more."""
        with self._lock:
            self._held = []

    def _wake_waiters(self) -> None:
        """Resolve the :meth:`wait_for` calls now satisfied (under the lock)."""
        count = self._model_received
        for waiter in [w for w in self._waiters if w[0] <= count]:
            self._waiters.remove(waiter)
            _, loop, future = waiter
            with contextlib.suppress(RuntimeError):  # the waiter's loop is gone
                loop.call_soon_threadsafe(_resolve, future)


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)
