"""How the scripted server sends an answer: whole, dripped out slowly, or as a stream of
events, with the faults a reply asks for (a hang, a dropped connection, an error status, a
body cut short, a broken stream), and held back by ``hold()`` until ``release()``."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator, Mapping
from typing import Any

from aiohttp import web

from agentkit._scripted.answer import Answer
from agentkit._scripted.log import RecordedRequest
from agentkit._scripted.renderers import AnswerRenderer, Engine, sent_tokens
from agentkit._scripted.script import Reply, RequestView
from agentkit._sse import sse_event

__all__ = ["Gate", "deliver", "json_response"]

_JSON = {"content-type": "application/json"}
_SSE = {"content-type": "text/event-stream", "cache-control": "no-cache"}


class Gate:
    """Whether answers go out: :meth:`hold` keeps them back until :meth:`release` (with
    ``after_events=N``, a stream sends N events first); it counts the stream events sent."""

    def __init__(self) -> None:
        # set: model answers go out; cleared by hold(), set again by release()
        self.open = threading.Event()
        self.open.set()
        # hold(after_events=N): streams send N events, then wait for release()
        self.hold_after = 0
        self.events_sent = 0

    def hold(self, after_events: int) -> None:
        """Keep answers back from now on (streams after ``after_events`` events)."""
        self.hold_after = after_events
        self.open.clear()

    def release(self) -> None:
        """Let the answers held back (and all later ones) go out."""
        self.open.set()

    def holds_answers(self) -> bool:
        """Whether whole answers are held back now (``hold()`` without ``after_events``)."""
        return not self.open.is_set() and not self.hold_after


async def deliver(
    request: web.BaseRequest,
    renderer: AnswerRenderer,
    reply: Reply,
    view: RequestView,
    body: dict[str, Any],
    entry: RecordedRequest,
    *,
    gate: Gate,
    closing: asyncio.Event | None,
    ids: Iterator[int],
    engine: Engine,
) -> web.StreamResponse:
    """Send ``reply``'s answer to ``request`` (``entry`` its log entry, told the token data
    sent), rendered by ``renderer``, with the reply's faults; ``closing``: set when the server
    stops (a hang waits for it); ``ids``: the numbers of the answers' ids."""
    if reply.fail == "hang":
        # no answer until the client gives up (cancelling this) or the server stops
        assert closing is not None
        await closing.wait()
        return _drop(request)
    if reply.fail == "disconnect":
        return _drop(request)
    status = reply.status or {"rate_limit": 429, "server_error": 500}.get(reply.fail or "")
    if status is not None:
        message = reply.message or _default_error_message(status)
        headers = {"retry-after": "0"} if status == 429 else {}
        if reply.retry_after is not None:
            headers = {"retry-after": f"{reply.retry_after:g}"}
        if reply.raw_body is not None:  # an error body of the script's own text
            return web.Response(
                status=status,
                body=reply.raw_body.encode(),
                content_type="application/json",
                headers=headers,
            )
        return json_response(status, renderer.error_body(status, message), headers)
    if reply.body is not None or reply.raw_body is not None:
        # a reply of the wrong shape, as the script gives it
        text = json.dumps(reply.body) if reply.raw_body is None else reply.raw_body
        if not view.stream:
            return web.Response(body=text.encode(), content_type="application/json")
        return await _stream(request, reply, [sse_event(text), sse_event("[DONE]")], gate)
    answer = Answer.build(reply, view, next(ids), int(time.time()))
    entry.sent.update(sent_tokens(answer, reply, body, view, engine))
    if view.stream:
        return await _stream(request, reply, renderer.events(answer, reply, body, view), gate)
    full = json.dumps(renderer.render(answer, reply, body, view)).encode()
    if reply.fail == "invalid_json":
        return web.Response(body=full[: len(full) // 2], content_type="application/json")
    if reply.fail == "broken_stream":
        response = web.StreamResponse(status=200, headers=_JSON)
        response.content_length = len(full)
        await response.prepare(request)
        await response.write(full[: len(full) // 2])
        return _drop(request, response)
    if reply.chunk_delay:  # a slow server: the body drips out chunk_size bytes at a time
        response = web.StreamResponse(status=200, headers=_JSON)
        response.content_length = len(full)
        await response.prepare(request)
        for start in range(0, len(full), reply.chunk_size):
            await asyncio.sleep(reply.chunk_delay)
            await response.write(full[start : start + reply.chunk_size])
        await response.write_eof()
        return response
    return web.Response(body=full, content_type="application/json")


async def _stream(
    request: web.BaseRequest, reply: Reply, events: list[bytes], gate: Gate
) -> web.StreamResponse:
    """Send ``events`` as a server-sent event stream: at once, or one by one (slowly, with
    a fault in the middle, or held back after ``gate``'s ``after_events``)."""
    response = web.StreamResponse(status=200, headers=_SSE)
    await response.prepare(request)
    held = gate.hold_after and not gate.open.is_set()
    if not reply.chunk_delay and reply.fail is None and not held:
        # every event at once: a client reads them as separate events all the same
        await response.write(b"".join(events))
        gate.events_sent += len(events)
        await response.write_eof()
        return response
    # the faults hit an event in the middle, never the closing one
    faulty = max(0, len(events) - 2)
    for index, event in enumerate(events):
        if reply.fail == "broken_stream" and index == min(2, faulty):
            # half an event, then the connection drops before the stream ends
            await response.write(event[:20])
            return _drop(request, response)
        if reply.fail == "invalid_json" and index == min(2, faulty):
            event = _truncated_event(event)
        while held and index >= gate.hold_after and not gate.open.is_set():
            await asyncio.sleep(0.005)  # hold(after_events=N): the rest waits for release()
        await response.write(event)
        gate.events_sent += 1
        if reply.chunk_delay:
            await asyncio.sleep(reply.chunk_delay)
    await response.write_eof()
    return response


def json_response(status: int, data: Any, headers: Mapping[str, str] | None = None) -> web.Response:
    """``data`` as a JSON response with ``status``."""
    body = json.dumps(data).encode()
    return web.Response(status=status, body=body, content_type="application/json", headers=headers)


def _drop(
    request: web.BaseRequest, response: web.StreamResponse | None = None
) -> web.StreamResponse:
    """Close the connection at once, without finishing (or sending) the response."""
    transport = request.transport
    if transport is not None:
        transport.abort()
    if response is None:
        # nothing was sent: tell aiohttp the client is gone, as when it hangs up
        raise asyncio.CancelledError
    return response


def _truncated_event(event: bytes) -> bytes:
    """The event with its JSON cut in half: a ``data:`` line that does not parse."""
    head, sep, data = event.partition(b"data: ")
    data = data.rstrip(b"\n")
    return head + sep + data[: max(1, len(data) // 2)] + b"\n\n"


def _default_error_message(status: int) -> str:
    """The message of an error status the script gives without one."""
    if status == 429:
        return "Rate limit reached for requests (scripted). Please try again later."
    if status >= 500:
        return "The server had an error while processing your request (scripted)."
    return f"Request rejected with status {status} (scripted)."
