"""Server-sent events cut from a byte stream as it arrives, for the proxy to read or rewrite.

:class:`EventSplitter` takes the upstream body chunk by chunk and returns the
events completed so far, each with its raw bytes (to pass on unchanged), its
``event:`` name and its ``data:`` text. An event ends at a blank line
(``\\n\\n``, ``\\r\\n\\r\\n`` or ``\\r\\r``). Each byte is searched for a boundary
once, however the events are cut into chunks, and one event may hold at most
:data:`MAX_EVENT_BYTES`: a larger one raises :class:`EventTooLarge`.
:class:`EventSizes` only watches that cap, for a stream passed on as it comes.
"""

from __future__ import annotations

import re

import attrs

__all__ = [
    "MAX_EVENT_BYTES",
    "EventSizes",
    "EventSplitter",
    "EventTooLarge",
    "SseEvent",
    "encode_event",
    "event_payloads",
]

#: The most bytes one server-sent event may hold (16 MiB). A model server's events are
#: a delta each (a few hundred bytes), or at most a whole answer (the Responses API's
#: ``response.completed``, with vLLM's token ids of the prompt and the output): a reply
#: of 1,000,000 characters (``MAX_REPLY_CHARS``, where agentkit's own harnesses cut a
#: reply) is at most 12 MB as escaped JSON, so this leaves room for its ids and
#: logprobs. A larger event is a broken or hostile server: the call fails as
#: ``model_bad_response`` instead of the proxy holding and parsing it.
MAX_EVENT_BYTES = 16 * 1024 * 1024

_BOUNDARIES = (b"\r\n\r\n", b"\n\n", b"\r\r")
_BOUNDARY = re.compile(rb"\r\n\r\n|\n\n|\r\r")
_LINE = re.compile(rb"\r\n|\n|\r")
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
    other: tuple[bytes, ...] = ()


class EventSplitter:
    """Cuts a byte stream into :class:`SseEvent` s; :meth:`tail` is what is left.

    ``limit``: the most bytes one event may hold (:data:`MAX_EVENT_BYTES`).
    :attr:`searched` counts the bytes searched for boundaries, which is the
    stream's length plus at most three bytes a chunk: the work is linear however
    large one event is.
    """

    def __init__(self, limit: int = MAX_EVENT_BYTES) -> None:
        self.limit = limit
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
        for match in _BOUNDARY.finditer(data, start):
            end = match.end()
            if end - begin > limit:
                raise EventTooLarge(end - begin, limit)
            raw = bytes(data[begin:end])
            out.append(_parse(raw[: match.start() - begin], raw))
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
        return _parse(rest, rest)


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
        last = -1  # where the last event that ended in the window ends
        for boundary in _BOUNDARIES:
            at = window.rfind(boundary)
            if at >= 0:
                last = max(last, at + len(boundary))
        if last >= 0:
            self._open = len(window) - last
        else:
            self._open += len(chunk)
        self._edge = window[-_OVERLAP:]
        if self._open > self.limit:
            raise EventTooLarge(self._open, self.limit)


def _parse(block: bytes, raw: bytes) -> SseEvent:
    if block.startswith(b"data: ") and b"\n" not in block and b"\r" not in block:
        return SseEvent(raw, None, block[6:].decode("utf-8", "replace"))  # the common event
    name: str | None = None
    data: list[str] = []
    other: list[bytes] = []
    for line in _LINE.split(block):
        if line.startswith(b"data:"):
            value = line[5:]
            data.append((value[1:] if value.startswith(b" ") else value).decode("utf-8", "replace"))
            continue
        if line.startswith(b"event:"):
            value = line[6:]
            name = (value[1:] if value.startswith(b" ") else value).decode("utf-8", "replace")
        if line:
            other.append(line)
    return SseEvent(raw, name, "\n".join(data) if data else None, tuple(other))


def encode_event(event: SseEvent, data: str) -> bytes:
    """``event`` with its data replaced by ``data`` (its other lines kept)."""
    lines = [*event.other, b"data: " + data.encode("utf-8")]
    return b"\n".join(lines) + b"\n\n"


def event_payloads(stream: bytes) -> list[tuple[str | None, str]]:
    """Every event of a whole stream that has data: ``(name, data text)``, in order (a
    faster way through a stream already read than :class:`EventSplitter`)."""
    text = stream.decode("utf-8", "replace")
    if "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    out: list[tuple[str | None, str]] = []
    for block in text.split("\n\n"):
        if not block:
            continue
        if block.startswith("data: ") and "\n" not in block:  # the common event: one line
            out.append((None, block[6:]))
            continue
        name: str | None = None
        data: list[str] = []
        for line in block.split("\n"):
            if line.startswith("data:"):
                data.append(line[6:] if line.startswith("data: ") else line[5:])
            elif line.startswith("event:"):
                name = line[7:] if line.startswith("event: ") else line[6:]
        if data:
            out.append((name, "\n".join(data)))
    return out
