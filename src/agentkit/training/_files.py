"""Writing export files whole: a temporary file beside the target, renamed on success."""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from agentkit.training._callfiles import ExportError

__all__ = ["dumps", "replacing", "write_lines"]


def dumps(value: Any) -> str:
    """Compact JSON (no NaN), as every export line is written."""
    return json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))


@contextlib.contextmanager
def replacing(path: Path) -> Iterator[Path]:
    """A temporary file beside ``path`` that replaces it on success.

    On failure the temporary file is removed and an :class:`ExportError`
    names ``path`` (not the temporary file).
    """
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        yield tmp
        os.replace(tmp, path)
    except OSError as exc:
        reason = (exc.strerror or str(exc)).replace(str(tmp), str(path))
        raise ExportError(f"{path}: cannot write: {reason}") from None
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink()


def write_lines(objects: Iterable[Any], out: str | os.PathLike[str]) -> int:
    """One compact JSON object per line, written whole; returns how many."""
    count = 0
    with replacing(Path(out)) as tmp, open(tmp, "w", encoding="utf-8") as fh:
        for obj in objects:
            fh.write(dumps(obj))
            fh.write("\n")
            count += 1
    return count
