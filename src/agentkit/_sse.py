"""Server-sent events: cut from a byte stream as it arrives, read, and written.

The one reader and writer of ``text/event-stream`` in agentkit: the model
proxy reads (and rewrites) the streams it passes on, the chat client reads the
streams it asks for, and the scripted model server, the proxy's translations
and the viewer write theirs.

:class:`EventSplitter` takes a body chunk by chunk and returns the events
completed so far, each with its raw bytes (to pass on unchanged), its
``event:`` name and its ``data:`` text. An event ends at a blank line (lines
end in ``\\n``, ``\\r\\n`` or ``\\r``). Each byte is searched for a boundary
once, however the events are cut into chunks, and one event may hold at most
:data:`MAX_EVENT_BYTES`: a larger one raises :class:`EventTooLarge`.
:class:`EventSizes` only watches that cap, for a stream passed on as it comes;
:func:`event_payloads` reads a whole stream already in memory. All three read
an event's lines with one parser. :func:`sse_event` and :func:`json_event` write an
event, :func:`encode_event` writes one read event again with other data.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

import attrs

__all__ = [
    "MAX_EVENT_BYTES",
    "EventSizes",
    "EventSplitter",
    "EventTooLarge",
    "SseEvent",
    "encode_event",
    "event_payloads",
    "json_event",
    "last_event_end",
    "sse_event",
]

#: The most bytes one server-sent event may hold (16 MiB). A model server's events are
#: a delta each (a few hundred bytes), or at most a whole answer (the Responses API's
#: ``response.completed``, with vLLM's token ids of the prompt and the output): a reply
#: of 1,000,000 characters (``MAX_REPLY_CHARS``, where agentkit's own harnesses cut a
#: reply) is at most 12 MB as escaped JSON, so this leaves room for its ids and
#: logprobs. A larger event is a broken or hostile server: the call fails as
#: ``model_bad_response`` instead of the reader holding and parsing it.
MAX_EVENT_BYTES = 16 * 1024 * 1024

_BOUNDARIES = (b"\r\n\r\n", b"\n\n", b"\r\r")
_BOUNDARY = re.compile(rb"\r\n\r\n|\n\n|\r\r")
_LINE = re.compile(r"\r\n|\n|\r")
#: The longest boundary, less one: how far back a boundary cut by a chunk may start.
_OVERLAP = 3


class EventTooLarge(ValueError):
    """One server-sent event is larger than the cap (:data:`MAX_EVENT_BYTES`)."""

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(
            f"the model server sent a stream event of more than {limit} bytes "
            f"({size} bytes and not ended; MAX_EVENT_BYTES)"
        )
        self.size = size
        self.limit = limit


@attrs.frozen
class SseEvent:
    """One event: its bytes as they came (blank line included), name and data text."""

    raw: bytes
    name: str | None
    data: str | None
    #: Lines other than ``data:`` (``event:``, ``id:``, comments), kept when rewritten.
    other: tuple[str, ...] = ()


class EventSplitter:
    """Cuts a byte stream into :class:`SseEvent` s; :meth:`tail` is what is left.

    ``limit``: the most bytes one event may hold (:data:`MAX_EVENT_BYTES`).
    ``errors``: how bytes that are not UTF-8 are decoded (``"replace"``, or
    ``"strict"``: :class:`UnicodeDecodeError`). :attr:`searched` counts the bytes
    searched for boundaries, which is the stream's length plus at most three bytes
    a chunk: the work is linear however large one event is.
    """

    def __init__(self, limit: int = MAX_EVENT_BYTES, *, errors: str = "replace") -> None:
        self.limit = limit
        self.errors = errors
        #: Bytes searched for an event boundary so far.
        self.searched = 0
        self._buffer = bytearray()  # an event not yet ended: no boundary in it

    def feed(self, chunk: bytes) -> list[SseEvent]:
        """The events that ``chunk`` completes, in order; raises :class:`EventTooLarge`
        when an event grows past the limit."""
        if self._buffer:
            # search only what is new, and the few bytes before it a boundary may start in
            start = max(0, len(self._buffer) - _OVERLAP)
            self._buffer += chunk
            data: bytes | bytearray = self._buffer
        else:
            start = 0
            data = chunk
        self.searched += len(data) - start
        out: list[SseEvent] = []
        begin = 0
        limit = self.limit
        errors = self.errors
        for match in _BOUNDARY.finditer(data, start):
            end = match.end()
            if end - begin > limit:
                raise EventTooLarge(end - begin, limit)
            raw = bytes(data[begin:end])
            out.append(_event(raw[: match.start() - begin].decode("utf-8", errors), raw))
            begin = end
        rest = len(data) - begin
        if rest > limit:
            raise EventTooLarge(rest, limit)
        if data is self._buffer:
            del self._buffer[:begin]
        elif rest:
            self._buffer = bytearray(data[begin:])
        return out

    def tail(self) -> bytes:
        """Bytes of an event the stream never finished (the connection ended mid-event)."""
        return bytes(self._buffer)

    def close(self) -> SseEvent | None:
        """The last event when the stream ended without its blank line, else None."""
        rest, self._buffer = bytes(self._buffer), bytearray()
        if not rest.strip():
            return None
        return _event(rest.decode("utf-8", self.errors), rest)


class EventSizes:
    """Watches a stream passed on as it comes for an event over the cap, without cutting
    it into events: :meth:`feed` finds the last boundary of each chunk (searching each
    byte once) and raises :class:`EventTooLarge` when the unended event grows past
    ``limit``."""

    def __init__(self, limit: int = MAX_EVENT_BYTES) -> None:
        self.limit = limit
        self._open = 0  # bytes of the event not yet ended
        self._edge = b""  # the last bytes of the stream, where a cut boundary may start

    def feed(self, chunk: bytes) -> None:
        """Account for ``chunk``; raises :class:`EventTooLarge`."""
        window = self._edge + chunk
        last = last_event_end(window)
        if last > 0:
            self._open = len(window) - last
        else:
            self._open += len(chunk)
        self._edge = window[-_OVERLAP:]
        if self._open > self.limit:
            raise EventTooLarge(self._open, self.limit)


def last_event_end(stream: bytes) -> int:
    """Where the last event that ends in ``stream`` ends (0: none does)."""
    last = 0
    for boundary in _BOUNDARIES:
        at = stream.rfind(boundary)
        if at >= 0:
            last = max(last, at + len(boundary))
    return last


def _fields(block: str) -> tuple[str | None, str | None, tuple[str, ...]]:
    """An event's ``event:`` name, its ``data:`` lines joined (None: none), and its other
    lines: the one parser of an event's lines."""
    if block.startswith("data: ") and "\n" not in block and "\r" not in block:
        return None, block[6:], ()  # the common event: one data line
    name: str | None = None
    data: list[str] = []
    other: list[str] = []
    for line in _LINE.split(block):
        if line.startswith("data:"):
            data.append(line[6:] if line.startswith("data: ") else line[5:])
            continue
        if line.startswith("event:"):
            name = line[7:] if line.startswith("event: ") else line[6:]
        if line:
            other.append(line)
    return name, "\n".join(data) if data else None, tuple(other)


