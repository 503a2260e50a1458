"""The local sandbox: bubblewrap namespaces around a per-rollout root.

:class:`LocalSandbox` is what users and the runner see; it adds to its start
(``_lifecycle``) and its state and commands (``_core``) the run-level
``prepare`` of images, forks (the parent paused while its writable files are
copied, ``_freeze`` and ``_layercopy``) and what grading asks of it (every
process ended, a restart, files carried, what commands changed). The task
images it runs on are made and held in ``_image``, the files it generates in
``/etc`` in ``_etcfiles``. See ``docs/sandboxes.md`` for the layout, the
network and model-endpoint design, the resource limits and what survives
between commands.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Unpack

import anyio

from agentkit._errors import SandboxDiedError, SandboxError
from agentkit._sandbox import ExecutionHints
from agentkit.sandbox._base import BaseSandbox, _rmtree
from agentkit.sandbox._carry import (
    Carried,
    carry,
    carry_layer,
    distinct_paths,
    layer_changes,
    within,
)
from agentkit.sandbox._fork import ForkStats, cannot_fork, fork_id
from agentkit.sandbox._layercopy import copy_tree
from agentkit.sandbox._paths import remove_entry
from agentkit.sandbox._proctree import alive, kill_namespace
from agentkit.sandbox.local._bwrap import (
    host_symlinks,
)
from agentkit.sandbox.local._core import NET_ETC_FILES
from agentkit.sandbox.local._freeze import Resumer, pause
from agentkit.sandbox.local._image import (
    prepare_images,
)
from agentkit.sandbox.local._lifecycle import LocalLifecycle
from agentkit.sandbox.local._options import LocalKeywords, LocalOptions

__all__ = ["LocalSandbox"]

#: The longest stopping every process inside at once may take (a host command).
STOP_ALL_TIMEOUT_SEC = 10.0


class LocalSandbox(LocalLifecycle):
    """A bubblewrap sandbox: the task's image root (or the host's ``/usr``) read-only,
    the rollout's own writable layer above it.

    Its options are :class:`LocalOptions`' (``-S name=value`` on the command line).

    The sandbox's uid 0 is never the host's root: when agentkit runs as root,
    every sandbox gets a host uid of its own (``host_id``; see
    ``agentkit.sandbox.local._hostid``), and image sandboxes a range of them.
    """

    name: ClassVar[str] = "local"
    positive_options: ClassVar[tuple[str, ...]] = (
        "max_output_mb",
        "max_processes",
        "max_memory_mb",
        "max_file_size_mb",
        "max_cpu_seconds",
        "max_open_files",
    )
    #: The Ray node label (value ``true``) of nodes that have bubblewrap: the Ray
    #: executor runs this sandbox's rollouts only there (docs/distributed.md).
    node_label: ClassVar[str] = "agentkit/bwrap"

    if TYPE_CHECKING:  # the constructor is BaseSandbox's; mypy reads the options' types

        def __init__(self, *, root: Path, **options: Unpack[LocalKeywords]) -> None: ...

    # -- run-level hook (see agentkit.SandboxFactory) --------------------------

    @classmethod
    async def prepare(
        cls,
        hints: Sequence[ExecutionHints],
        *,
        log_dir: Path | None = None,
        on_progress: Callable[[str], None] | None = None,
        **options: Any,
    ) -> list[BaseException | None]:
        """Before a run: build or pull every task's image and export its root, once each.

        At most ``max_builds`` (:class:`LocalOptions`) at a time, with a progress
        line. One entry per hints: None when ready (or no image), else the error
        every rollout of that task then fails with (what to install when no tool
        can make images; a failed build with its log). See ``_image``.
        """
        opts = LocalOptions(**options)
        if opts.image == "host":
            return [None] * len(hints)
        return await prepare_images(
            hints,
            log_dir=log_dir,
            on_progress=on_progress,
            image_tool=opts.image_tool,
            image_cache=opts.image_cache,
            max_builds=opts.max_builds,
        )

    # -- ending every process (before grading) ---------------------------------

    async def end_processes(self) -> int:
        """End every process running in the sandbox; then start the image's entrypoint again.

        Every process in the sandbox's pid namespace ends, whatever it did to
        leave its command (a double fork, ``setsid``, ``nohup``, another uid
        inside, a stop signal, forking and exiting over and over): all of them are
        stopped at once from inside the namespace (``kill -STOP -1``), then found
        by their namespace (stopped until no new one appears), killed, and waited
        for. Only the sandbox's
        own keepers (bubblewrap's init and the holder, found at its start,
        before any command) are left. Commands of the orchestrator running
        meanwhile end too (their results say so); new ones wait until it is
        done. The files are untouched. The image's ``ENTRYPOINT`` (its
        services) ends with the rest and is then started again as at the
        sandbox's start, its ``HEALTHCHECK`` waited for: what runs afterwards
        is the image's, never what a command left. Returns how many processes
        were ended. Raises :class:`SandboxDiedError` when the sandbox no
        longer runs (its keepers were killed), and :class:`SandboxError`
        when a process did not end (stuck in an uninterruptible wait).
        """
        who = self._who()
        if self._state != "running":
            raise SandboxError(f"sandbox {who}: cannot end its processes: it is {self._state}")
        async with self._lock, self._gate.closed():
            self._check_alive()
            # The orchestrator's nsenter of each running command ends too (it would
            # stop itself when its command is stopped, as a shell's job does).
            wrappers = [p.pid for p in self._procs]
            # Should this process die between the stop and the kill, what was stopped
            # is resumed (the keepers, so the holder's lifeline ends everything inside;
            # the wrappers, which then end with their commands), not left stopped.
            resumer = await asyncio.to_thread(Resumer)
            try:
                for pid in (*self._keepers, *wrappers):
                    resumer.tell(pid)
                await asyncio.to_thread(self._stop_all_inside)
                killed = await asyncio.to_thread(
                    kill_namespace, self._holder_pid, self._keepers, wrappers
                )
            finally:
                await asyncio.to_thread(resumer.done)
            left = await asyncio.to_thread(alive, killed)
            self._check_alive()
        if left:
            raise SandboxError(
                f"sandbox {who}: {len(left)} process(es) did not end when killed "
                f"(pids {', '.join(map(str, sorted(left)[:5]))}; an uninterruptible wait?)"
            )
        await self._start_entrypoint()
        return len(killed.difference(wrappers))

    def _stop_all_inside(self) -> None:
        """Stop every process of the sandbox's pid namespace at once: the host's ``kill
        -STOP -1`` run in it (its user and pid namespaces only, so the agent's files play
        no part), which the kernel delivers to all of them with no fork getting past it,
        as one can past a scan of ``/proc`` (a process that forks and exits over and
        over is never at the pid the scan saw). The sandbox's own keepers are then
        continued; :func:`kill_namespace` finds the rest, all stopped, and kills them.
        Where this cannot run (no ``kill`` on the host, nsenter refused), the scan
        alone stops them, as before."""
        kill = shutil.which("kill")
        if kill is None:
            return
        argv = [self._tools.nsenter, "-t", str(self._holder_pid), "-U", "-p"]
        if self.host_id is None:
            argv.append("--preserve-credentials")
        try:
            subprocess.run(
                [*argv, "--", kill, "-STOP", "-1"],
                stdin=subprocess.DEVNULL,
                capture_output=True,
                timeout=STOP_ALL_TIMEOUT_SEC,
                check=False,
            )
        finally:
            _continue(self._keepers)

    async def restart(self) -> None:
        """End everything in the sandbox, its namespaces included, and start it again on
        its own files: what a fork's child would be, without the copy.

        Bubblewrap's init is killed, so the kernel ends every process inside, the
        sandbox's own keepers too; the files stay (on an image root its overlay
        layer, with a new overlayfs work directory; on the host's userland its root
        directory and its in-memory ``/etc``, copied aside and back, but the network
        files, which the sandbox writes again). Then it starts as a fork's child does:
        new namespaces, network and relay, the image's entrypoint; ``hints.paths`` are
        not copied in again. Commands and uploads given meanwhile wait. A sandbox whose
        processes were all killed from inside starts again too (on the host's
        userland with a new ``/etc``: the old one went with it).
        """
        who = self._who()
        if self._state != "running":
            raise SandboxError(f"sandbox {who}: cannot restart: it is {self._state}")
        async with self._lock, self._gate.closed():
            etc: Path | None = None
            if self.image is None:
                try:
                    self._check_alive()
                except SandboxDiedError:
                    pass  # its /etc went with it
                else:
                    etc = self.root / "etc.restart"
                    shutil.rmtree(etc, ignore_errors=True)
                    await asyncio.to_thread(
                        copy_tree,
                        f"/proc/{self._holder_pid}/root/etc",
                        etc,
                        one_file_system=True,
                        exclude=NET_ETC_FILES,
                    )
            procs = list(self._procs)
            self._procs.clear()
            await self._stop_backend()
            for proc in procs:
                await proc.wait()  # everything inside is gone: read their output to the end
            self._parent_image_root = self.image_root
            self._parent_etc = etc
            was_child, self._fork_child = self._fork_child, True
            try:
                if self.image is not None:
                    await asyncio.to_thread(_rmtree, self.root / "work")
                else:
                    # bubblewrap makes its links into /usr (/bin...) in the root again, and
                    # refuses to when anything stands there (a command may have put it)
                    await asyncio.to_thread(self._clear_host_links)
                self._make_dirs()
                await self._start_backend()
            except BaseException:
                self._state = "closed"
                raise
            finally:
                self._fork_child = was_child
        await self._start_entrypoint()

    def _clear_host_links(self) -> None:
        fd = os.open(self.fs_root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            for link in host_symlinks():
                with contextlib.suppress(FileNotFoundError):
                    remove_entry(link.lstrip("/"), fd)
        finally:
            os.close(fd)

    # -- a fresh sibling, and what commands changed ----------------------------

    def _fresh_child(self, child: LocalSandbox) -> None:
        # the same image root, held again rather than looked up
        child._parent_image_root = self.image_root

    def _change_layer(self) -> tuple[Path, tuple[str, ...]]:
        if self.image is not None:
            # the overlay's upper layer; the files the holder writes at every start
            own = tuple(f"/etc/{name}" for name in NET_ETC_FILES)
            return self.fs_root, (*own, "/etc/apt/apt.conf.d/00agentkit-one-uid")
        # the links into /usr bubblewrap makes in the root
        return self.fs_root, tuple(host_symlinks())

    async def carry_to(self, other: BaseSandbox, paths: Sequence[str]) -> Carried:
        """Copy ``paths`` of this sandbox's files over the same paths of ``other``, from the
        host (see :meth:`HostFSSandbox.carry_to`); this sandbox's processes are paused while
        its files are copied (as a fork pauses them), so the copy is one moment's files.
        On an image root, a sandbox whose own processes were killed raises
        :class:`SandboxDiedError` (its files are seen only through its running overlay);
        on the host's userland its files are copied as they are."""
        if type(other) is not type(self):
            raise SandboxError("sandbox 'local' can carry files only to another 'local' sandbox")
        assert isinstance(other, LocalSandbox)
        await other._ensure()
        ids = None
        if self.fs.owner is not None and other.fs.owner not in (None, self.fs.owner):
            ids = {self.fs.owner: other.fs.owner}
        async with self._lock, self._gate.closed(), other._gate.passing():
            if self.image is not None:
                self._check_alive()
            roots = [self._holder_pid, *(p.pid for p in self._procs)]

            # the same image below both: only what this sandbox's commands changed
            same_image = self.image is not None and other.image_root == self.image_root
            changes = self.fs_root if same_image else None

            def copy() -> Carried:
                paused = pause(roots)
                try:
                    return carry(self.fs, other.fs, paths, ids=ids, changes=changes)
                finally:
                    paused.resume()

            return await anyio.to_thread.run_sync(copy)

    async def fresh_carrying(
        self, paths: Sequence[str], *, root: Path | str | None = None
    ) -> tuple[LocalSandbox, Carried]:
        """A fresh sandbox of this one's task given ``paths`` of this sandbox's files: what
        :meth:`fresh` then :meth:`carry_to` make, and what was carried.

        On an image root, when every path is a top-level directory of the root
        (``/app``) and none holds, or is inside, one of ``hints.paths`` (copied in
        as the new sandbox starts), this sandbox's upper layer under those paths is
        copied into the new sandbox's before it starts (this sandbox's processes
        paused meanwhile, as :meth:`carry_to` pauses them): the same files, without
        creating each one through a running overlay (which costs about a
        millisecond a file). Otherwise the two calls. The new sandbox is closed and
        removed when anything fails; otherwise the caller closes it.
        """
        wanted = distinct_paths(paths)
        if not self._carries_by_layer(wanted):
            child = await self.fresh(root=root)
            try:
                carried = await self.carry_to(child, wanted)
            except BaseException:
                await child.close(remove=True)
                raise
            return child, carried
        child = self._sibling(root, f"{self.rollout_id or 'sandbox'}.fresh")
        self._fresh_child(child)
        try:
            child._make_layer(child.fs_root)
            ids = None
            if self.host_id is not None and child.host_id not in (None, self.host_id):
                ids = {self.host_id: child.host_id}
            names = [path.lstrip("/") for path in wanted]
            async with self._lock, self._gate.closed():
                self._check_alive()
                roots = [self._holder_pid, *(p.pid for p in self._procs)]

                def copy() -> Carried:
                    paused = pause(roots)
                    try:
                        return carry_layer(self.fs_root, child.fs_root, names, ids=ids)
                    finally:
                        paused.resume()

                carried = await anyio.to_thread.run_sync(copy)
            await child.setup()
        except BaseException:
            await child.close(remove=True)
            raise
        return child, carried

    def _carries_by_layer(self, paths: Sequence[str]) -> bool:
        """True when :meth:`fresh_carrying` can copy ``paths`` (distinct) layer to layer."""
        if self.image is None or self.image_root is None or self._state != "running":
            return False
        for path in paths:
            mount, parts = self.fs.mount_parts(path)
            if mount.target != "/" or len(parts) != 1:
                return False
        hinted = list(self.hints.paths)
        return not any(within(h, paths) for h in hinted) and not any(
            within(p, hinted) for p in paths
        )

    async def changed_paths(self, *, exclude: Sequence[str] = (), limit: int = 50) -> list[str]:
        """In-sandbox paths commands added, changed or deleted since the sandbox started
        (see :meth:`HostFSSandbox.changed_paths`); on the host's userland its in-memory
        ``/etc`` too (but the files the sandbox writes there itself)."""
        paths = await super().changed_paths(exclude=exclude, limit=limit)
        if self.image is not None or not self._holder_pid or len(paths) >= limit:
            return paths
        own = [path for path, _, _ in self._etc_files()]
        etc = await asyncio.to_thread(
            layer_changes,
            Path(f"/proc/{self._holder_pid}/root/etc"),
            prefix="/etc",
            exclude=[*own, *exclude],
            limit=limit - len(paths),
            one_file_system=True,
        )
        return sorted([*paths, *etc])

    # -- forking ----------------------------------------------------------------

    async def fork(
        self, *, root: Path | str | None = None, rollout_id: str | None = None
    ) -> LocalSandbox:
        """A new, started sandbox whose files are this one's now (see ``ForkableSandbox``).

        The parent's processes are paused (``SIGSTOP``, parents first; see
        ``_freeze``) only while its writable files are copied (``_layercopy``):
        on an image root the rollout's upper layer, over the same shared image
        root; on the host's userland its root directory and its in-memory
        ``/etc`` (but the network files, which each sandbox writes for itself).
        Owners are remapped to the child's own host id where it has one. Then
        the child starts as a fresh sandbox does (its own namespaces, network,
        relay; the image's entrypoint), without copying ``hints.paths`` in
        again. Forks of one parent copy one at a time; their children start
        side by side. Commands and uploads given meanwhile wait for the copy. A
        sandbox whose own processes were killed raises :class:`SandboxDiedError`.
        """
        return await self._fork(root, rollout_id)

    def _check_forkable(self, who: str) -> None:
        if self.compose is not None:
            raise cannot_fork(
                self.name,
                who,
                "it runs a compose task, whose other services would need forking too "
                "(not supported yet; start a fresh sandbox of the task instead)",
            )
        self._check_alive()

    async def _copy_for_fork(self, child: LocalSandbox) -> None:
        # Everything the copy pauses: the namespace's init (and all inside), and the
        # wrappers of running commands (nsenter).
        roots = [self._holder_pid, *(p.pid for p in self._procs)]
        await asyncio.to_thread(self._copy_to, child, roots)

    async def fork_many(
        self, n: int, *, rollout_ids: Sequence[str] | None = None
    ) -> list[LocalSandbox]:
        """``n`` forks from one pause: cheaper than ``n`` calls of :meth:`fork`.

        The parent is paused once and its writable files copied once, into
        the first child's root; the other children's files are copied from
        that copy while the parent runs again (so the parent's pause is that
        of a single fork); then all ``n`` start side by side. Each child is
        as :meth:`fork` makes it (its own root beside the parent's, removed
        at close; its own host id, network, entrypoint); ``rollout_ids``
        names them (default ``.forkN`` suffixes). Every child's
        ``fork_stats.paused_sec`` is the one shared pause. On any failure
        every child made so far is closed and removed, and the parent left
        running as it was.
        """
        who = self._who()
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise cannot_fork(self.name, who, f"n must be a positive integer, got {n!r}")
        if rollout_ids is not None and len(rollout_ids) != n:
            raise cannot_fork(
                self.name, who, f"{len(rollout_ids)} rollout ids given for {n} children"
            )
        if self._state != "running":
            state = "not started yet" if self._state == "new" else "closed"
            raise cannot_fork(self.name, who, f"it is {state}")
        self._check_alive()
        ids = list(rollout_ids or [fork_id(self.rollout_id, next(self._forks)) for _ in range(n)])
        children: list[LocalSandbox] = []
        try:
            for rid in ids:
                children.append(self._fork_child_of(None, rid))
            first = children[0]
            async with self._lock, self._gate.closed():
                if self._state != "running":
                    raise cannot_fork(self.name, who, "it was closed as the fork began")
                await self._copy_for_fork(first)
            # the parent runs again: the others are copies of the first one's copy
            await asyncio.to_thread(_copy_siblings, first, children[1:])
            started = await asyncio.gather(
                *(child.setup() for child in children), return_exceptions=True
            )
            failed = next((r for r in started if isinstance(r, BaseException)), None)
            if failed is not None:
                raise failed
        except BaseException as exc:
            await self._undo_fork(children, exc, who)
            raise
        return children

    def _copy_to(self, child: LocalSandbox, roots: list[int]) -> None:
        """Pause this sandbox, copy its writable files to ``child``'s root, resume it
        (the cost in ``child.fork_stats``)."""
        ids = None
        if self.host_id is not None and child.host_id not in (None, self.host_id):
            ids = {self.host_id: child.host_id}
        # On the host's userland bubblewrap made the links into /usr (/bin...) in
        # the root: it makes them again in the child's, and refuses to find them.
        links = () if self.image is not None else [p.lstrip("/") for p in host_symlinks()]
        started = time.monotonic()
        paused = pause(roots)
        try:
            copied = copy_tree(self.fs_root, child.fs_root, ids=ids, exclude=links)
            if self.image is None:
                # /etc is in the parent's memory (a tmpfs): kept aside until the
                # child's own is up. Mount points in it (the host's pieces) stay.
                etc = child.root / "etc"
                copied += copy_tree(
                    f"/proc/{self._holder_pid}/root/etc",
                    etc,
                    ids=ids,
                    one_file_system=True,
                    exclude=NET_ETC_FILES,
                )
                child._parent_etc = etc
        finally:
            paused.resume()
        child.fork_stats = ForkStats(
            parent=self.rollout_id or str(self.root),
            paused_sec=time.monotonic() - started,
            entries=copied.entries,
            bytes=copied.bytes,
        )


def _copy_siblings(first: LocalSandbox, others: Sequence[LocalSandbox]) -> None:
    """Give each of ``others`` (not started) a copy of ``first``'s files (not started either)."""
    assert first.fork_stats is not None
    for child in others:
        ids = None
        if first.host_id is not None and child.host_id not in (None, first.host_id):
            ids = {first.host_id: child.host_id}
        copied = copy_tree(first.fs_root, child.fs_root, ids=ids)
        if first._parent_etc is not None:
            etc = child.root / "etc"
            copied += copy_tree(first._parent_etc, etc, ids=ids)
            child._parent_etc = etc
        child.fork_stats = ForkStats(
            parent=first.fork_stats.parent,
            paused_sec=first.fork_stats.paused_sec,
            entries=copied.entries,
            bytes=copied.bytes,
        )


def _continue(pids: Iterable[int]) -> None:
    """``SIGCONT`` each of ``pids`` (the sandbox's keepers, after the stop of all inside)."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)
