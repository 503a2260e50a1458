"""Image roots: an image's root file system, exported once into a cache on disk.

The local sandbox runs a task in its image without a container engine at run
time: the image's root file system is exported once (a ``tar`` stream from
Docker, Podman or Buildah; see :mod:`agentkit.images._tools`) into a
cache directory keyed by the image's id, and every rollout mounts it read-only
as the lower layer of its own overlay.

Ownership: as root, the files' owners are shifted into the range of host ids
that image sandboxes map their uids 0..65535 to (:data:`IMAGE_ID_BASE`), so
root inside owns what root owned in the image, ``_apt`` what ``_apt`` owned,
and none of it is host root's. As an ordinary user, everything belongs to
that user (who is root inside). Device nodes are not exported (the sandbox
has its own ``/dev``); extended attributes (file capabilities) are dropped.

Exports are safe under concurrent rollouts and processes: one export per
image at a time (an ``flock`` per cache entry, and a lock per event loop),
into a temporary directory renamed into place when complete.

A sandbox running on a root holds that entry's lock shared (:func:`hold`)
and marks the entry used; :func:`prune_image_roots` removes entries whose
lock it can take exclusively (no sandbox on them), optionally only those
unused for a while (``agentkit sandbox prune --image-roots``).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import os
import re
import shutil
import stat
import tarfile
import uuid
import weakref
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import IO, Any

import attrs

from agentkit._errors import SandboxError

__all__ = [
    "HEALTH_TIMEOUT_SEC",
    "IMAGE_ID_BASE",
    "IMAGE_ID_COUNT",
    "HealthCheck",
    "ImageConfig",
    "ImageRoot",
    "RootWriter",
    "cached_root",
    "clean_name",
    "default_cache_dir",
    "extract_root",
    "hold",
    "image_root",
    "prune_image_roots",
]

#: Host id of uid 0 in image roots exported as root; uids 0..65535 inside are
#: ``IMAGE_ID_BASE`` + uid on the host, far from real accounts, from the ids of
#: host-userland sandboxes (``_hostid.BASE_ID`` ...) and from host root.
IMAGE_ID_BASE = 2_140_000_000
#: How many ids an image sandbox maps (uids and gids 0..65535).
IMAGE_ID_COUNT = 65536
#: The longest wait for an image's HEALTHCHECK to pass, in either sandbox.
HEALTH_TIMEOUT_SEC = 300.0
#: The cache entries' format (in their names): 2 keeps the image's HEALTHCHECK.
_FORMAT = 2
_NS = 1e9


@attrs.frozen(kw_only=True)
class HealthCheck:
    """An image's ``HEALTHCHECK`` (Docker's defaults where it leaves one out)."""

    #: The command as Docker stores it: ``CMD-SHELL`` and a shell line, or ``CMD``
    #: and an argv.
    test: tuple[str, ...]
    interval: float = 30.0
    timeout: float = 30.0
    start_period: float = 0.0
    start_interval: float = 5.0
    retries: int = 3

    @classmethod
    def from_engine(cls, config: dict[str, Any] | None) -> HealthCheck | None:
        """From ``Config.Healthcheck`` (durations in nanoseconds); None: no check."""
        test = tuple(str(a) for a in (config or {}).get("Test") or ())
        if not test or test[0] == "NONE" or len(test) < 2:
            return None
        assert config is not None

        def seconds(key: str, default: float) -> float:
            value = config.get(key) or 0
            return float(value) / _NS if value else default

        interval = seconds("Interval", 30.0)
        return cls(
            test=test,
            interval=interval,
            timeout=seconds("Timeout", 30.0),
            start_period=seconds("StartPeriod", 0.0),
            # Docker 25's default; engines before it checked every interval.
            start_interval=seconds("StartInterval", min(interval, 5.0)),
            retries=int(config.get("Retries") or 3),
        )

    def argv(self, shell: str) -> list[str]:
        """The command to run (a ``CMD-SHELL`` line through ``shell``)."""
        if self.test[0] == "CMD-SHELL":
            return [shell, "-c", self.test[1]]
        return list(self.test[1:])

    def to_json(self) -> dict[str, Any]:
        """The ``Config.Healthcheck`` shape :meth:`from_engine` reads."""
        return {
            "Test": list(self.test),
            "Interval": int(self.interval * _NS),
            "Timeout": int(self.timeout * _NS),
            "StartPeriod": int(self.start_period * _NS),
            "StartInterval": int(self.start_interval * _NS),
            "Retries": self.retries,
        }


@attrs.frozen(kw_only=True)
class ImageConfig:
    """What an image says about how to run it (its ``Config``)."""

    env: tuple[tuple[str, str], ...] = ()
    workdir: str | None = None
    user: str | None = None
    entrypoint: tuple[str, ...] = ()
    cmd: tuple[str, ...] = ()
    healthcheck: HealthCheck | None = None

    @classmethod
    def from_engine(cls, config: dict[str, Any] | None) -> ImageConfig:
        """From the ``Config`` of ``docker image inspect`` (Podman's and Buildah's alike)."""
        config = config or {}
        env = []
        for item in config.get("Env") or ():
            name, sep, value = str(item).partition("=")
            if sep and name:
                env.append((name, value))
        return cls(
            env=tuple(env),
            workdir=config.get("WorkingDir") or None,
            user=config.get("User") or None,
            entrypoint=tuple(str(a) for a in config.get("Entrypoint") or ()),
            cmd=tuple(str(a) for a in config.get("Cmd") or ()),
            healthcheck=HealthCheck.from_engine(config.get("Healthcheck")),
        )

    def to_json(self) -> dict[str, Any]:
        """The same ``Config`` shape :meth:`from_engine` reads (kept in ``image.json``)."""
        return {
            "Env": [f"{k}={v}" for k, v in self.env],
            "WorkingDir": self.workdir or "",
            "User": self.user or "",
            "Entrypoint": list(self.entrypoint),
            "Cmd": list(self.cmd),
            **({"Healthcheck": self.healthcheck.to_json()} if self.healthcheck else {}),
        }


@attrs.frozen(kw_only=True)
class ImageRoot:
    """An image's exported root file system in the cache, ready to mount.

    ``id_base`` is the host id of uid 0 in its files (:data:`IMAGE_ID_BASE`
    as root); None means every file is the exporting user's.
    """

    reference: str
    image_id: str
    rootfs: Path
    config: ImageConfig
    id_base: int | None
    tool: str

    @property
    def entry(self) -> Path:
        """The cache entry (``rootfs`` and ``image.json``)."""
        return self.rootfs.parent


def default_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/agentkit/image-roots`` (``~/.cache/...`` by default)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "agentkit" / "image-roots"


def _entry_name(image_id: str, id_base: int | None) -> str:
    algo, _, digest = image_id.partition(":")
    if not digest or not all(c in "0123456789abcdef" for c in digest):
        raise SandboxError(f"unexpected image id {image_id!r} (expected sha256:<hex>)")
    owner = f"ids{id_base}" if id_base is not None else f"uid{os.geteuid()}"
    return f"{algo}-{digest}-{owner}-v{_FORMAT}"


# -- extraction ---------------------------------------------------------------


def clean_name(name: str) -> str | None:
    """A member's path relative to the root, or None for the root itself."""
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if any(p == ".." for p in parts):
        raise SandboxError(f"the image's file list has a path going up: {name!r}")
    return "/".join(parts) or None


