"""Writing a file the user named: ``agentkit export -o``, the leaderboards' ``--out``.

What is at the path decides how it is written (``docs/cli.md``, "Output files"):

- ``-``: standard output (a file literally named ``-`` is ``./-``).
- nothing yet, or a **regular file**: a temporary file beside it, renamed over it
  once everything is written, so a reader sees the old content or the new and a
  failed write leaves the old file as it was.
- a **FIFO** or a **character device** (``/dev/null``, a terminal): opened for
  writing and written in place, never removed, renamed over or truncated; a FIFO
  waits for its reader, as the shell's ``>`` does.
- a **symbolic link**: followed, every link of a chain; the rules above apply to
  what it finally names. A link to a regular file (or to nothing yet) replaces
  that file, where it is, and stays a link.
- a directory, a socket or a block device: refused, with one message naming the
  path (writing over a disk is never what an export means).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from agentkit._errors import AgentkitError

__all__ = ["STDOUT", "OutputFileError", "output_file"]

#: The path that means standard output.
STDOUT = "-"


class OutputFileError(AgentkitError):
    """A file the user named cannot be written: its path, what it is, and why."""


@contextlib.contextmanager
def output_file(path: str | os.PathLike[str], *, what: str = "it") -> Iterator[BinaryIO]:
    """A binary file to write ``path`` through, chosen by what is there (see the module).

    On success a temporary file replaces ``path``; on an error (raised in the block
    or by the write) it is removed and ``path`` is left as it was. Errors are
    :class:`OutputFileError`: ``<path>: cannot write <what>: <reason>``.
    """
    name = os.fspath(path)
    if name == STDOUT:
        out = sys.stdout.buffer
        with _errors(name, what):
            yield out
            out.flush()
        return
    try:
        mode: int | None = os.stat(name).st_mode
    except FileNotFoundError:
        mode = None  # nothing there, or a link to nothing yet: made where the link points
    except OSError as exc:
        raise _error(name, what, exc) from None
    if mode is None or stat.S_ISREG(mode):
        with _replacing(Path(os.path.realpath(name)), name, what) as fh:
            yield fh
        return
    kind = _refused(mode)
    if kind is not None:
        raise OutputFileError(
            f"{name}: cannot write {what}: it is {kind}; give a file, a FIFO, a character "
            f"device such as /dev/null, or {STDOUT} for standard output"
        )
    with _in_place(name, what) as fh:
        yield fh


def _refused(mode: int) -> str | None:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISBLK(mode):
        return "a block device (a disk: it is never written over)"
    if stat.S_ISFIFO(mode) or stat.S_ISCHR(mode):
        return None
    return "not a file"


@contextlib.contextmanager
def _in_place(name: str, what: str) -> Iterator[BinaryIO]:
    """A FIFO or a character device, opened for writing (no O_CREAT, no O_TRUNC)."""
    with _errors(name, what):
        fd = os.open(name, os.O_WRONLY | os.O_CLOEXEC)
        try:
            found = os.fstat(fd).st_mode
            if not (stat.S_ISFIFO(found) or stat.S_ISCHR(found)):  # replaced meanwhile
                raise OutputFileError(
                    f"{name}: cannot write {what}: it changed from a FIFO or a device into "
                    "something else while it was opened"
                )
        except BaseException:
            os.close(fd)
            raise
        with open(fd, "wb") as fh:
            yield fh


@contextlib.contextmanager
def _replacing(target: Path, name: str, what: str) -> Iterator[BinaryIO]:
    """A new file beside ``target`` (the path a link names) renamed over it on success."""
    tmp = target.with_name(f".{target.name}.{secrets.token_hex(4)}.tmp")
    try:
        with _errors(name, what, tmp):
            # O_EXCL: never an existing file (or a link) of that name; 0o666 less the umask
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666)
            with open(fd, "wb") as fh:
                yield fh
            with contextlib.suppress(FileNotFoundError):
                now = os.lstat(target).st_mode
                if not stat.S_ISREG(now):  # a FIFO or a device put there meanwhile
                    kind = _refused(now) or "a FIFO or a device"
                    raise OutputFileError(
                        f"{name}: cannot write {what}: it became {kind} while it was written"
                    )
            os.replace(tmp, target)
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink()


@contextlib.contextmanager
def _errors(name: str, what: str, tmp: Path | None = None) -> Iterator[None]:
    """An OSError in the block as one :class:`OutputFileError` naming ``name``."""
    try:
        yield
    except OSError as exc:
        raise _error(name, what, exc, tmp) from None


def _error(name: str, what: str, exc: OSError, tmp: Path | None = None) -> OutputFileError:
    reason = exc.strerror or str(exc)
    if tmp is not None:
        reason = reason.replace(str(tmp), name)
    return OutputFileError(f"{name}: cannot write {what}: {reason}")
