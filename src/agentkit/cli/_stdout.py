"""Standard output kept for a command's own output (the results table, the summary JSON).

Scripts parse what ``agentkit run --json`` prints, so nothing else may reach
stdout while a run goes on. Others would write there: Ray prints what its
cluster tells a driver (a node died, a raylet was terminated) on
``sys.stdout`` from its own threads; plugins, harnesses and the programs they
start may print too. :func:`reserved_stdout` sends all of that to stderr and
hands the command the real stdout for its own output.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from typing import TextIO

__all__ = ["reserved_stdout"]


def _fileno(stream: TextIO) -> int | None:
    try:
        return stream.fileno()
    except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation: no descriptor
        return None


@contextlib.contextmanager
def reserved_stdout() -> Iterator[TextIO]:
    """Yield the real standard output, for the command's own output; meanwhile
    everything else written to stdout goes to stderr.

    Inside the block ``sys.stdout`` is ``sys.stderr``, and file descriptor 1
    is a copy of descriptor 2, so that C code and child processes write to
    stderr as well; the stream yielded writes to a duplicate of the original
    descriptor 1, which nothing else holds. On exit both are put back (what was
    written to the old ``sys.stdout`` object meanwhile goes to stderr first).
    When ``sys.stdout`` is not descriptor 1 (output captured in-process, as by
    click's test runner), only ``sys.stdout`` is switched.
    """
    original = sys.stdout
    if _fileno(original) != 1 or _fileno(sys.stderr) is None:
        sys.stdout = sys.stderr
        try:
            yield original
        finally:
            sys.stdout = original
        return
    original.flush()
    sys.stderr.flush()
    saved = os.dup(1)
    out = open(  # noqa: SIM115 - closed below, after descriptor 1 is back
        saved,
        "w",
        buffering=1 if original.line_buffering else -1,
        encoding=original.encoding,
        errors=original.errors,
    )
    try:
        os.dup2(2, 1)
        sys.stdout = sys.stderr
        try:
            yield out
        finally:
            sys.stdout = original
            with contextlib.suppress(OSError, ValueError):
                original.flush()  # to stderr: descriptor 1 still is
            sys.stderr.flush()
            try:
                out.flush()
            finally:
                os.dup2(saved, 1)
    finally:
        with contextlib.suppress(OSError):
            out.close()
