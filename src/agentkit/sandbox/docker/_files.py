"""Files in and out of a container, as tar archives through the engine's archive API.

Uploads: a file lands at the destination path, a directory's contents in
the destination directory; missing parents are made; symlinks are copied as
symlinks (followed inside the container, never on the host); owners are root.
Downloads: regular files and directories only; a symlink inside is skipped
(it could name a host path once on the host); names are checked so nothing
lands outside the destination.
"""

from __future__ import annotations

import io
import os
import posixpath
import stat
import tarfile
from pathlib import Path, PurePosixPath
from typing import IO

from agentkit._errors import SandboxPathError

__all__ = ["extract_download", "unmap_owners", "upload_tar"]


def _add(tar: tarfile.TarFile, path: Path, arcname: str) -> None:
    info = tar.gettarinfo(str(path), arcname=arcname)
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    if info.isreg():
        with open(path, "rb") as f:
            tar.addfile(info, f)
    elif info.isdir() or info.issym():
        tar.addfile(info)
    # FIFOs, sockets and devices are not copied


def upload_tar(src: Path, dst: str) -> bytes:
    """A tar to extract at ``/`` putting host ``src`` at absolute in-container ``dst``."""
    if "\0" in dst or not dst.startswith("/"):
        raise SandboxPathError(f"upload destination {dst!r} must be an absolute path")
    target = posixpath.normpath(dst).lstrip("/")
    if not target:
        raise SandboxPathError("cannot upload over the container's root directory")
    buf = io.BytesIO()
    st = os.lstat(src)
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        if stat.S_ISDIR(st.st_mode):
            for dirpath, dirnames, filenames in os.walk(src):
                dirnames.sort()
                rel = Path(dirpath).relative_to(src)
                base = target if rel == Path(".") else f"{target}/{rel.as_posix()}"
                if rel != Path("."):
                    _add(tar, Path(dirpath), base)
                for name in sorted(filenames) + [
                    d for d in dirnames if os.path.islink(os.path.join(dirpath, d))
                ]:
                    _add(tar, Path(dirpath) / name, f"{base}/{name}")
                dirnames[:] = [d for d in dirnames if not os.path.islink(os.path.join(dirpath, d))]
        else:
            _add(tar, src, target)
    return buf.getvalue()


def _safe_parts(name: str) -> tuple[str, ...]:
    parts = PurePosixPath(name).parts
    if not parts or parts[0] == "/" or ".." in parts:
        raise SandboxPathError(f"the container sent an unsafe path in its archive: {name!r}")
    return parts


def extract_download(data: tarfile.TarFile, src: str, dst: Path) -> None:
    """Write the archive of in-container ``src`` to host ``dst`` (file, or directory contents)."""
    members = data.getmembers()
    if not members:
        raise SandboxPathError(f"{src!r}: the container sent nothing")
    top = members[0]
    top_name = _safe_parts(top.name)[0]
    if top.isreg() and len(members) == 1:
        dst.parent.mkdir(parents=True, exist_ok=True)
        _write_file(data, top, dst)
        return
    if not top.isdir():
        raise SandboxPathError(f"{src!r} is not a regular file or a directory")
    dst.mkdir(parents=True, exist_ok=True)
    for member in members[1:]:
        parts = _safe_parts(member.name)
        if parts[0] != top_name:
            raise SandboxPathError(f"the container sent {member.name!r} outside {src!r}")
        out_path = dst.joinpath(*parts[1:])
        if member.isdir():
            out_path.mkdir(parents=True, exist_ok=True)
        elif member.isreg():
            out_path.parent.mkdir(parents=True, exist_ok=True)
            if out_path.is_symlink():
                out_path.unlink()
            _write_file(data, member, out_path)
        # symlinks, devices, FIFOs: skipped


def _write_file(data: tarfile.TarFile, member: tarfile.TarInfo, path: Path) -> None:
    """Write the archive's regular file ``member`` at host ``path``, a MiB at a time, with
    its mode's permission bits (at most ``0o755``)."""
    source = data.extractfile(member)
    assert source is not None
    with open(path, "wb") as out:
        while chunk := source.read(1 << 20):
            out.write(chunk)
    os.chmod(path, member.mode & 0o755)


def unmap_owners(src: IO[bytes], dst: IO[bytes], root_ids: tuple[int, int] | None) -> None:
    """Copy the tar archive ``src`` to ``dst`` (entry by entry, never whole in memory),
    owners turned back into the container's own ids.

    An engine with userns-remap archives a container's files with their host ids
    (the container's uid 1000 as ``root_ids[0] + 1000``) and refuses those ids when
    the archive is put into another container: they are shifted back here.
    Entries with an absolute name or ``..`` are left out.
    """
    with tarfile.open(fileobj=src, mode="r|") as inp, tarfile.open(fileobj=dst, mode="w|") as out:
        for info in inp:
            parts = PurePosixPath(info.name).parts
            if info.name.startswith("/") or ".." in parts:
                continue
            if root_ids is not None:
                if info.uid >= root_ids[0]:
                    info.uid -= root_ids[0]
                if info.gid >= root_ids[1]:
                    info.gid -= root_ids[1]
            info.uname = info.gname = ""
            out.addfile(info, inp.extractfile(info) if info.isreg() else None)
