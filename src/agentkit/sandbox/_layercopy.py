"""A faithful copy of a sandbox's writable files: what a fork's child starts from.

:func:`copy_tree` copies a directory tree as the kernel sees it, never
following a symbolic link: regular files (their data with
``copy_file_range``, which shares blocks on file systems that can, such as
XFS and Btrfs, and copies in the kernel elsewhere; holes stay holes),
directories, symbolic links, FIFOs, sockets and device nodes (overlayfs
whiteouts are character devices 0/0), hard links between copied files,
owners (optionally remapped), modes (set-id bits included), access and
modification times, and every extended attribute (overlayfs' own:
``user.overlay.opaque`` on a directory whose lower contents are hidden,
``origin``, ``redirect``; file capabilities). Hard links to the source are
never made: a file written in place later (as a sandbox writes its upper
layer) would change in both.

The caller makes sure nothing writes under ``src`` while it runs (the fork
pauses the sandbox's processes).
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Collection, Mapping
from pathlib import Path

import attrs

__all__ = ["CopyStats", "copy_entry", "copy_tree"]

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
_CREATE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
#: copy_file_range errors that mean "not between these two files": copy by hand.
_NO_CFR = (errno.EXDEV, errno.EINVAL, errno.EOPNOTSUPP, errno.ENOSYS, errno.EPERM, errno.EBADF)
_CHUNK = 1 << 30


@attrs.define
class CopyStats:
    """What :func:`copy_tree` copied: entries (of every kind) and bytes of file data."""

    entries: int = 0
    bytes: int = 0

    def __add__(self, other: CopyStats) -> CopyStats:
        return CopyStats(entries=self.entries + other.entries, bytes=self.bytes + other.bytes)


def _umask() -> int:
    """This process's umask, read without changing it (other threads create files)."""
    with contextlib.suppress(OSError, ValueError), open("/proc/self/status") as f:
        for line in f:
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    return 0o777  # unknown: always set the mode explicitly


