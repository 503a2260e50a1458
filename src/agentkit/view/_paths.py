"""Which files the viewer may read: only regular files inside the directory it serves.

Every path that comes from a URL, or from a run's own files (an
``events_file`` field, say), goes through :func:`inside`: absolute paths,
``..`` components, NUL bytes and backslashes are refused before touching the
disk, and the resolved path (symlinks followed) must still lie inside the
served root. So a crafted URL, or a symlink a rollout left in its sandbox
files, can never lead outside.
"""

from __future__ import annotations

import os
import re
from pathlib import Path, PurePosixPath

__all__ = ["NotFound", "Refused", "inside", "is_safe_name"]

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@+=-]*$")


class Refused(Exception):
    """A path that would lead outside the served directory (HTTP 403)."""


class NotFound(Exception):
    """Nothing there, or not something the viewer serves (HTTP 404)."""


def is_safe_name(name: str) -> bool:
    """A single path component the viewer accepts in URLs (run names, rollout ids)."""
    return bool(_NAME.match(name)) and name not in (".", "..") and len(name) <= 255


def inside(root: Path, relative: str, *, base: Path | None = None) -> Path:
    """``base / relative`` (``base`` defaults to ``root``), refused unless it stays inside ``root``.

    ``root`` must already be resolved. Raises :class:`Refused` for a path
    that is absolute, has ``..``, a NUL or a backslash, or resolves (through
    symlinks) outside ``root``; :class:`NotFound` when nothing is there.
    """
    if not relative or "\x00" in relative or "\\" in relative:
        raise Refused(f"refused path {relative!r}")
    pure = PurePosixPath(relative)
    if pure.is_absolute() or relative.startswith("/") or any(p == ".." for p in pure.parts):
        raise Refused(f"refused path {relative!r}: outside the served directory")
    candidate = (base or root) / pure
    try:
        resolved = Path(os.path.realpath(candidate, strict=True))
    except OSError:
        raise NotFound(f"no such file: {relative}") from None
    if resolved != root and root not in resolved.parents:
        raise Refused(f"refused path {relative!r}: it leads outside the served directory")
    return resolved
