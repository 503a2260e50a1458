"""The JSON of a run directory: strict JSON text, UTF-8, and files written whole or not
at all.

Every file of a run holds strict JSON (never ``NaN`` or ``Infinity``: see
:func:`agentkit._limits.dumps_finite`) in UTF-8, not ASCII-escaped. Text that is
not Unicode, a lone surrogate (a model's reply, or a task, may hold the JSON
escape ``"\\ud800"`` without its pair: no character, and nothing UTF-8 can hold),
is written as U+FFFD, the replacement character, with a warning naming the file and
the place (:func:`to_utf8`): escaping it instead would write JSON that strict
parsers (orjson, which reads calls files and writes every export) refuse, so the
rollout would be lost at the next read instead of at the write.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from agentkit._limits import dumps_finite

__all__ = ["dumps", "format_json", "to_utf8", "write_atomic", "write_json_atomic"]

_log = logging.getLogger("agentkit")

_SURROGATE = re.compile("[\ud800-\udfff]")


def dumps(data: Any) -> str:
    """Compact strict JSON text of ``data`` (never NaN or Infinity)."""
    return dumps_finite(data)


def to_utf8(text: str, where: str, data: Any = None) -> bytes:
    """``text`` (the JSON of a file of a run, or a line of one) as UTF-8.

    A lone surrogate in it becomes U+FFFD, with a warning on the ``agentkit`` logger
    naming ``where`` (the file) and, when ``data`` (what ``text`` is the JSON of) is
    given, the place in it; every other character is kept as it was. Text without one
    costs what encoding it costs.
    """
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        pass
    fixed, count = _SURROGATE.subn("\ufffd", text)
    place = _surrogate_place(data) if data is not None else None
    _log.warning(
        "agentkit: %s: %d lone surrogate(s)%s: text that is not Unicode (a JSON escape "
        "such as \\ud800 without its pair), which UTF-8 cannot hold; written as U+FFFD",
        where,
        count,
        f" at {place}" if place else "",
    )
    return fixed.encode("utf-8")


def _surrogate_place(value: Any) -> str | None:
    """The path of the first string (or key) in JSON-like ``value`` that holds a lone
    surrogate, as ``messages[1].content``; None when none does."""
    stack: list[tuple[Any, str]] = [(value, "")]
    while stack:
        item, where = stack.pop(0)
        if isinstance(item, str):
            if _SURROGATE.search(item):
                return where or "the top level"
        elif isinstance(item, Mapping):
            for k, v in item.items():
                key = str(k)
                if _SURROGATE.search(key):
                    return f"{where}.{key!r}" if where else repr(key)
                stack.append((v, f"{where}.{key}" if where else key))
        elif isinstance(item, (list, tuple)):
            stack.extend((v, f"{where}[{i}]") for i, v in enumerate(item))
    return None


def format_json(data: Any) -> str:
    """Readable and fast: top-level keys one per line, each value compact; lists of
    objects (tasks, metrics) one item per line. Uses the C encoder throughout."""
    if not isinstance(data, dict):
        return dumps(data) + "\n"
    parts = []
    for key, value in data.items():
        if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
            items = ",\n".join("    " + dumps(v) for v in value)
            text = "[\n" + items + "\n  ]"
        elif (
            isinstance(value, dict)
            and value
            and any(isinstance(v, (dict, list)) for v in value.values())
        ):
            inner = ",\n".join(f"    {dumps(k)}: {dumps(v)}" for k, v in value.items())
            text = "{\n" + inner + "\n  }"
        else:
            text = dumps(value)
        parts.append(f"  {dumps(key)}: {text}")
    return "{\n" + ",\n".join(parts) + "\n}\n"


def write_json_atomic(path: Path, data: Any, *, redact: Any = None) -> None:
    """Write a JSON file so that readers see the old or the new content, never half.

    On failure (a full disk) the temporary file is removed and the error raised.
    """
    text = format_json(data)
    if redact is not None:
        text = redact(text)
    write_atomic(path, to_utf8(text, str(path), data))


def write_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` so that readers see the old or the new content, never
    half: a temporary file beside it, synced, renamed over it. On failure (a full disk)
    the temporary file is removed and the error raised."""
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        with open(tmp, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
