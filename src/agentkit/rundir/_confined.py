"""Reading a file a run's record names without ever leaving the run directory.

A record names its files (``calls_file``, ``events_file``) relative to the run. A
hostile run makes one of them, or a directory on the way, a link out of it. Checking
where a name resolves and then opening it leaves a window in which a link can be put in
its place; so the file is opened one name at a time from the run directory's own
descriptor, none of them followed when it is a link (``O_NOFOLLOW``). A link met on the
way is resolved here, refused when it leads out of the run, and the place it leads to
walked again the same way: what is opened is always reached through the run directory's
own directories, whatever is swapped in meanwhile.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path, PurePosixPath

from agentkit.rundir._layout import RunDirError

__all__ = ["LeadsOutside", "read_in_run"]


class LeadsOutside(RunDirError):
    """A name a run's record gives leads outside the run directory."""


class _Link(Exception):
    """A name on the way is a symbolic link (not followed)."""


def read_in_run(root: Path, name: str) -> bytes | None:
    """The bytes of the file ``name`` (relative to the run directory ``root``), None when
    there is no such file.

    Raises :class:`LeadsOutside` when ``name`` or a link on its way leads outside
    ``root`` (the file out there is never opened), :class:`OSError` when it cannot be
    read (a FIFO or a device is opened without waiting and refused unread: ``EINVAL``)."""
    parts = PurePosixPath(name).parts
    if not parts or os.path.isabs(name) or ".." in parts:
        parts = _resolved(root, name)
    try:
        return _walk(root, parts)
    except _Link:
        pass
    try:  # a link on the way: where it leads, walked again without following a link
        return _walk(root, _resolved(root, name))
    except _Link:  # a link put in place of what was resolved: refused
        raise LeadsOutside(name) from None


def _resolved(root: Path, name: str) -> tuple[str, ...]:
    """Where ``name`` leads, as names below ``root``; :class:`LeadsOutside` if out of it.

    Resolving reads links (``readlink``); it opens nothing."""
    base = root.resolve()
    try:
        below = (base / name).resolve().relative_to(base)
    except ValueError:
        raise LeadsOutside(name) from None
    if not below.parts:
        raise LeadsOutside(name)  # the run directory itself is not a file of it
    return below.parts


_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def _walk(root: Path, parts: tuple[str, ...]) -> bytes | None:
    """Open ``parts`` below ``root`` one at a time, following no link (:class:`_Link`)."""
    at = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for part in parts[:-1]:
            try:
                below = _open(part, _DIR, at)
            except FileNotFoundError:
                return None
            os.close(at)
            at = below
        try:
            fd = _open(parts[-1], _FILE, at)
        except FileNotFoundError:
            return None
    finally:
        os.close(at)
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file")
        return fh.read()


def _open(part: str, flags: int, at: int) -> int:
    try:
        return os.open(part, flags, dir_fd=at)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR) and stat.S_ISLNK(
            os.lstat(part, dir_fd=at).st_mode
        ):
            raise _Link from None
        raise