class RootWriter:
    """Writes a root file system from tar streams (one, or an image's layers in
    order), never outside ``dest``.

    A member below a symbolic link of the archive (which would be written
    wherever the link points) and a hard link to a symbolic link are refused.
    """

    def __init__(self, dest: Path, id_base: int | None) -> None:
        self.dest = dest
        self.id_base = id_base
        self.as_root = id_base is not None
        self.symlinks: set[str] = set()
        #: directories written, by path: their mode, owner and times are set last
        self.dirs: dict[str, tarfile.TarInfo] = {}

    def _check_parents(self, rel: str) -> None:
        parts = rel.split("/")
        for i in range(1, len(parts)):
            if "/".join(parts[:i]) in self.symlinks:
                raise SandboxError(
                    f"the image's file list has {rel!r} below a symbolic link; "
                    "refusing to export it"
                )

    def _own(self, path: str, member: tarfile.TarInfo) -> None:
        if self.id_base is None:
            return
        if not (0 <= member.uid < 65536 and 0 <= member.gid < 65536):
            raise SandboxError(
                f"{member.name!r} in the image belongs to uid {member.uid}/gid {member.gid}: "
                "image sandboxes map ids 0..65535 only"
            )
        os.chown(path, self.id_base + member.uid, self.id_base + member.gid, follow_symlinks=False)

    def _remove(self, path: str) -> None:
        if os.path.isdir(path) and not os.path.islink(path):
            _remove_tree(Path(path))
        elif os.path.lexists(path):
            os.unlink(path)
        rel = os.path.relpath(path, self.dest)
        below = rel + "/"
        self.symlinks = {s for s in self.symlinks if s != rel and not s.startswith(below)}
        for d in [d for d in self.dirs if d == rel or d.startswith(below)]:
            del self.dirs[d]

    def remove(self, rel: str) -> None:
        """Remove ``rel`` (a path relative to the root; a directory with all it holds),
        as a layer's whiteout does; nothing when it is not there."""
        self._check_parents(rel)
        self._remove(os.path.join(self.dest, rel))

    def add(self, tar: tarfile.TarFile, member: tarfile.TarInfo) -> None:
        """Write one member (directories get their mode and owner in :meth:`finish`)."""
        rel = clean_name(member.name)
        if rel is None:
            if member.isdir():
                self.dirs[""] = member
            return
        self._check_parents(rel)
        path = os.path.join(self.dest, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        if member.isdir():
            if not (os.path.isdir(path) and not os.path.islink(path)):
                self._remove(path)
                os.mkdir(path, 0o700)
            self.dirs[rel] = member
            self.symlinks.discard(rel)
            return
        self._remove(path)
        self.symlinks.discard(rel)
        if member.issym():
            os.symlink(member.linkname, path)
            self.symlinks.add(rel)
            self._own(path, member)
            with contextlib.suppress(OSError):
                os.utime(path, (member.mtime, member.mtime), follow_symlinks=False)
            return
        if member.islnk():
            target = clean_name(member.linkname)
            if target is None or target in self.symlinks:
                raise SandboxError(f"the image's hard link {member.name!r} points to a link")
            self._check_parents(target)
            os.link(os.path.join(self.dest, target), path, follow_symlinks=False)
            return
        if member.isfile():
            src = tar.extractfile(member)
            assert src is not None
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
            with os.fdopen(fd, "wb") as out:
                shutil.copyfileobj(src, out, 1 << 20)
        elif member.isfifo():
            os.mkfifo(path, 0o600)
        else:
            # Device nodes: the sandbox has its own /dev; nothing else is expected.
            return
        self._own(path, member)
        # After chown, which clears setuid/setgid bits.
        os.chmod(path, member.mode & 0o7777)
        os.utime(path, (member.mtime, member.mtime))

    def finish(self) -> None:
        """Give directories their owners, modes and times, deepest first."""
        # Directories last, deepest first: their modes may forbid writing into them.
        for rel, member in sorted(self.dirs.items(), key=lambda d: d[0].count("/"), reverse=True):
            path = os.path.join(self.dest, rel) if rel else str(self.dest)
            self._own(path, member)
            os.chmod(path, member.mode & 0o7777)
            os.utime(path, (member.mtime, member.mtime))


def extract_root(stream: IO[bytes], dest: Path, id_base: int | None) -> None:
    """Write the root file system in tar ``stream`` (read once, in order) into ``dest``."""
    dest.mkdir(mode=0o755)
    ex = RootWriter(dest, id_base)
    with tarfile.open(fileobj=stream, mode="r|*") as tar:
        for member in tar:
            ex.add(tar, member)
    ex.finish()


# -- the cache ----------------------------------------------------------------

#: Exporter(reference, dest, id_base): writes the image's root file system into ``dest``.
Exporter = Callable[[str, Path, "int | None"], Awaitable[None]]

_locks: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, asyncio.Lock]] = (
    weakref.WeakKeyDictionary()
)


