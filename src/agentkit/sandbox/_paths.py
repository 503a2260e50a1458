"""In-sandbox paths seen from the host: translated without escaping, walked without links.

**Translating.** A sandbox's file system is a list of :class:`Mount` s: the
rollout's writable root (``<root>/fs`` mounted at ``/``) and read-only binds of
host paths (``/usr``...). Paths from tasks and harnesses are resolved the way
the sandbox itself would see them: ``..`` stops at ``/``, and a symlink is
followed *inside* the sandbox (a link to ``/etc/passwd`` inside ``/app`` means
the sandbox's ``/etc/passwd``, never the host's). Copies never follow a
host-side symlink out of the sandbox: every entry is resolved again on its
own, and the copy itself walks to it one directory at a time without
following links (a directory the sandbox swaps for a link meanwhile makes the
copy fail rather than land on the host); only regular files are read or
written.

**Directories a verifier can trust.** What a command left in a sandbox may be
built to mislead whoever reads it afterwards: a directory replaced by a
symbolic link to a folder it prepared, a file where a directory is expected,
a FIFO that blocks a reader, files owned by another uid or given odd modes
and ACLs. :func:`open_dir` and :func:`reset_dir` work on the host's view of
the sandbox's files (the caller gives the host directory that is the
sandbox's mount, ``/proc/PID/root`` for a running image root) and walk one
path component at a time with ``O_NOFOLLOW``, so a link is never followed,
wherever it is:

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
import posixpath
import shutil
import stat
from collections.abc import Callable, Sequence
from pathlib import Path

import attrs

from agentkit._errors import SandboxPathError

__all__ = [
    "DIR_FLAGS",
    "Mount",
    "SandboxFS",
    "make_dirs",
    "open_dir",
    "remove_entry",
    "reset_dir",
    "split_path",
]

_MAX_LINKS = 40


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

    def open_part(fd: int, i: int, part: str) -> int:
        try:
            return os.open(part, DIR_FLAGS, dir_fd=fd)
        except FileNotFoundError:
            if not make:
                raise
            _mkdir(part, fd, owner, mode)
            return os.open(part, DIR_FLAGS, dir_fd=fd)
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
            return os.open(part, DIR_FLAGS, dir_fd=fd)

    return _descend(root, parts, open_part)


def _descend(root: Path, parts: Sequence[str], open_part: Callable[[int, int, str], int]) -> int:
    """An fd of ``root/parts...``: each part opened in the last by ``open_part(fd, index,
    part)``, every fd but the last closed (all of them when one fails)."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for i, part in enumerate(parts):
            child = open_part(fd, i, part)
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


@attrs.frozen
class Mount:
    """A host directory seen at ``target`` inside the sandbox."""

    target: str
    source: Path
    writable: bool


@attrs.frozen
class _Resolved:
    sandbox_path: str
    host_path: Path
    mount: Mount


def _within(path: str, prefix: str) -> bool:
    return prefix == "/" or path == prefix or path.startswith(prefix + "/")


