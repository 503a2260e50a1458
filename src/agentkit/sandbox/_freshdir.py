"""Directories a verifier can trust: made empty, and opened, from outside the sandbox.

What a command left in a sandbox may be built to mislead whoever reads it
afterwards: a directory replaced by a symbolic link to a folder it prepared,
a file where a directory is expected, a FIFO that blocks a reader, files
owned by another uid or given odd modes and ACLs. Everything here works on
the host's view of the sandbox's files (the caller gives the host directory
that is the sandbox's mount, ``/proc/PID/root`` for a running image root)
and walks one path component at a time with ``O_NOFOLLOW``, so a link is
never followed, wherever it is:

- :func:`open_dir` opens a directory that must really be one, every
  component on the way included (else :class:`SandboxPathError`);
- :func:`reset_dir` makes a directory new and empty: whatever stood at its
  path or on the way (a link, a file, a FIFO, a directory of someone else's
  files) is removed without being followed, and the directory gets the
  owner and mode asked for, with no extended attribute (no ACL) left on it.

The caller makes sure nothing in the sandbox runs meanwhile (grading ends
every process first): the walk is safe against links, not against a
directory that changes under it.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Sequence
from pathlib import Path

from agentkit._errors import SandboxPathError

__all__ = [
    "DIR_FLAGS",
    "make_dirs",
    "open_dir",
    "remove_entry",
    "reset_dir",
    "split_path",
]

#: Opening a directory by name without following a link.
DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def split_path(path: str) -> list[str]:
    """The components of absolute in-sandbox ``path``; ``..``, ``.`` and NUL refused."""
    if not path.startswith("/") or "\0" in path:
        raise SandboxPathError(f"{path!r}: expected an absolute path inside the sandbox")
    parts = [p for p in path.split("/") if p]
    if any(p in (".", "..") for p in parts):
        raise SandboxPathError(f"{path!r}: '.' and '..' are not allowed here")
    return parts


def _shown(parts: Sequence[str]) -> str:
    return "/" + "/".join(parts)


def _mkdir(name: str, dir_fd: int, owner: int | None, mode: int) -> None:
    os.mkdir(name, 0o700, dir_fd=dir_fd)
    if owner is not None:
        os.chown(name, owner, owner, dir_fd=dir_fd, follow_symlinks=False)
    os.chmod(name, mode, dir_fd=dir_fd)


def _walk(root: Path, parts: Sequence[str], *, make: bool, owner: int | None, mode: int) -> int:
    """An fd of ``root/parts...``, every component opened without following a link.

    With ``make``, a missing component is made, and one that is not a
    directory (a link, a file, a FIFO) is removed and made a directory;
    without, either is a :class:`SandboxPathError` (a missing one:
    :class:`FileNotFoundError`).
    """
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for i, part in enumerate(parts):
            try:
                child = os.open(part, DIR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                if not make:
                    raise
                _mkdir(part, fd, owner, mode)
                child = os.open(part, DIR_FLAGS, dir_fd=fd)
            except OSError as exc:
                if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
                    raise
                if not make:
                    raise SandboxPathError(
                        f"{_shown(parts[: i + 1])} is not a directory (a symbolic link or "
                        "another kind of file): it is not followed"
                    ) from None
                remove_entry(part, fd)
                _mkdir(part, fd, owner, mode)
                child = os.open(part, DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = child
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_dir(root: Path, parts: Sequence[str]) -> int:
    """An fd of the directory ``root/parts...``, reached without following any link.

    Raises :class:`FileNotFoundError` when a component is missing and
    :class:`SandboxPathError` when one is not a directory. The caller closes
    the fd; entries inside it must be opened with ``O_NOFOLLOW`` too.
    """
    return _walk(root, parts, make=False, owner=None, mode=0o755)


def make_dirs(root: Path, parts: Sequence[str], *, owner: int | None) -> int:
    """An fd of directory ``root/parts...``, made (mode 0755, ``owner``'s) where missing;
    a component that is not a directory (a link, a file) is replaced by one."""
    return _walk(root, parts, make=True, owner=owner, mode=0o755)


def _open_own_dir(name: str, dir_fd: int) -> int:
    """Open directory ``name``; one its (non-root) owner made unreadable is opened up first."""
    try:
        return os.open(name, DIR_FLAGS, dir_fd=dir_fd)
    except PermissionError:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        if os.geteuid() == 0 or st.st_uid != os.geteuid():
            raise
        os.chmod(name, stat.S_IMODE(st.st_mode) | stat.S_IRWXU, dir_fd=dir_fd)
        return os.open(name, DIR_FLAGS, dir_fd=dir_fd)


def _empty(fd: int) -> None:
    """Remove everything in the open directory ``fd`` (never following a link)."""
    with contextlib.suppress(PermissionError):
        # a directory its (non-root) owner made read-only: ours to open up
        st = os.fstat(fd)
        if os.geteuid() != 0 and st.st_uid == os.geteuid():
            os.fchmod(fd, stat.S_IMODE(st.st_mode) | stat.S_IRWXU)
    for name in os.listdir(fd):
        remove_entry(name, fd)


def remove_entry(name: str, dir_fd: int) -> None:
    """Remove ``name`` in ``dir_fd``, whatever it is: a directory with all inside it,
    a link (never followed), a file, a FIFO, a device."""
    st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    if not stat.S_ISDIR(st.st_mode):
        os.unlink(name, dir_fd=dir_fd)
        return
    sub = _open_own_dir(name, dir_fd)
    try:
        _empty(sub)
    finally:
        os.close(sub)
    os.rmdir(name, dir_fd=dir_fd)


def _clear_xattrs(fd: int) -> None:
    """Remove the extended attributes of ``fd`` (ACLs included) that can be removed."""
    try:
        names = os.listxattr(fd)
    except OSError:
        return
    for name in names:
        with contextlib.suppress(OSError):
            os.removexattr(fd, name)


def reset_dir(root: Path, parts: Sequence[str], *, owner: int | None, mode: int) -> None:
    """Make ``root/parts...`` a new, empty directory of ``owner`` (None: this process's
    own) with ``mode``.

    Parents that are missing or not directories are made directories (mode
    0755); the directory itself is emptied when it is one (a mount point
    stays one) or else replaced. Nothing is followed on the way.
    """
    if not parts:
        raise SandboxPathError("the sandbox's root cannot be reset")
    parent = _walk(root, parts[:-1], make=True, owner=owner, mode=0o755)
    try:
        name = parts[-1]
        try:
            st: os.stat_result | None = os.stat(name, dir_fd=parent, follow_symlinks=False)
        except FileNotFoundError:
            st = None
        if st is not None and not stat.S_ISDIR(st.st_mode):
            remove_entry(name, parent)
            st = None
        if st is None:
            _mkdir(name, parent, owner, mode)
            return
        fd = _open_own_dir(name, parent)
        try:
            _empty(fd)
            _clear_xattrs(fd)
            if owner is not None:
                os.fchown(fd, owner, owner)
            os.fchmod(fd, mode)
        finally:
            os.close(fd)
    finally:
        os.close(parent)