def _loop_lock(key: str) -> asyncio.Lock:
    loop = asyncio.get_running_loop()
    return _locks.setdefault(loop, {}).setdefault(key, asyncio.Lock())


def _load(entry: Path) -> dict[str, Any] | None:
    try:
        with open(entry / "image.json") as f:
            data: dict[str, Any] = json.load(f)
    except (OSError, ValueError):
        return None
    return data if data.get("format") == _FORMAT else None


def cached_root(image_id: str, cache_dir: Path | None, id_base: int | None) -> ImageRoot | None:
    """The root of image ``image_id`` when it is in the cache (for ``id_base``), else None."""
    entry = (cache_dir or default_cache_dir()) / _entry_name(image_id, id_base)
    data = _load(entry)
    return None if data is None else _root_from(entry, data, id_base)


def _root_from(entry: Path, data: dict[str, Any], id_base: int | None) -> ImageRoot:
    return ImageRoot(
        reference=str(data["reference"]),
        image_id=str(data["image_id"]),
        rootfs=entry / "rootfs",
        config=ImageConfig.from_engine(data.get("config")),
        id_base=id_base,
        tool=str(data.get("tool", "")),
    )


def _prepare_cache(cache_dir: Path) -> None:
    try:
        cache_dir.mkdir(parents=True, exist_ok=True)
        # Exported files keep their modes (setuid ones too): other local users
        # must not reach them.
        if cache_dir.stat().st_mode & 0o077:
            os.chmod(cache_dir, 0o700)
    except OSError as exc:
        raise SandboxError(
            f"the image cache {cache_dir} cannot be used ({exc.strerror}): it must be a "
            "directory of this user's (choose another with -S image_cache=DIR)"
        ) from None


