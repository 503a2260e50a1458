"""Writing export files: through :func:`agentkit._outfile.output_file` (a regular file
written whole, a temporary file renamed over it on success; a FIFO or a device written
in place; ``-`` standard output), its errors as :class:`ExportError`."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Iterator
from typing import Any, BinaryIO

import orjson

from agentkit._outfile import OutputFileError, output_file
from agentkit.training._errors import ExportError

__all__ = ["dumps", "write_lines", "writing"]


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
def writing(out: str | os.PathLike[str]) -> Iterator[BinaryIO]:
    """A binary file that writes ``out`` as :func:`agentkit._outfile.output_file` decides
    (``-``: standard output); its errors are :class:`ExportError` naming ``out``."""
    try:
        with output_file(out, what="the export") as fh:
            yield fh
    except OutputFileError as exc:
        raise ExportError(str(exc)) from None


def write_lines(objects: Iterable[Any], out: str | os.PathLike[str]) -> int:
    """One compact JSON object per line (a regular file written whole); returns how many."""
    count = 0
    with writing(out) as fh:
        for obj in objects:
            fh.write(dumps(obj) + b"\n")
            count += 1
    return count
