"""Reading a program's JSON-lines output (``codex exec --json``, ``claude -p
--output-format stream-json``, ``opencode run --format json``) one line at a time."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from agentkit._limits import loads_bounded

if TYPE_CHECKING:
    from agentkit._events import EventRecorder

__all__ = ["json_int", "json_line", "json_object", "json_or_text", "loads_bounded"]

#: How much of a line that is not a JSON event is recorded.
_LOGGED_CHARS = 2000


async def json_line(
    line: str,
    recorder: EventRecorder,
    *,
    source: str,
    redact: Callable[[str], str],
    unparsed: list[str],
) -> dict[str, Any] | None:
    """One output line as a JSON object with a string ``type``, else None.

    A blank line is skipped. Any other line that is not such an object (a
    warning the program printed, a cut-off line, JSON nested deeper than
    ``MAX_NESTING_DEPTH``: :func:`loads_bounded`) is appended to ``unparsed``
    and recorded as an info ``log`` event from ``source``, redacted and cut to
    its first 2000 characters.
    """
    line = line.strip()
    if not line:
        return None
    try:
        obj = loads_bounded(line)
    except ValueError:
        obj = None
    if not isinstance(obj, dict) or not isinstance(obj.get("type"), str):
        unparsed.append(line)
        await recorder.emit(
            "log", level="info", source=source, message=redact(line[:_LOGGED_CHARS])
        )
        return None
    return obj


def json_or_text(text: str) -> Any:
    """``text``'s JSON value (a tool call's arguments, say), or ``text`` itself when it
    is not JSON or nests deeper than ``MAX_NESTING_DEPTH`` (:func:`loads_bounded`)."""
    try:
        return loads_bounded(text)
    except ValueError:
        return text


def json_object(value: Any) -> dict[str, Any]:
    """``value`` when it is a JSON object, else an empty one (for reading fields a
    program may leave out or give another type)."""
    return value if isinstance(value, dict) else {}


def json_int(value: Any) -> int:
    """``value`` when it is a JSON integer (not a boolean), else 0."""
    return value if isinstance(value, int) and not isinstance(value, bool) else 0