def _remove_tree(path: Path) -> None:
    def retry(func: Any, p: str, _exc: Any) -> None:
        parent = os.path.dirname(p)
        os.chmod(parent, os.stat(parent).st_mode | stat.S_IWUSR | stat.S_IXUSR)
        func(p)

    shutil.rmtree(path, onerror=retry)


async def image_root(
    *,
    reference: str,
    image_id: str,
    config: ImageConfig,
    tool: str,
    export: Exporter,
    cache_dir: Path | None = None,
    id_base: int | None = None,
) -> ImageRoot:
    """The exported root of image ``image_id``: from the cache, or exported now, once.

    Concurrent callers (rollouts of this process, or other processes) wait
    for one export. ``export`` writes the root file system into a fresh
    directory; it is renamed into the cache when complete, with an
    ``image.json`` holding the reference, id and config.
    """
    cache_dir = cache_dir or default_cache_dir()
    name = _entry_name(image_id, id_base)
    entry = cache_dir / name
    data = _load(entry)
    if data is not None:
        return _root_from(entry, data, id_base)
    async with _loop_lock(str(entry)):
        data = _load(entry)
        if data is None:
            await asyncio.to_thread(_prepare_cache, cache_dir)
            lock_fd = os.open(_lock_path(entry), os.O_RDWR | os.O_CREAT, 0o600)
            try:
                await asyncio.to_thread(fcntl.flock, lock_fd, fcntl.LOCK_EX)
                data = _load(entry)
                if data is None:
                    data = {
                        "format": _FORMAT,
                        "reference": reference,
                        "image_id": image_id,
                        "config": config.to_json(),
                        "tool": tool,
                    }
                    await _export_entry(cache_dir, name, entry, data, export, reference, id_base)
            finally:
                os.close(lock_fd)
    return _root_from(entry, data, id_base)


async def _export_entry(
    cache_dir: Path,
    name: str,
    entry: Path,
    data: dict[str, Any],
    export: Exporter,
    reference: str,
    id_base: int | None,
) -> None:
    # Holding the lock: leftovers of an export that was killed can go.
    for old in cache_dir.glob(f".tmp-{name}-*"):
        await asyncio.to_thread(_remove_tree, old)
    tmp = cache_dir / f".tmp-{name}-{uuid.uuid4().hex[:8]}"
    tmp.mkdir(mode=0o700)
    try:
        await export(reference, tmp / "rootfs", id_base)
        with open(tmp / "image.json", "w") as f:
            json.dump(data, f, indent=1)
        os.rename(tmp, entry)
    except BaseException:
        await asyncio.shield(asyncio.to_thread(_remove_tree, tmp))
        raise