def _event(block: str, raw: bytes) -> SseEvent:
    name, data, other = _fields(block)
    return SseEvent(raw, name, data, other)


def event_payloads(stream: bytes) -> list[tuple[str | None, str]]:
    """Every event of a whole stream that has data: ``(name, data text)``, in order (a
    faster way through a stream already read than :class:`EventSplitter`)."""
    text = stream.decode("utf-8", "replace")
    if "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    out: list[tuple[str | None, str]] = []
    for block in text.split("\n\n"):
        if block.startswith("data: ") and "\n" not in block:
            out.append((None, block[6:]))  # the common event, read here without a call
        elif block:
            name, data, _ = _fields(block)
            if data is not None:
                out.append((name, data))
    return out


# -- writing ---------------------------------------------------------------------------


def sse_event(data: str, name: str | None = None) -> bytes:
    """One event: an ``event:`` line when ``name`` is given, then the text ``data`` on
    its ``data:`` lines (one a line of the text)."""
    return _frame(data, (f"event: {name}",) if name else ())


def json_event(value: Any, name: str | None = None) -> bytes:
    """One event whose data is ``value`` as compact JSON (:func:`sse_event`)."""
    return _json_frame(value, (f"event: {name}",) if name else ())


def encode_event(event: SseEvent, value: Any) -> bytes:
    """``event`` written again with ``value`` as its data, in compact JSON (its other
    lines, such as ``event:`` and ``id:``, kept)."""
    return _json_frame(value, event.other)


def _frame(data: str, head: Sequence[str]) -> bytes:
    if "\n" in data or "\r" in data:
        lines = [*head, *("data: " + line for line in _LINE.split(data))]
    else:
        lines = [*head, "data: " + data]
    return ("\n".join(lines) + "\n\n").encode()


def _json_frame(value: Any, head: Sequence[str]) -> bytes:
    """``value`` as compact JSON in one ``data:`` line (JSON text holds no line break);
    a text that holds a lone UTF-16 surrogate, which UTF-8 cannot carry, is written with
    ``\\u`` escapes instead."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    try:
        return ("\n".join([*head, "data: " + text]) + "\n\n").encode()
    except UnicodeEncodeError:
        text = json.dumps(value, separators=(",", ":"))
        return ("\n".join([*head, "data: " + text]) + "\n\n").encode()
