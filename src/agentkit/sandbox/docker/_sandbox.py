"""The docker sandbox: a container per rollout, from the task's image.

The image comes from the task (:class:`~agentkit.TaskImage`, made by
:mod:`agentkit.images`: built once per context digest, or pulled once);
tasks without one run in ``default_image``. The container behaves as under
Harbor 0.24's docker environment: the image's ``ENTRYPOINT`` runs with the
command ``sh -c "sleep infinity"`` (so an entrypoint that starts a service
and ``exec "$@"`` leaves it running), its ``ENV``, ``WORKDIR`` and ``USER``
apply to every command, a ``HEALTHCHECK`` is waited for, ``/logs/agent``,
``/logs/verifier`` and ``/logs/artifacts`` are directories of the rollout on
the host. Unlike Harbor, the container is killed at close (no 10 s stop
grace) and images are never rebuilt per rollout.

See ``docs/sandboxes.md`` for the network rules, the model-endpoint relay,
resources and the security checks (``allow_host_root``).
"""

from __future__ import annotations

import asyncio
import os
import posixpath
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, ClassVar, Unpack

import anyio

from agentkit._errors import SandboxError, SandboxPathError
from agentkit._sandbox import ExecutionHints, TaskImage
from agentkit.images import (
    prepare_images,
)
from agentkit.sandbox._carry import Carried, deepest, distinct_paths, within
from agentkit.sandbox._fork import ForkStats, cannot_fork
from agentkit.sandbox._layercopy import copy_tree
from agentkit.sandbox._paths import open_dir, reset_dir, split_path
from agentkit.sandbox.docker._cgroup import container_pids
from agentkit.sandbox.docker._compose import prepare_compose
from agentkit.sandbox.docker._core import HOST_DIRS, DockerCore, _aiodocker
from agentkit.sandbox.docker._engine import (
    FORK_REPOSITORY,
    check_engine,
    prune_orphans_once,
)
from agentkit.sandbox.docker._files import unmap_owners
from agentkit.sandbox.docker._options import DockerKeywords, DockerOptions

__all__ = ["DockerSandbox"]

#: ``docker diff`` kinds of change.
_MODIFIED, _ADDED, _DELETED = 0, 1, 2


