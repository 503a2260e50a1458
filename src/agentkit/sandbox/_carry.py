"""What a sandbox's commands changed in its files, and carrying chosen paths into another.

**What changed.** A local sandbox keeps every write in a layer of its own (on
an image root, the overlay's upper layer: new and changed files, and
whiteouts for deletions; on the host's userland, its root directory), so the
changes are that layer's files. :func:`layer_changes` lists them as
in-sandbox paths, never following a link, skipping whole subtrees the caller
is not interested in, and stopping at a limit: what a separate verifier was
not given can then be named on the rollout.

**Carrying.** A separate verifier starts from the task's image and is given
only what the agent made under the paths the task declares (its working
directory by default). :func:`carry` copies those paths, as the agent's
sandbox holds them, over the same paths of the other sandbox. When both run
on the same image and the source's own changes are known (an overlay's upper
layer), only those changes are copied: a file written or changed, one deleted
(deleted in the target), a directory replaced (copied whole); otherwise the
whole path is copied, what stood there in the target removed first. Every
entry is copied as :mod:`._layercopy` copies a fork's files (owners, modes,
links kept as links, FIFOs as FIFOs), never following a link in either
sandbox; a path whose parent the agent replaced with a link is not followed
either, and counts as missing.

Both sandboxes must be quiet: the source's processes paused or ended, the
target's not yet running anything of the verifier's.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from pathlib import Path

import attrs

from agentkit._errors import SandboxPathError
from agentkit.sandbox._layercopy import copy_entry
from agentkit.sandbox._paths import (
    DIR_FLAGS,
    SandboxFS,
    make_dirs,
    open_dir,
    remove_entry,
    split_path,
)

__all__ = [
    "Carried",
    "carry",
    "carry_layer",
    "deepest",
    "distinct_paths",
    "layer_changes",
    "within",
]

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


@attrs.define
class Carried:
    """What :func:`carry` copied: entries, bytes of file data, and per path ``copied``
    or why not (``missing``: not in the source, or behind a link there; ``read-only``:
    on a read-only mount, which no command could change).

    ``changed``: when the carry listed the source's changes anyway (the docker
    sandbox's ``docker diff``), the paths changed outside the carried ones, as
    :func:`~agentkit.sandbox.changed_paths` gives them (the deepest of each branch,
    sorted), listed while the source was paused for the copy: what the files carried
    were given without. None: not listed (ask ``changed_paths``)."""

    entries: int = 0
    bytes: int = 0
    paths: dict[str, str] = attrs.field(factory=dict)
    changed: list[str] | None = None


def deepest(paths: Iterable[str]) -> list[str]:
    """``paths`` sorted, without those that have another of ``paths`` inside them (the
    deepest of each branch: a changed directory is named by what changed in it)."""
    ordered = sorted(paths)
    return [
        p
        for i, p in enumerate(ordered)
        if not (i + 1 < len(ordered) and ordered[i + 1].startswith(p.rstrip("/") + "/"))
    ]


def distinct_paths(paths: Sequence[str]) -> list[str]:
    """``paths`` normalised, without duplicates or paths inside another one, shortest first."""
    out: list[str] = []
    for path in sorted({"/" + "/".join(split_path(p)) for p in paths}, key=len):
        if not within(path, out):
            out.append(path)
    return out


def carry(
    src: SandboxFS,
    dst: SandboxFS,
    paths: Sequence[str],
    *,
    ids: Mapping[int, int] | None = None,
    changes: Path | None = None,
) -> Carried:
    """Copy each of ``paths`` from ``src`` over the same path of ``dst`` (see the module
    docstring). ``ids`` remaps host owners (the source sandbox's host id to the
    target's). A path of the root itself is refused.

    ``changes``: the host directory holding only what the source's commands changed
    (an overlay's upper layer, its root the sandbox's ``/``), when the target starts
    from the same image: then only those changes under each path are copied (an
    entry deleted there is deleted, a directory replaced is copied whole, a file
    changed is copied), not all the image's files under it.
    """
    out = Carried()
    for path in distinct_paths(paths):
        sparts = src.mount_parts(path)[1]
        dmount, dparts = dst.mount_parts(path)
        if not dmount.writable:
            # read-only in both (the host's /usr on its userland): nothing was changed there
            out.paths[path] = "read-only"
            continue
        if not sparts or not dparts:
            raise SandboxPathError(f"{path!r} is a mount point: it cannot be carried")
        if changes is not None:
            state = _layer_state(changes, split_path(path))
            if state == "unchanged":
                out.paths[path] = "unchanged"
                continue
            if state == "changed":
                _carry_changes(changes, src, dst, path, ids, out)
                out.paths[path] = "changes copied"
                continue
        _carry_whole(src, dst, path, ids, out)
    return out


def _carry_whole(
    src: SandboxFS, dst: SandboxFS, path: str, ids: Mapping[int, int] | None, out: Carried
) -> None:
    smount, sparts = src.mount_parts(path)
    dmount, dparts = dst.mount_parts(path)
    name = sparts[-1]
    try:
        sparent: int | None = open_dir(smount.source, sparts[:-1])
    except (FileNotFoundError, SandboxPathError):
        sparent = None
    try:
        if sparent is not None:
            try:
                os.stat(name, dir_fd=sparent, follow_symlinks=False)
            except FileNotFoundError:
                os.close(sparent)
                sparent = None
        dparent = make_dirs(dmount.source, dparts[:-1], owner=dst.owner)
        try:
            with contextlib.suppress(FileNotFoundError):
                remove_entry(dparts[-1], dparent)
            if sparent is None:
                out.paths[path] = "missing"
                return
            copied = copy_entry(sparent, dparent, name, ids=ids)
            out.entries += copied.entries
            out.bytes += copied.bytes
            out.paths[path] = "copied"
        finally:
            os.close(dparent)
    finally:
        if sparent is not None:
            os.close(sparent)


def carry_layer(
    layer: Path, target: Path, names: Sequence[str], *, ids: Mapping[int, int] | None = None
) -> Carried:
    """Copy what upper layer ``layer`` holds of each top-level in-sandbox path ``/NAME``
    of ``names`` into ``target``, the upper layer of a sandbox of the same image that
    has not started yet (nothing of those names in it): what :func:`carry` gives
    through both running overlays, made before the target's overlay is mounted.

    The layer's entries are copied as they are (:func:`copy_entry`: whiteouts,
    opaque markers, owners remapped by ``ids``, nothing followed), so the target's
    overlay shows under each path what the source's showed: the image's files, the
    source's changes over them. ``Carried.paths`` says ``unchanged`` (nothing of it
    in the layer), ``changes copied`` (the image's directory, changed below),
    ``copied`` (made or replaced whole) or ``missing`` (deleted)."""
    out = Carried()
    src = os.open(layer, DIR_FLAGS)
    try:
        dst = os.open(target, DIR_FLAGS)
        try:
            for path in distinct_paths([f"/{name}" for name in names]):
                parts = split_path(path)
                if len(parts) != 1:
                    raise SandboxPathError(f"{path!r}: only a top-level path is carried by layer")
                state = _layer_state(layer, parts)
                if state == "unchanged":
                    out.paths[path] = "unchanged"
                    continue
                st = os.stat(parts[0], dir_fd=src, follow_symlinks=False)
                copied = copy_entry(src, dst, parts[0], ids=ids)
                out.entries += copied.entries
                out.bytes += copied.bytes
                if _whiteout(st):
                    out.paths[path] = "missing"
                else:
                    out.paths[path] = "changes copied" if state == "changed" else "copied"
        finally:
            os.close(dst)
    finally:
        os.close(src)
    return out


def _whiteout(st: os.stat_result) -> bool:
    return stat.S_ISCHR(st.st_mode) and st.st_rdev == 0


def _layer_state(layer: Path, parts: Sequence[str]) -> str:
    """What the upper layer says of in-sandbox ``parts``: ``unchanged`` (nothing of it
    is in the layer), ``changed`` (a directory of the image whose changes are below
    it), or ``whole`` (replaced, deleted, or made by the commands: copied as it is)."""
    here = str(layer)
    for part in parts:
        here = os.path.join(here, part)
        try:
            st = os.lstat(here)
        except FileNotFoundError:
            return "unchanged"
        if not stat.S_ISDIR(st.st_mode) or _whiteout(st) or _opaque(here):
            return "whole"
    return "changed"


def _carry_changes(
    layer: Path,
    src: SandboxFS,
    dst: SandboxFS,
    path: str,
    ids: Mapping[int, int] | None,
    out: Carried,
) -> None:
    """Copy what the layer holds under ``path`` (a directory of the image, changed below)
    from ``src`` over ``dst``, entry by entry (see :func:`carry`)."""
    smount, sparts = src.mount_parts(path)
    dmount, dparts = dst.mount_parts(path)
    upper = open_dir(layer, split_path(path))
    try:
        sdir = open_dir(smount.source, sparts)
        try:
            ddir = make_dirs(dmount.source, dparts, owner=dst.owner)
            try:
                _changes_below(upper, sdir, ddir, ids, out)
            finally:
                os.close(ddir)
        finally:
            os.close(sdir)
    finally:
        os.close(upper)


def _changes_below(
    upper: int, sdir: int, ddir: int, ids: Mapping[int, int] | None, out: Carried
) -> None:
    for name in sorted(os.listdir(upper)):
        st = os.stat(name, dir_fd=upper, follow_symlinks=False)
        dst_st: os.stat_result | None = None
        with contextlib.suppress(FileNotFoundError):
            dst_st = os.stat(name, dir_fd=ddir, follow_symlinks=False)
        if _whiteout(st):
            if dst_st is not None:
                remove_entry(name, ddir)
            continue
        try:
            here = os.stat(name, dir_fd=sdir, follow_symlinks=False)
        except FileNotFoundError:
            continue  # changed while copied: the source is paused, so never
        opaque = stat.S_ISDIR(st.st_mode) and _opaque(f"/proc/self/fd/{upper}/{name}")
        if stat.S_ISDIR(st.st_mode) and stat.S_ISDIR(here.st_mode) and not opaque:
            if dst_st is not None and not stat.S_ISDIR(dst_st.st_mode):
                remove_entry(name, ddir)
                dst_st = None
            if dst_st is None:
                # a directory of the image the target lacks: made with the source's owner
                # and mode, then filled with what changed below it
                os.mkdir(name, 0o700, dir_fd=ddir)
            sub_u = os.open(name, DIR_FLAGS, dir_fd=upper)
            sub_s = os.open(name, DIR_FLAGS, dir_fd=sdir)
            sub_d = os.open(name, DIR_FLAGS, dir_fd=ddir)
            try:
                _changes_below(sub_u, sub_s, sub_d, ids, out)
                uid, gid = (
                    (ids or {}).get(here.st_uid, here.st_uid),
                    (ids or {}).get(here.st_gid, here.st_gid),
                )
                os.fchown(sub_d, uid, gid)
                os.fchmod(sub_d, stat.S_IMODE(here.st_mode))
            finally:
                for fd in (sub_u, sub_s, sub_d):
                    os.close(fd)
            out.entries += 1
            continue
        if dst_st is not None:
            remove_entry(name, ddir)
        copied = copy_entry(sdir, ddir, name, ids=ids)
        out.entries += copied.entries
        out.bytes += copied.bytes
