"""The JSON of a run directory: strict JSON text, and files written whole or not at all.

Every file of a run holds strict JSON (never ``NaN`` or ``Infinity``: see
:func:`agentkit._limits.dumps_finite`), UTF-8, not ASCII-escaped.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any

from agentkit._limits import dumps_finite

__all__ = ["dumps", "format_json", "write_json_atomic"]


def dumps(data: Any) -> str:
    """Compact strict JSON text of ``data`` (never NaN or Infinity)."""
    return dumps_finite(data)


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
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