@attrs.define
class SandboxFS:
    """The sandbox's file system as the host sees it."""

    mounts: Sequence[Mount]
    workdir: str = "/"
    #: In-sandbox prefixes that are not on disk (``/proc``, ``/dev``, the tmpfs ``/etc``).
    virtual: Sequence[str] = ("/proc", "/dev", "/sys")
    #: Host uid/gid to give what copies create (the sandbox's own id), or None to leave it.
    owner: int | None = None

    def _own(self, name: str, dir_fd: int) -> None:
        if self.owner is not None:
            os.chown(name, self.owner, self.owner, dir_fd=dir_fd, follow_symlinks=False)

    def _mount_for(self, path: str) -> Mount:
        best: Mount | None = None
        for m in self.mounts:
            if _within(path, m.target) and (best is None or len(m.target) > len(best.target)):
                best = m
        if best is None:
            raise SandboxPathError(f"{path!r} is not inside the sandbox's file system")
        return best

    def _host(self, parts: list[str]) -> tuple[str, Path, Mount]:
        spath = "/" + "/".join(parts)
        m = self._mount_for(spath)
        for v in self.virtual:
            if _within(spath, v) and len(v) > len(m.target):
                raise SandboxPathError(
                    f"{spath!r} is in memory inside the sandbox (not on disk): "
                    "read or write it with a command"
                )
        rest = spath[len(m.target) :].lstrip("/") if m.target != "/" else spath.lstrip("/")
        return spath, (m.source / rest if rest else m.source), m

    def mount_parts(self, path: str, *, writable: bool = False) -> tuple[Mount, list[str]]:
        """The mount absolute ``path`` is on (on disk, not in memory) and its components
        below that mount, unresolved: for walking it from the host without following links.

        ``writable`` refuses a read-only mount.
        """
        parts = split_path(path)
        spath, _, m = self._host(parts)
        if writable and not m.writable:
            raise SandboxPathError(f"{spath!r} is read-only inside the sandbox ({m.target})")
        below = parts[len(split_path(m.target)) :] if m.target != "/" else parts
        return m, below

    def absolute(self, path: str) -> str:
        """``path`` made absolute against the working directory (no resolution)."""
        if "\0" in path:
            raise SandboxPathError(f"path {path!r} contains a NUL byte")
        if not path:
            raise SandboxPathError("empty path")
        return path if path.startswith("/") else posixpath.join(self.workdir, path)

    def resolve(self, path: str, *, follow_last: bool = True) -> _Resolved:
        """Resolve ``path`` as the sandbox would, and name the host file it is."""
        todo = [p for p in self.absolute(path).split("/")][::-1]
        done: list[str] = []
        links = 0
        while todo:
            part = todo.pop()
            if part in ("", "."):
                continue
            if part == "..":
                if done:
                    done.pop()
                continue
            _, host, _ = self._host([*done, part])
            if (todo or follow_last) and host.is_symlink():
                links += 1
                if links > _MAX_LINKS:
                    raise SandboxPathError(f"{path!r}: too many levels of symbolic links")
                target = os.readlink(host)
                if target.startswith("/"):
                    done = []
                todo.extend(target.split("/")[::-1])
                continue
            done.append(part)
        spath, host, mount = self._host(done)
        # Defence in depth: the host file must really be under the mount's source.
        real = os.path.realpath(host.parent if not follow_last else host)
        src = os.path.realpath(mount.source)
        if not _within(real, src):
            raise SandboxPathError(f"{path!r} resolves outside the sandbox")
        return _Resolved(spath, host, mount)

    def writable(self, path: str, *, follow_last: bool = True) -> _Resolved:
        """Resolve ``path`` for writing: it must land on a writable mount."""
        r = self.resolve(path, follow_last=follow_last)
        if not r.mount.writable:
            raise SandboxPathError(f"{path!r} is read-only inside the sandbox ({r.mount.target})")
        return r

    def host_path(self, path: str) -> Path:
        """The host path of in-sandbox ``path`` (resolved, contained)."""
        return self.resolve(path).host_path

    # -- walking without following links ---------------------------------------

    @staticmethod
    def _open_dirs(r: _Resolved, parts: Sequence[str]) -> int:
        """An fd of ``parts`` below ``r``'s mount source, opened one at a time with O_NOFOLLOW."""

        def open_part(fd: int, _i: int, part: str) -> int:
            try:
                return os.open(part, DIR_FLAGS, dir_fd=fd)
            except OSError as exc:
                if isinstance(exc, FileNotFoundError):
                    raise
                raise SandboxPathError(
                    f"{r.sandbox_path!r} changed while it was being copied "
                    f"({part!r} is no longer a directory)"
                ) from None

        return _descend(r.mount.source, parts, open_part)

    @staticmethod
    def _parts(r: _Resolved) -> tuple[str, ...]:
        return r.host_path.relative_to(r.mount.source).parts

    def _open_parent(self, r: _Resolved) -> tuple[int, str]:
        """(fd of ``r``'s parent directory, ``r``'s name), reached without following links."""
        parts = self._parts(r)
        if not parts:
            raise SandboxPathError(f"{r.sandbox_path!r} is a mount point, not a file")
        return self._open_dirs(r, parts[:-1]), parts[-1]

    def _open_dir(self, r: _Resolved) -> int:
        """An fd of directory ``r``, reached without following links."""
        return self._open_dirs(r, self._parts(r))

    # -- copies ---------------------------------------------------------------

    def copy_in(self, src: Path, dst: str) -> None:
        """Copy host ``src`` (a file, or a directory's contents) to ``dst`` inside.

        Symlinks inside ``src`` are copied as symlinks: they are then followed
        inside the sandbox, never on the host.
        """
        st = os.lstat(src)
        if stat.S_ISDIR(st.st_mode):
            target = self.writable(dst)
            if target.host_path.is_symlink() or (
                target.host_path.exists() and not target.host_path.is_dir()
            ):
                raise SandboxPathError(f"{dst!r} exists and is not a directory")
            if not target.host_path.is_dir():
                self._make_parent(target.sandbox_path)
                self._mkdir(target)
            for entry in sorted(os.listdir(src)):
                self.copy_in(src / entry, posixpath.join(target.sandbox_path, entry))
            return
        if stat.S_ISLNK(st.st_mode):
            target = self.writable(dst, follow_last=False)
            self._make_parent(target.sandbox_path)
            parent, name = self._open_parent(target)
            try:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(name, dir_fd=parent)
                os.symlink(os.readlink(src), name, dir_fd=parent)
                self._own(name, parent)
            finally:
                os.close(parent)
            return
        if not stat.S_ISREG(st.st_mode):
            raise SandboxPathError(f"{src}: only files, directories and symlinks can be copied")
        target = self.writable(dst)
        self._make_parent(target.sandbox_path)
        self._write_file(src, target, st.st_mode)

    def _mkdir(self, r: _Resolved) -> None:
        if not self._parts(r):
            return  # a mount point: it exists
        parent, name = self._open_parent(r)
        try:
            with contextlib.suppress(FileExistsError):
                os.mkdir(name, dir_fd=parent)
                self._own(name, parent)
        finally:
            os.close(parent)

    def _make_parent(self, spath: str) -> None:
        parent = posixpath.dirname(spath)
        r = self.writable(parent)
        if not r.host_path.is_dir():
            if r.host_path.exists():
                raise SandboxPathError(f"{parent!r} exists and is not a directory")
            self._make_parent(r.sandbox_path)
            self._mkdir(self.writable(parent))

    def _write_file(self, src: Path, r: _Resolved, mode: int) -> None:
        parent, name = self._open_parent(r)
        try:
            flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
            try:
                fd = os.open(name, flags, mode & 0o7777, dir_fd=parent)
            except IsADirectoryError:
                raise SandboxPathError(f"cannot overwrite directory {name!r} with a file") from None
            except OSError as exc:  # ELOOP: a link appeared; ENXIO: a FIFO nobody reads
                raise SandboxPathError(
                    f"{r.sandbox_path!r} is not a regular file in the sandbox ({exc.strerror})"
                ) from None
        finally:
            os.close(parent)
        with os.fdopen(fd, "wb") as out:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise SandboxPathError(f"{r.sandbox_path!r} is not a regular file in the sandbox")
            os.set_blocking(fd, True)
            os.ftruncate(fd, 0)
            if self.owner is not None:
                os.fchown(fd, self.owner, self.owner)
            with open(src, "rb") as inp:
                shutil.copyfileobj(inp, out, 1 << 20)
            os.fchmod(fd, mode & 0o7777)

    def copy_out(self, src: str, dst: Path) -> None:
        """Copy in-sandbox ``src`` (a file, or a directory's contents) to host ``dst``.

        Symlinks are followed inside the sandbox and their contents copied, so
        nothing on the host ends up pointing at host files; dangling links and
        special files are skipped, and loops are cut.
        """
        r = self.resolve(src)
        if not r.host_path.exists():
            raise FileNotFoundError(f"{src!r} does not exist in the sandbox")
        self._copy_out(r, dst, set())

    def _copy_out(self, r: _Resolved, dst: Path, seen: set[tuple[int, int]]) -> None:
        try:
            if self._parts(r):
                parent, name = self._open_parent(r)
                try:
                    st = os.stat(name, dir_fd=parent, follow_symlinks=False)
                    fd = None
                    if stat.S_ISREG(st.st_mode):
                        flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
                        fd = os.open(name, flags, dir_fd=parent)
                finally:
                    os.close(parent)
            else:
                st = os.stat(r.mount.source)
                fd = None
        except FileNotFoundError:
            return
        key = (st.st_dev, st.st_ino)
        if stat.S_ISDIR(st.st_mode):
            if key in seen:
                return
            seen.add(key)
            dir_fd = self._open_dir(r)
            try:
                entries = sorted(os.listdir(dir_fd))
            finally:
                os.close(dir_fd)
            dst.mkdir(parents=True, exist_ok=True)
            for entry in entries:
                try:
                    child = self.resolve(posixpath.join(r.sandbox_path, entry))
                except SandboxPathError:
                    continue
                self._copy_out(child, dst / entry, seen)
        elif fd is not None:
            with os.fdopen(fd, "rb") as inp:
                if not stat.S_ISREG(os.fstat(fd).st_mode):
                    return  # swapped for something else since the stat
                os.set_blocking(fd, True)
                dst.parent.mkdir(parents=True, exist_ok=True)
                with open(dst, "wb") as out:
                    shutil.copyfileobj(inp, out, 1 << 20)
            os.chmod(dst, st.st_mode & 0o777)