class _Copier:
    def __init__(
        self,
        ids: Mapping[int, int] | None,
        one_file_system: bool,
        exclude: Collection[str],
        merge: bool,
    ) -> None:
        self.ids = dict(ids or {})
        self.one_file_system = one_file_system
        self.exclude = frozenset(exclude)
        self.merge = merge
        self.euid, self.egid = os.geteuid(), os.getegid()
        self.umask = _umask()
        self.links: dict[tuple[int, int], str] = {}
        self.stats = CopyStats()
        self.dev = 0
        self.dst_root = -1

    # -- ownership, modes, times, attributes ------------------------------------

    def owner(self, st: os.stat_result) -> tuple[int, int]:
        return self.ids.get(st.st_uid, st.st_uid), self.ids.get(st.st_gid, st.st_gid)

    def finish(self, target: int | str, st: os.stat_result, dfd: int | None, src: int | str,
               sfd: int | None, *, created_mode: int | None) -> None:  # fmt: skip
        """Owner, extended attributes, mode and times of a copied entry.

        ``target``/``src`` are open descriptors (``dfd``/``sfd`` None) or names in
        those directories. Order matters: ``chown`` clears set-id bits and file
        capabilities, so it goes first, the mode after the attributes.
        """
        kind = stat.S_IFMT(st.st_mode)
        uid, gid = self.owner(st)
        if (uid, gid) != (self.euid, self.egid):
            if dfd is None:
                os.chown(target, uid, gid)
            else:
                os.chown(target, uid, gid, dir_fd=dfd, follow_symlinks=False)
        self.copy_xattrs(src, sfd, target, dfd)
        mode = stat.S_IMODE(st.st_mode)
        if kind != stat.S_IFLNK and mode != created_mode:
            if dfd is None:
                os.chmod(target, mode)
            else:
                os.chmod(target, mode, dir_fd=dfd, follow_symlinks=False)
        times = (st.st_atime_ns, st.st_mtime_ns)
        if dfd is None:
            os.utime(target, ns=times)
        else:
            os.utime(target, ns=times, dir_fd=dfd, follow_symlinks=False)

    def copy_xattrs(self, src: int | str, sfd: int | None, dst: int | str,
                    dfd: int | None) -> None:  # fmt: skip
        if sfd is None:  # open descriptors
            for name in os.listxattr(src):
                os.setxattr(dst, name, os.getxattr(src, name))
            return
        # An entry by name (a link, a device, a FIFO): never followed.
        spath, dpath = f"/proc/self/fd/{sfd}/{src}", f"/proc/self/fd/{dfd}/{dst}"
        for name in os.listxattr(spath, follow_symlinks=False):
            value = os.getxattr(spath, name, follow_symlinks=False)
            os.setxattr(dpath, name, value, follow_symlinks=False)

    # -- opening what the owner made unreadable ---------------------------------

    def open_src(
        self, name: str, sfd: int, st: os.stat_result, flags: int, *, keep_loose: bool = False
    ) -> tuple[int, bool]:
        """Open ``name`` for reading: (descriptor, loosened).

        An entry this (non-root) user owns but made unreadable is opened with
        its mode loosened (``u+r``, ``u+x`` for a directory), restored at
        once, or, with ``keep_loose`` (a directory whose entries are still to
        be looked up), by the caller (:meth:`restore`) when ``loosened``.
        """
        try:
            return self._open(name, sfd, flags), False
        except PermissionError:
            if self.euid == 0 or st.st_uid != self.euid:
                raise
        extra = stat.S_IRUSR | (stat.S_IXUSR if stat.S_ISDIR(st.st_mode) else 0)
        os.chmod(name, stat.S_IMODE(st.st_mode) | extra, dir_fd=sfd)
        try:
            fd = self._open(name, sfd, flags)
        except BaseException:
            self.restore(name, sfd, st)
            raise
        if not keep_loose:
            self.restore(name, sfd, st)
        return fd, keep_loose

    def restore(self, name: str, sfd: int, st: os.stat_result) -> None:
        os.chmod(name, stat.S_IMODE(st.st_mode), dir_fd=sfd)

    def _open(self, name: str, sfd: int, flags: int) -> int:
        if not flags & os.O_DIRECTORY:
            # Reading must not touch the source's access times.
            try:
                return os.open(name, flags | os.O_NOATIME, dir_fd=sfd)
            except PermissionError:
                pass
        return os.open(name, flags, dir_fd=sfd)

    # -- the walk ---------------------------------------------------------------

    def copy_dir(self, sfd: int, dfd: int, rel: str) -> None:
        with os.scandir(sfd) as it:
            entries = [(e.name, e.stat(follow_symlinks=False)) for e in it]
        for name, st in entries:
            path = f"{rel}/{name}" if rel else name
            if path in self.exclude or (self.one_file_system and st.st_dev != self.dev):
                continue
            self.copy_entry(name, st, sfd, dfd, path)

    def make_room(self, name: str, dfd: int, is_dir: bool) -> bool:
        """In merge mode, clear the way for ``name``; True when a directory is there to reuse."""
        try:
            st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
        except FileNotFoundError:
            return False
        if stat.S_ISDIR(st.st_mode):
            if is_dir:
                return True
            _remove_dir(name, dfd)
        else:
            os.unlink(name, dir_fd=dfd)
        return False

    def copy_entry(self, name: str, st: os.stat_result, sfd: int, dfd: int, path: str) -> None:
        kind = stat.S_IFMT(st.st_mode)
        self.stats.entries += 1
        reuse = self.merge and self.make_room(name, dfd, kind == stat.S_IFDIR)
        if kind == stat.S_IFDIR:
            if not reuse:
                os.mkdir(name, 0o700, dir_fd=dfd)
            sub_s, loose = self.open_src(name, sfd, st, _DIR_FLAGS, keep_loose=True)
            try:
                sub_d = os.open(name, _DIR_FLAGS, dir_fd=dfd)
                try:
                    self.copy_dir(sub_s, sub_d, path)
                    self.finish(sub_d, st, None, sub_s, None, created_mode=None)
                finally:
                    os.close(sub_d)
            finally:
                os.close(sub_s)
                if loose:
                    self.restore(name, sfd, st)
            return
        key = (st.st_dev, st.st_ino)
        if st.st_nlink > 1 and key in self.links:
            os.link(self.links[key], name, src_dir_fd=self.dst_root, dst_dir_fd=dfd,
                    follow_symlinks=False)  # fmt: skip
            return
        if kind == stat.S_IFREG:
            self.copy_file(name, st, sfd, dfd)
        elif kind == stat.S_IFLNK:
            os.symlink(os.readlink(name, dir_fd=sfd), name, dir_fd=dfd)
            self.finish(name, st, dfd, name, sfd, created_mode=None)
        else:  # character or block device (whiteouts: 0/0), FIFO, socket
            os.mknod(name, kind | 0o600, st.st_rdev, dir_fd=dfd)
            self.finish(name, st, dfd, name, sfd, created_mode=0o600)
        if st.st_nlink > 1:
            self.links[key] = path

    def copy_file(self, name: str, st: os.stat_result, sfd: int, dfd: int) -> None:
        mode = stat.S_IMODE(st.st_mode)
        src, _ = self.open_src(name, sfd, st, _READ_FLAGS)
        try:
            # Made with its final mode when the umask keeps it (one call fewer).
            plain = not mode & 0o7000 and not mode & self.umask
            dst = os.open(name, _CREATE_FLAGS, mode if plain else 0o600, dir_fd=dfd)
            try:
                self.stats.bytes += _copy_data(src, dst, st)
                self.finish(dst, st, None, src, None, created_mode=mode if plain else 0o600)
            finally:
                os.close(dst)
        finally:
            os.close(src)


