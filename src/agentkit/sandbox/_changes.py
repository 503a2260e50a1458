"""What a sandbox's commands changed in its files, compared with its start.

A local sandbox keeps every write in a layer of its own (on an image root,
the overlay's upper layer: new and changed files, and whiteouts for
deletions; on the host's userland, its root directory), so the changes are
that layer's files. :func:`layer_changes` lists them as in-sandbox paths,
never following a link, skipping whole subtrees the caller is not
interested in, and stopping at a limit: what a separate verifier was not
given can then be named on the rollout.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Collection, Iterator
from pathlib import Path

__all__ = ["layer_changes", "within"]

#: overlayfs marks a directory that hides the image's one with this attribute (value ``y``).
_OPAQUE = ("user.overlay.opaque", "trusted.overlay.opaque")


def within(path: str, prefixes: Collection[str]) -> bool:
    """True when in-sandbox ``path`` is one of ``prefixes`` or inside one."""
    return any(path == p or path.startswith(p.rstrip("/") + "/") for p in prefixes)


def _opaque(path: str) -> bool:
    for name in _OPAQUE:
        try:
            if os.getxattr(path, name, follow_symlinks=False) == b"y":
                return True
        except OSError:
            continue
    return False


def _walk(host: str, path: str, exclude: Collection[str], dev: int | None) -> Iterator[str]:
    try:
        entries = sorted(os.scandir(host), key=lambda e: e.name)
    except OSError:
        return
    for entry in entries:
        child = f"{path.rstrip('/')}/{entry.name}"
        if within(child, exclude):
            continue
        try:
            st = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if dev is not None and st.st_dev != dev:
            continue  # a mount point (a read-only piece of the host)
        if stat.S_ISDIR(st.st_mode):
            if _opaque(entry.path):
                yield child  # replaced whole: what is inside is new
                continue
            yield from _walk(entry.path, child, exclude, dev)
        else:
            yield child


def layer_changes(
    layer: Path,
    *,
    prefix: str = "/",
    exclude: Collection[str] = (),
    limit: int = 50,
    one_file_system: bool = False,
) -> list[str]:
    """In-sandbox paths of the non-directory entries of ``layer`` (files, links, whiteouts
    of deleted files, FIFOs) and of directories that replaced the image's, in order;
    ``layer`` is seen at ``prefix`` inside. Subtrees in ``exclude`` are skipped, and
    with ``one_file_system`` entries on another device; at most ``limit`` paths."""
    dev = os.stat(layer).st_dev if one_file_system else None
    out: list[str] = []
    for path in _walk(str(layer), prefix, exclude, dev):
        out.append(path)
        if len(out) >= limit:
            break
    return out
