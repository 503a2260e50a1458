"""Reading the verifier's folder from the host: never through a link, never past a cap.

The sandbox hands over its ``/logs/verifier`` as an open directory reached
without following any link (:func:`agentkit.sandbox.open_dir`); everything
here opens what is inside it relative to that descriptor with
``O_NOFOLLOW`` and ``O_NONBLOCK``, so a symbolic link (to a file the agent
prepared, to ``/dev/zero``) is never followed and a FIFO never blocks:
both are reported as what they are. A file is read up to its cap and no
further, whatever it claims to be; a sparse file is refused before it is
read (it would become real disk on the host). No program of the sandbox
takes part, so none the agent replaced can change what is read.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from agentkit_harbor._sandbox_io import SPARSE_SLACK_BYTES, CappedRead, TreeCopy

__all__ = ["copy_dir_out", "read_file_at"]

_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_MIB = 1024 * 1024
_KINDS = {
    stat.S_IFLNK: "a symbolic link",
    stat.S_IFIFO: "a FIFO",
    stat.S_IFSOCK: "a socket",
    stat.S_IFCHR: "a device",
    stat.S_IFBLK: "a device",
    stat.S_IFDIR: "a directory",
}


def _kind(mode: int) -> str:
    return _KINDS.get(stat.S_IFMT(mode), "a special file")


def _read_fd(fd: int, limit: int) -> bytes:
    chunks: list[bytes] = []
    got = 0
    while got < limit:
        data = os.read(fd, min(limit - got, _MIB))
        if not data:
            break
        chunks.append(data)
        got += len(data)
    return b"".join(chunks)


def read_file_at(dir_fd: int, name: str, cap: int) -> CappedRead | str | None:
    """At most ``cap`` bytes of file ``name`` in ``dir_fd`` (``over_cap`` when it holds more).

    None when there is no such entry; a string saying what it is (``a
    symbolic link``, ``a FIFO``, ``a directory``...) when it is not a
    regular file. At most ``cap + 1`` bytes are read.
    """
    try:
        fd = os.open(name, _READ_FLAGS, dir_fd=dir_fd)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return "a symbolic link"
        if exc.errno == errno.EISDIR:
            return "a directory"
        try:
            return _kind(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
        except OSError:
            return f"unreadable ({exc.strerror})"
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            return _kind(mode)
        os.set_blocking(fd, True)
        data = _read_fd(fd, cap + 1)
    finally:
        os.close(fd)
    return CappedRead(data=data[:cap], over_cap=len(data) > cap)


def _fmt(n: int) -> str:
    return f"{n / _MIB:g} MiB" if n >= _MIB else f"{n} bytes"


def copy_dir_out(dir_fd: int, dst: Path, *, max_file_bytes: int, max_total_bytes: int) -> TreeCopy:
    """Copy the regular files under ``dir_fd`` to host directory ``dst``, within caps.

    Links, FIFOs, devices and sockets are left out, sparse files refused, a
    file over ``max_file_bytes`` kept truncated, files past
    ``max_total_bytes`` (all together) refused: each with its status in
    the returned :class:`TreeCopy` (``entries`` and ``skipped``, as the
    sandbox-side copy records them).
    """
    report = TreeCopy()
    dst.mkdir(parents=True, exist_ok=True)
    _copy(dir_fd, dst, "", report, max_file_bytes, max_total_bytes)
    return report


def _skip(report: TreeCopy, rel: str, size: int, status: str) -> None:
    report.skipped.append({"path": rel, "size": size, "status": status})
    report.entries[rel] = status


def _copy(
    dir_fd: int, dst: Path, prefix: str, report: TreeCopy, max_file: int, max_total: int
) -> None:
    for name in sorted(os.listdir(dir_fd)):
        rel = f"{prefix}{name}"
        try:
            st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            continue
        if stat.S_ISDIR(st.st_mode):
            try:
                sub = os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
            except OSError as exc:
                _skip(report, rel, 0, f"failed: {exc.strerror}")
                continue
            try:
                (dst / name).mkdir(exist_ok=True)
                _copy(sub, dst / name, f"{rel}/", report, max_file, max_total)
            finally:
                os.close(sub)
            continue
        if not stat.S_ISREG(st.st_mode):
            _skip(report, rel, st.st_size, f"refused: {_kind(st.st_mode)}, not a regular file")
            continue
        if st.st_size - st.st_blocks * 512 > SPARSE_SLACK_BYTES:
            on_disk = _fmt(st.st_blocks * 512)
            _skip(report, rel, st.st_size, f"refused: sparse, {on_disk} on disk")
            continue
        nbytes = min(st.st_size, max_file)
        if report.bytes + nbytes > max_total:
            _skip(report, rel, st.st_size, f"refused: over the total cap of {_fmt(max_total)}")
            continue
        got = read_file_at(dir_fd, name, nbytes)
        if not isinstance(got, CappedRead):
            _skip(report, rel, st.st_size, f"failed: it became {got or 'missing'}")
            continue
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC
        with open(os.open(dst / name, flags, 0o644), "wb") as out:
            out.write(got.data)
        report.files += 1
        report.bytes += len(got.data)
        if st.st_size > max_file:
            _skip(report, rel, st.st_size, f"truncated to the first {_fmt(max_file)} (the cap)")
        else:
            report.entries[rel] = "ok"