# -- use and eviction -----------------------------------------------------------


#: A temporary directory of an export (or a removal) that did not finish: (entry name).
_LEFTOVER = re.compile(r"^\.tmp-(.+?)-(?:prune-)?[0-9a-f]{8}$")


def _lock_path(entry: Path) -> Path:
    return entry.parent / f"{entry.name}.lock"


def hold(root: ImageRoot) -> int | None:
    """Hold ``root``'s cache entry for a sandbox's life: a shared lock, kept until
    the returned descriptor is closed, and the entry marked as used now.

    None when the entry went away meanwhile (pruned): get the root again.
    """
    fd = os.open(_lock_path(root.entry), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)
        os.utime(root.entry / "image.json")
    except FileNotFoundError:
        os.close(fd)
        return None
    except BaseException:
        os.close(fd)
        raise
    return fd


@attrs.define
class PrunedRoots:
    """What :func:`prune_image_roots` removed, kept, and could not remove."""

    #: (entry name, image reference, bytes freed)
    removed: list[tuple[str, str, int]] = attrs.field(factory=list)
    #: (entry name, image reference) of roots a sandbox runs on now
    in_use: list[tuple[str, str]] = attrs.field(factory=list)
    errors: list[str] = attrs.field(factory=list)


def _size(path: Path) -> int:
    total = 0
    for dirpath, _, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(dirpath, name)).st_blocks * 512
    return total


def _describe(entry: Path, leftover: bool) -> str:
    """The image reference of a cache entry, for what prune prints."""
    if leftover:
        return "(an export that did not finish)"
    try:
        with open(entry / "image.json") as f:
            data = json.load(f)
    except (OSError, ValueError):
        return "(an export that did not finish)"
    reference = str(data.get("reference", "?"))
    return reference if data.get("format") == _FORMAT else f"{reference} (an older cache format)"


def prune_image_roots(
    cache_dir: Path | None = None, *, unused_for_sec: float = 0.0, now: float | None = None
) -> PrunedRoots:
    """Remove exported image roots no sandbox runs on, unused for ``unused_for_sec``.

    Roots of an older cache format and exports left half-done by a killed
    process go too. A removed root is exported again when a task needs it.
    """
    import time

    cache_dir = cache_dir or default_cache_dir()
    report = PrunedRoots()
    if not cache_dir.is_dir():
        return report
    now = time.time() if now is None else now
    for entry in sorted(cache_dir.iterdir()):
        if not entry.is_dir() or entry.is_symlink():
            continue
        name = entry.name
        leftover = _LEFTOVER.match(name)
        base = leftover.group(1) if leftover else name
        try:
            fd = os.open(_lock_path(cache_dir / base), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            report.errors.append(f"{name}: {exc.strerror}")
            continue
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                if not leftover:
                    held = _load(entry) or {}
                    report.in_use.append((name, str(held.get("reference", "?"))))
                continue
            data = None if leftover else _load(entry)
            reference = _describe(entry, leftover is not None)
            if data is not None:
                with contextlib.suppress(OSError):
                    if now - (entry / "image.json").stat().st_mtime < unused_for_sec:
                        continue
            size = _size(entry)
            # Renamed first: a sandbox starting now finds no half-removed root.
            doomed = entry
            if not leftover:
                doomed = cache_dir / f".tmp-{name}-prune-{uuid.uuid4().hex[:8]}"
                os.rename(entry, doomed)
        except OSError as exc:
            report.errors.append(f"{name}: {exc.strerror or exc}")
            continue
        finally:
            os.close(fd)
        try:
            _remove_tree(doomed)
        except OSError as exc:
            report.errors.append(f"{name}: {exc.strerror or exc}")
            continue
        report.removed.append((name, reference, size))
    return report
