"""A directory's lock: one process writes a run directory, or runs a job, at a time."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["try_lock"]


def try_lock(path: Path) -> int | None:
    """Take the exclusive lock of the lock file ``path`` (created when missing) without
    waiting: the open descriptor, which holds the lock until it is closed, or None when
    another process holds it. Raises ``OSError`` when the file cannot be opened."""
    import fcntl  # POSIX only: the lock is taken where a run or a job is written

    fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0))
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    return fd