def _copy_data(src: int, dst: int, st: os.stat_result) -> int:
    """Copy a regular file's data (its holes kept as holes); the bytes copied."""
    size = st.st_size
    if size == 0:
        return 0
    if st.st_blocks * 512 >= size:
        return _copy_range(src, dst, 0, size)
    copied = offset = 0
    while offset < size:
        try:
            data = os.lseek(src, offset, os.SEEK_DATA)
        except OSError as exc:
            if exc.errno != errno.ENXIO:
                raise
            break  # only a hole remains
        hole = os.lseek(src, data, os.SEEK_HOLE)
        copied += _copy_range(src, dst, data, hole - data)
        offset = hole
    os.ftruncate(dst, size)
    return copied


def _copy_range(src: int, dst: int, offset: int, count: int) -> int:
    done = 0
    while done < count:
        try:
            n = os.copy_file_range(src, dst, min(count - done, _CHUNK), offset + done,
                                   offset + done)  # fmt: skip
        except OSError as exc:
            if exc.errno not in _NO_CFR:
                raise
            return done + _copy_by_hand(src, dst, offset + done, count - done)
        if n == 0:
            break  # the file is shorter than it was
        done += n
    return done


def _copy_by_hand(src: int, dst: int, offset: int, count: int) -> int:
    done = 0
    while done < count:
        chunk = os.pread(src, min(count - done, 1 << 20), offset + done)
        if not chunk:
            break
        view = memoryview(chunk)
        while view:
            written = os.pwrite(dst, view, offset + done)
            view = view[written:]
            done += written
    return done


def _remove_dir(name: str, dfd: int) -> None:
    fd = os.open(name, _DIR_FLAGS, dir_fd=dfd)
    try:
        with os.scandir(fd) as it:
            entries = [(e.name, e.is_dir(follow_symlinks=False)) for e in it]
        for child, is_dir in entries:
            if is_dir:
                _remove_dir(child, fd)
            else:
                os.unlink(child, dir_fd=fd)
    finally:
        os.close(fd)
    os.rmdir(name, dir_fd=dfd)


def copy_tree(
    src: Path | str,
    dst: Path | str,
    *,
    ids: Mapping[int, int] | None = None,
    one_file_system: bool = False,
    exclude: Collection[str] = (),
    merge: bool = False,
) -> CopyStats:
    """Copy the tree at ``src`` to ``dst`` (see the module docstring for what is kept).

    ``dst`` is created (its parent must exist) unless ``merge``: then it must
    exist, its directories are merged and its other entries replaced by the
    source's. ``ids`` remaps owners (host uid or gid → another, for both);
    ``one_file_system`` skips entries on another device than ``src`` (mount
    points, as seen through ``/proc/PID/root``); ``exclude`` names paths
    relative to ``src`` (``etc/hosts``) not to copy. ``src``'s own owner,
    mode, times and attributes go to ``dst``. Symbolic links are never
    followed, neither in ``src`` (its top must not be one) nor in ``dst``.
    """
    copier = _Copier(ids, one_file_system, exclude, merge)
    top = os.open(src, _DIR_FLAGS)
    try:
        st = os.fstat(top)
        copier.dev = st.st_dev
        if not merge:
            os.mkdir(dst, 0o700)
        out = os.open(dst, _DIR_FLAGS)
        copier.dst_root = out
        try:
            copier.copy_dir(top, out, "")
            copier.finish(out, st, None, top, None, created_mode=None)
        finally:
            os.close(out)
    finally:
        os.close(top)
    return copier.stats


def copy_entry(
    src_dir: int, dst_dir: int, name: str, *, ids: Mapping[int, int] | None = None
) -> CopyStats:
    """Copy the entry ``name`` of directory ``src_dir`` (an open fd) into ``dst_dir``,
    whatever it is (a directory with everything in it, a file, a link, a FIFO), kept
    as :func:`copy_tree` keeps it. Nothing is followed; ``dst_dir`` must not hold
    ``name`` yet."""
    copier = _Copier(ids, False, (), False)
    st = os.stat(name, dir_fd=src_dir, follow_symlinks=False)
    copier.dev = st.st_dev
    copier.dst_root = dst_dir
    copier.copy_entry(name, st, src_dir, dst_dir, name)
    return copier.stats
