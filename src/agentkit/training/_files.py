"""Writing export files whole: a temporary file beside the target, renamed on success."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import orjson

from agentkit.training._errors import ExportError

__all__ = ["dumps", "replacing", "write_lines"]


def dumps(value: Any) -> bytes:
    """Compact UTF-8 JSON, as every export line and file is written (orjson: the
    token ids of a large run are written in a second, not tens of seconds).

    A value JSON cannot hold (an integer beyond 64 bits, a key that is not a
    string) is an :class:`ExportError`. orjson writes NaN as null, where json
    refused it: a record's floats are finite (rewards: the rubric refuses any
    other; logprobs: read from the calls files, JSON without NaN).
    """
    try:
        return orjson.dumps(value)
    except orjson.JSONEncodeError as exc:
        raise ExportError(f"cannot write a record as JSON: {exc}") from None


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
    with replacing(Path(out)) as tmp, open(tmp, "wb") as fh:
        for obj in objects:
            fh.write(dumps(obj) + b"\n")
            count += 1
    return count
