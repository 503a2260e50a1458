"""Carrying chosen paths of one sandbox's files into another, from the host.

A separate verifier starts from the task's image and is given only what the
agent made under the paths the task declares (its working directory by
default). :func:`carry` copies those paths, as the agent's sandbox holds
them, over the same paths of the other sandbox: what stood there in the
other one (the image's own files) is removed first, so a file the agent
deleted stays deleted. Every entry is copied as :mod:`._layercopy` copies a
fork's files (owners, modes, links kept as links, FIFOs as FIFOs), never
following a link in either sandbox; a path whose parent the agent replaced
with a link is not followed either, and counts as missing.

Both sandboxes must be quiet: the source's processes ended, the target's
not yet running anything of the verifier's.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping, Sequence

import attrs

from agentkit.sandbox._errors import SandboxPathError
from agentkit.sandbox._freshdir import make_dirs, open_dir, remove_entry, split_path
from agentkit.sandbox._layercopy import copy_entry
from agentkit.sandbox._paths import SandboxFS

__all__ = ["Carried", "carry", "distinct_paths"]


@attrs.define
class Carried:
    """What :func:`carry` copied: entries, bytes of file data, and per path ``copied``
    or why not (``missing``: not in the source, or behind a link there; ``read-only``:
    on a read-only mount, which no command could change)."""

    entries: int = 0
    bytes: int = 0
    paths: dict[str, str] = attrs.field(factory=dict)


def distinct_paths(paths: Sequence[str]) -> list[str]:
    """``paths`` normalised, without duplicates or paths inside another one, shortest first."""
    out: list[str] = []
    for path in sorted({"/" + "/".join(split_path(p)) for p in paths}, key=len):
        if not any(path == kept or path.startswith(kept.rstrip("/") + "/") for kept in out):
            out.append(path)
    return out


def carry(
    src: SandboxFS,
    dst: SandboxFS,
    paths: Sequence[str],
    *,
    ids: Mapping[int, int] | None = None,
) -> Carried:
    """Copy each of ``paths`` from ``src`` over the same path of ``dst`` (see the module
    docstring). ``ids`` remaps host owners (the source sandbox's host id to the
    target's). A path of the root itself is refused."""
    out = Carried()
    for path in distinct_paths(paths):
        smount, sparts = src.mount_parts(path)
        dmount, dparts = dst.mount_parts(path)
        if not dmount.writable:
            # read-only in both (the host's /usr on its userland): nothing was changed there
            out.paths[path] = "read-only"
            continue
        if not sparts or not dparts:
            raise SandboxPathError(f"{path!r} is a mount point: it cannot be carried")
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
                    continue
                copied = copy_entry(sparent, dparent, name, ids=ids)
                out.entries += copied.entries
                out.bytes += copied.bytes
                out.paths[path] = "copied"
            finally:
                os.close(dparent)
        finally:
            if sparent is not None:
                os.close(sparent)
    return out
