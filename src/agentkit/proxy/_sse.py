"""Server-sent events cut from a byte stream as it arrives, for the proxy to read or rewrite.

:class:`EventSplitter` takes the upstream body chunk by chunk and returns the
events completed so far, each with its raw bytes (to pass on unchanged), its
``event:`` name and its ``data:`` text. An event ends at a blank line
(``\\n\\n``, ``\\r\\n\\r\\n`` or ``\\r\\r``).
"""

from __future__ import annotations

import re

import attrs

__all__ = ["EventSplitter", "SseEvent", "encode_event"]

_BOUNDARY = re.compile(rb"\r\n\r\n|\n\n|\r\r")
_LINE = re.compile(rb"\r\n|\n|\r")


@attrs.frozen
class SseEvent:
    """One event: its bytes as they came (blank line included), name and data text."""

    raw: bytes
    name: str | None
    data: str | None
    #: Lines other than ``data:`` (``event:``, ``id:``, comments), kept when rewritten.
    other: tuple[bytes, ...] = ()


class EventSplitter:
    """Cuts a byte stream into :class:`SseEvent` s; :meth:`tail` is what is left."""

    def __init__(self) -> None:
        self._buffer = b""

    def feed(self, chunk: bytes) -> list[SseEvent]:
        """The events that ``chunk`` completes, in order."""
        buffer = self._buffer + chunk
        out: list[SseEvent] = []
        start = 0
        for match in _BOUNDARY.finditer(buffer):
            block = buffer[start : match.start()]
            out.append(_parse(block, buffer[start : match.end()]))
            start = match.end()
        self._buffer = buffer[start:]
        return out

    def tail(self) -> bytes:
        """Bytes of an event the stream never finished (the connection ended mid-event)."""
        return self._buffer

    def close(self) -> SseEvent | None:
        """The last event when the stream ended without its blank line, else None."""
        rest, self._buffer = self._buffer, b""
        if not rest.strip():
            return None
        return _parse(rest, rest)


def _parse(block: bytes, raw: bytes) -> SseEvent:
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