class DockerSandbox(DockerCore):
    """A container per rollout (see the module docstring and ``docs/sandboxes.md``).

    Its options are :class:`DockerOptions`' (``-S name=value`` on the command line).
    """

    name: ClassVar[str] = "docker"
    #: The Ray node label (value ``true``) of nodes that have a Docker engine: the Ray
    #: executor runs this sandbox's rollouts only there (docs/distributed.md).
    node_label: ClassVar[str] = "agentkit/docker"

    if TYPE_CHECKING:  # the constructor is BaseSandbox's; mypy reads the options' types

        def __init__(self, *, root: Path, **options: Unpack[DockerKeywords]) -> None: ...

    # -- run-level hooks (see agentkit.SandboxFactory) ------------------------

    @classmethod
    async def preflight(cls, **options: Any) -> str | None:
        """Check the engine once per run (host root refused unless allowed); prune leftovers."""
        warning = await check_engine(allow_host_root=DockerOptions(**options).allow_host_root)
        await prune_orphans_once()
        return warning

    @classmethod
    async def prepare(
        cls,
        hints: Sequence[ExecutionHints],
        *,
        log_dir: Path | None = None,
        on_progress: Any = None,
        **options: Any,
    ) -> list[Any]:
        """Build or pull every task's image before the rollouts (bounded, with progress)."""
        opts = DockerOptions(**options)
        max_builds = opts.max_builds
        images = [h.image or TaskImage(image=opts.default_image) for h in hints]
        plain = [i for i in images if i.compose_file is None]
        report = None if on_progress is None else (lambda status: on_progress(status.line()))
        results = await prepare_images(
            plain, max_parallel=max_builds, log_dir=log_dir, on_progress=report
        )
        done = dict(zip(plain, results, strict=True))
        out: list[Any] = []
        for image in images:
            if image.compose_file is None:
                out.append(done[image])
            else:
                out.append(await prepare_compose(image, log_dir=log_dir, max_builds=max_builds))
        return out

    # -- forking ----------------------------------------------------------------

    async def fork(
        self, *, root: Path | str | None = None, rollout_id: str | None = None
    ) -> DockerSandbox:
        """A new, started container whose files are this one's now (see ``ForkableSandbox``).

        The container is paused (the engine's cgroup freezer) while the engine
        commits it to an image (``agentkit/fork:<id>``) and its host log
        directories are copied; then a container of that image starts with the
        same spec (its entrypoint runs again; anonymous volumes, which a commit
        does not hold, start empty). The image is removed when the child
        closes. A compose project cannot fork.
        """
        return await self._fork(root, rollout_id)

    def _check_forkable(self, who: str) -> None:
        if self._container is None:
            raise cannot_fork(self.name, who, "it is closed")
        if self._compose is not None:
            raise cannot_fork(
                self.name,
                who,
                "it runs a compose project, whose sidecar services a commit would not "
                "carry; only a task with a single container can fork",
            )

    async def _copy_for_fork(self, child: DockerSandbox) -> None:
        await self._commit_to(child)

    def _fork_errors(self) -> tuple[type[BaseException], ...]:
        return (OSError, _aiodocker().DockerError)

    async def _commit_to(self, child: DockerSandbox) -> None:
        """Pause the container, commit it to the child's image, copy the host log
        directories; resume it (the cost in ``child.fork_stats``)."""
        container = self._container
        assert container is not None
        started = time.monotonic()
        # a container that stopped (its processes killed from inside) still has its files
        running = bool((await container.show())["State"].get("Running"))
        if running:
            await container.pause()
        try:
            tag = f"{FORK_REPOSITORY}:{uuid.uuid4().hex[:16]}"
            repository, _, name = tag.partition(":")
            await container.commit(repository=repository, tag=name, pause=False)
            # Removed by the child's close (even if it never starts).
            child._fork_image = tag
            copied = await asyncio.to_thread(copy_tree, self.root / "fs", child.root / "fs")
        finally:
            if running:
                await container.unpause()
        child.fork_stats = ForkStats(
            parent=self.rollout_id or self.container_name,
            paused_sec=time.monotonic() - started,
            entries=copied.entries,
            bytes=copied.bytes,
        )

    # -- grading: processes ended, files read and made from outside -------------

    def _host_parts(self, path: str) -> list[str]:
        """The components of ``path`` below ``<root>/fs``: one of :data:`HOST_DIRS` or inside."""
        parts = split_path(path)
        full = "/" + "/".join(parts)
        if not any(full == d or full.startswith(d + "/") for d in HOST_DIRS):
            raise SandboxPathError(
                f"{path!r} is inside the container, not in a directory on the host "
                f"({', '.join(HOST_DIRS)})"
            )
        return parts

    def open_dir(self, path: str) -> int:
        """A host fd of in-container directory ``path`` (one of :data:`HOST_DIRS` or below),
        reached without following any link (see ``LocalSandbox.open_dir``)."""
        return open_dir(self.root / "fs", self._host_parts(path))

    async def reset_dir(self, path: str, *, mode: int = 0o755) -> None:
        """Make ``path`` (one of :data:`HOST_DIRS` or below) a new, empty directory of the
        container's root, from the host: nothing is followed, whatever was there removed."""
        await self._ensure()
        parts = self._host_parts(path)
        owner = self._root_ids[0] if self._root_ids is not None else None
        await asyncio.to_thread(reset_dir, self.root / "fs", parts, owner=owner, mode=mode)
        if self._root_ids is not None and self._root_ids[1] != self._root_ids[0]:
            fd = open_dir(self.root / "fs", parts)
            try:
                os.fchown(fd, *self._root_ids)
            finally:
                os.close(fd)

    async def end_processes(self) -> int:
        """End every process in the container; then start it again on the same files.

        The container is killed (every process in it, its entrypoint's and
        whatever a command detached, under any uid) and started again: the
        image's ``ENTRYPOINT`` runs again, its ``HEALTHCHECK`` is waited for,
        and the relay to the model endpoint is made again. Its files (the
        container's layer, the host directories) are kept; its memory
        (``/dev/shm``, tmpfs mounts) is not. Commands running meanwhile end;
        new ones wait until it is done. Returns how many processes ended. A
        container that stopped by itself (every process killed from inside: its
        main process exits with its child) is started again the same way: its
        files are all there, and whether it had stopped yet when this was asked
        (the engine learns of it a moment later) changes nothing.
        """
        aiodocker = _aiodocker()
        who = self.rollout_id or self.container_name
        if self._state != "running" or self._container is None:
            raise SandboxError(f"sandbox {who}: cannot end its processes: it is {self._state}")
        async with self._lock, self._gate.closed():
            running = bool((await self._container.show())["State"].get("Running"))
            count = len(container_pids(self._pid)) if running else 0
            try:
                if running:
                    try:
                        await self._container.kill(signal="SIGKILL")
                    except aiodocker.DockerError as exc:
                        if exc.status != 409:  # 409: it stopped meanwhile
                            raise
                await self._container.wait()
                if self._relay is not None:
                    await self._relay.close()
                    self._relay = None
                await self._container.start()
            except aiodocker.DockerError as exc:
                raise SandboxError(
                    f"sandbox 'docker' ({who}): restarting the container failed: {exc.message}"
                ) from None
            await self._serve(await self._started())
        return count

    async def restart(self) -> None:
        """End everything in the container and start it again on its own files (see
        :meth:`end_processes`, which does exactly this on docker)."""
        await self.end_processes()

    async def carry_to(self, other: DockerSandbox, paths: Sequence[str]) -> Carried:
        """Copy ``paths`` of this container over the same paths of ``other``'s, through the
        engine's archive API (no tool of either container is used to read): what stood
        there in ``other`` is removed first (with ``other``'s own ``rm``: a fresh
        container's). This container is paused while its files are read (as a fork
        pauses it)."""
        if not isinstance(other, DockerSandbox) or other._container is None:
            raise SandboxError("sandbox 'docker' can carry files only to another running one")
        await self._ensure()
        if self._container is None:
            raise SandboxError(f"sandbox {self.rollout_id or self.root} is not running")
        async with self._lock, self._gate.closed():
            # a container that stopped (its processes killed from inside) still has
            # its files: they are read as they are
            running = bool((await self._container.show())["State"].get("Running"))
            if running:
                await self._container.pause()
            try:
                return await self._carry(other, paths)
            finally:
                if running:
                    await self._container.unpause()

    async def _carry(self, other: DockerSandbox, paths: Sequence[str]) -> Carried:
        out = Carried()
        changes: dict[str, int] = {}
        wanted = distinct_paths(paths)
        if other.image == self.image and self._fork_image is None:
            # the same image below both: only what this container's commands changed
            listed = await self._client._query_json(f"containers/{self.container_id}/changes")
            changes = {str(c["Path"]): int(c["Kind"]) for c in listed or () if c.get("Path")}
            # what it changed elsewhere, from the same listing (no second `docker diff`)
            out.changed = [p for p in deepest(changes) if not within(p, wanted)]
        for path in wanted:
            if not split_path(path):
                raise SandboxPathError("the container's root cannot be carried")
            if not changes:
                await self._carry_one(other, path, out)
                out.paths[path] = out.paths.get(path) or "copied"
                continue
            below = sorted(p for p in changes if within(p, [path]))
            gone = any(changes[a] == _DELETED for a in changes if within(path, [a]) and a != path)
            leaves = deepest(below)
            if gone or (path in changes and changes[path] != _MODIFIED) or len(leaves) > 64:
                await self._carry_one(other, path, out)  # replaced whole, or changed a lot
                out.paths[path] = out.paths.get(path) or "copied"
            elif not below:
                out.paths[path] = "unchanged"
            else:
                for leaf in leaves:
                    await self._carry_one(other, leaf, out)
                out.paths[path] = "changes copied"
        return out

    async def _carry_one(self, other: DockerSandbox, path: str, out: Carried) -> None:
        """Copy ``path`` of this container over ``other``'s (removed there when missing here)."""
        aiodocker = _aiodocker()
        assert other._container is not None
        parent = posixpath.dirname(path)
        with tempfile.TemporaryFile(prefix="agentkit-carry-") as spool:
            found = await _archive_to(self._client, self.container_id or "", path, spool)
            cleared = await other._run(
                ["/bin/sh", "-c", 'rm -rf -- "$0" && mkdir -p -- "$1"', path, parent]
            )
            if not cleared.ok:
                raise SandboxError(
                    f"sandbox 'docker': could not clear {path} in the verifier's container: "
                    f"{cleared.stderr.strip()[-300:]}"
                )
            if not found:
                out.paths.setdefault(path, "missing")
                return
            spool.seek(0)
            with tempfile.TemporaryFile(prefix="agentkit-carry-") as archive:
                # not abandoned on cancellation: the files stay open until it ends
                await anyio.to_thread.run_sync(unmap_owners, spool, archive, self._root_ids)
                out.bytes += archive.tell()
                out.entries += 1
                archive.seek(0)
                try:
                    async with other._gate.passing():
                        await other._container.put_archive(parent, _chunks(archive))
                except aiodocker.DockerError as exc:
                    raise SandboxError(
                        f"sandbox 'docker': could not carry {path}: {exc.message}"
                    ) from None

    async def changed_paths(self, *, exclude: Sequence[str] = (), limit: int = 50) -> list[str]:
        """In-container paths commands added, changed or deleted since the container was
        made (the engine's ``docker diff``), the deepest of each branch, sorted, at most
        ``limit``; subtrees in ``exclude`` skipped."""
        await self._ensure()
        changes = await self._client._query_json(f"containers/{self.container_id}/changes")
        leaves = deepest(str(c.get("Path")) for c in changes or () if c.get("Path"))
        return [p for p in leaves if not within(p, exclude)][:limit]


async def _chunks(f: IO[bytes]) -> AsyncIterator[bytes]:
    """``f``'s bytes, read a chunk at a time in a thread that is never abandoned (a file
    handed to aiohttp is read in its executor, which may still read once the request
    is over, after the file was closed)."""
    while chunk := await anyio.to_thread.run_sync(f.read, 1 << 20):
        yield chunk


async def _archive_to(client: Any, container_id: str, path: str, spool: IO[bytes]) -> bool:
    """Write the engine's tar archive of ``path`` in the container to ``spool`` as it comes
    (never held whole in memory); False when the path does not exist."""
    aiodocker = _aiodocker()
    try:
        # aiodocker's get_archive reads the whole archive into memory: stream it instead
        async with client._query(
            f"containers/{container_id}/archive", method="GET", params={"path": path}
        ) as response:
            async for chunk in response.content.iter_chunked(1 << 20):
                spool.write(chunk)
    except aiodocker.DockerError as exc:
        if exc.status == 404:
            return False
        raise SandboxError(f"sandbox 'docker': could not read {path}: {exc.message}") from None
    return True
