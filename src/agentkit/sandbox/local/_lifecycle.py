"""Starting the local sandbox: bubblewrap started, made safe, the holder up.

bubblewrap makes the namespaces and waits while the user namespace's maps
are written and user namespaces are forbidden inside; the holder then says
it is ready. On an image root the holder builds the sandbox from a stage
(``_stage``); on the host's userland bubblewrap mounts the host's ``/usr``
(``_bwrap``). Then the image's entrypoint starts and its ``HEALTHCHECK`` is
waited for, as a container's start does.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import socket
from pathlib import Path
from typing import NoReturn

import anyio

from agentkit._errors import SandboxError
from agentkit.images._imageroot import IMAGE_ID_COUNT, ImageRoot
from agentkit.sandbox._base import STANDARD_DIRS
from agentkit.sandbox._forward import (
    HOLDER_SCRIPT,
    Relay,
    receive_listener,
)
from agentkit.sandbox._layercopy import copy_tree
from agentkit.sandbox._paths import Mount, SandboxFS
from agentkit.sandbox._process import read_json_fd, spawn
from agentkit.sandbox._proctree import namespace_of
from agentkit.sandbox._reaper import OWNER_ENV, owner_token, reap_orphans_once, reaped
from agentkit.sandbox.local._bwrap import (
    LIFELINE,
    holder_argv,
)
from agentkit.sandbox.local._composeup import ComposeProject
from agentkit.sandbox.local._core import LocalCore
from agentkit.sandbox.local._etcfiles import data_fds
from agentkit.sandbox.local._hostid import (
    chown_tree,
    make_parents,
    write_id_maps,
)
from agentkit.sandbox.local._hosttools import TOOLS_DIR, host_tools
from agentkit.sandbox.local._image import (
    wait_healthy,
)
from agentkit.sandbox.local._namespaces import error_tail, run_as_namespace_root
from agentkit.sandbox.local._slirp import Slirp
from agentkit.sandbox.local._stage import STAGE, StagePlan, stage_argv

__all__ = ["LocalLifecycle"]

_START_TIMEOUT_SEC = 30.0


class LocalLifecycle(LocalCore):
    """How a local sandbox starts (see the module's docstring)."""

    #: A compose task's running services (None: not a compose task, or not started).
    _project: ComposeProject | None = None

    async def _start_backend(self) -> None:
        # Not cancellable: bubblewrap killed half-way through its start leaves a
        # process waiting forever to be released; a Ctrl-C waits for the start
        # (milliseconds) and then takes the sandbox down whole.
        if self.compose is not None:
            # A compose task: its services first (each shielded likewise), this
            # sandbox (the main service) among them.
            self._project = ComposeProject(self, type(self))
            try:
                await self._project.up(self._start_main)
            except BaseException:
                await self._stop_backend()
                raise
            return
        await self._start_main()

    async def _start_main(self) -> None:
        """Start this sandbox's own bubblewrap (shielded; see :meth:`_start_backend`)."""
        with anyio.CancelScope(shield=True):
            try:
                await self._start_bwrap()
            except BaseException:
                self._release_image_root()
                raise
            if self._parent_etc is not None:
                await self._take_parent_etc(self._parent_etc)

    async def _stop_backend(self) -> None:
        await super()._stop_backend()
        project, self._project = self._project, None
        if project is not None:
            await project.close()

    async def _start_bwrap(self) -> None:
        # Sandboxes an earlier orchestrator could not take down with it.
        if not reaped():
            await asyncio.to_thread(reap_orphans_once)
        # What commands create is the orchestrator's on the host (root's, as root):
        # a setuid file they plant must be out of other local users' reach.
        os.chmod(self.root, 0o700)
        if self.image is not None:
            if self._root_lock is None:
                await self._use_image_root()
        elif self.host_id is not None:
            # (A fork's child got its files with its own id already.)
            self._hand_over_files(self.host_id, chown=not self._fork_child)
        info_r, info_w = os.pipe()
        block_r, block_w = os.pipe()
        chan_host: socket.socket | None = None
        chan_box: socket.socket | None = None
        data_fds: list[int] = []
        try:
            if self._endpoint is not None:
                chan_host, chan_box = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
            if self.image_root is not None:
                argv = self._stage_argv(self.image_root, info_w, block_r, chan_box)
            else:
                argv, data_fds = self._holder_argv(info_w, block_r, chan_box)
            if self._joined is not None:
                # a compose service: bubblewrap starts in the rollout's network holder
                # (bwrap by its real path: the holder binds that, not PATH's links)
                argv = [*self._joined.holder.enter_argv(), os.path.realpath(argv[0]), *argv[1:]]
            # bubblewrap also holds the info pipe's read end: should this process die
            # before reading it, bubblewrap's write must not fail (SIGPIPE would end
            # its outer process and leave its child waiting forever to be released).
            pass_fds = [info_w, info_r, block_r, *data_fds]
            if chan_box is not None:
                pass_fds.append(chan_box.fileno())
            # stdin is the lifeline: the holder waits on this pipe, whose only write
            # end is ours; when this process dies, however abruptly, the holder reads
            # EOF and exits, and with it the whole sandbox.
            self._bwrap_proc, _, self._bwrap_transport = await spawn(
                argv,
                stdin=True,
                env={"PATH": "/usr/bin:/bin", OWNER_ENV: owner_token()},
                cwd=None,
                pass_fds=tuple(pass_fds),
            )
        finally:
            for fd in (info_w, block_r, *data_fds):
                os.close(fd)
            if chan_box is not None:
                chan_box.close()
        try:
            await self._await_ready(info_r, block_w)
            if self.image_root is not None:
                await self._image_ready(self.image_root)
            self._keepers = frozenset(_descendants(self._holder_pid))
            self._pidns = namespace_of(self._holder_pid) or 0
            if chan_host is not None and self._endpoint is not None:
                listener = await receive_listener(
                    chan_host, self._bwrap_proc, timeout=_START_TIMEOUT_SEC
                )
                self._relay = Relay(listener, self._endpoint)
                await self._relay.start()
        except BaseException:
            await self._stop_backend()
            raise
        finally:
            os.close(info_r)
            os.close(block_w)
            if chan_host is not None:
                chan_host.close()

    def _holder_argv(
        self, info_w: int, block_r: int, chan_box: socket.socket | None
    ) -> tuple[list[str], list[int]]:
        """bwrap's argv on the host userland, and the fds it reads /etc files from."""
        etc_files = data_fds(self._etc_files())
        cap_add: list[str] = []
        if chan_box is not None and self._endpoint is not None:
            holder = [
                self._python, "-I", "-S", "-c", HOLDER_SCRIPT,
                self._endpoint.bind_host, str(self._endpoint.port), str(chan_box.fileno()),
                LIFELINE,
            ]  # fmt: skip
            if self._endpoint.port < 1024:
                cap_add.append("CAP_NET_BIND_SERVICE")
        else:
            holder = ["/bin/sh", "-c", f"echo ready; {LIFELINE}"]
        argv = holder_argv(
            self._tools,
            fs_root=self.fs_root,
            network=self.host_network,
            ro_binds=self.ro_binds,
            info_fd=info_w,
            holder=holder,
            etc_files=etc_files,
            cap_add=cap_add,
            userns_block_fd=block_r,
            from_nobody=self.host_id is not None,
            chdir=self.workdir,
        )
        return argv, [fd for fd, _, _ in etc_files]

    def _stage_argv(
        self, image_root: ImageRoot, info_w: int, block_r: int, chan_box: socket.socket | None
    ) -> list[str]:
        """bwrap's argv on an image root: the stage the holder builds the sandbox from."""
        tools = host_tools("setpriv", "env")
        dirs = [(self.workdir, 0o755), ("/tmp", 0o1777), ("/root", 0o700)]
        dirs += [(d, 0o777 if d.startswith("/logs/") else 0o755) for d in STANDARD_DIRS]
        relay = None
        if chan_box is not None and self._endpoint is not None:
            relay = {
                "host": self._endpoint.bind_host,
                "port": self._endpoint.port,
                "fd": chan_box.fileno(),
            }
        joined = self._joined
        volumes = () if joined is None else joined.volumes
        plan = StagePlan(
            nested_ids=IMAGE_ID_COUNT if self.host_id is not None else 0,
            # a compose service's network is its holder's, which configured it
            private_net=not self.host_network and joined is None,
            workdir=self.workdir,
            binds=[
                (f"{STAGE}/tools{TOOLS_DIR}", TOOLS_DIR),
                *((f"{STAGE}/binds/{i}", path) for i, path in enumerate(self.ro_binds)),
            ],
            dirs=dirs,
            files=self._net_files(),
            relay=relay,
            volumes=[(f"{STAGE}/volumes/{i}", t, ro) for i, (_, t, ro) in enumerate(volumes)],
            tmpfs=() if joined is None else joined.tmpfs,
        )
        return stage_argv(
            self._tools,
            python=self._python,
            python_prefix=self._python_prefix,
            rootfs=image_root.rootfs,
            rollout_dir=self.root,
            share_net=self.host_network or joined is not None,
            host_resolv=self.host_network,
            host_files=tools.files,
            ro_binds=self.ro_binds,
            info_fd=info_w,
            userns_block_fd=block_r,
            plan=plan,
            volumes=[host for host, _, _ in volumes],
            hostname="sandbox" if joined is None else joined.hostname,
        )

    async def _image_ready(self, image_root: ImageRoot) -> None:
        """Once the holder is up on an image root: find it, and see the sandbox's files."""
        children = _children(self._holder_pid)
        if len(children) != 1:
            await self._fail_start(f"expected one holder process, found {children}")
        self._cwd_pid = children[0]
        if self.host_id is not None:
            keeper = _children(self._cwd_pid)
            if len(keeper) != 1:
                await self._fail_start("the nested user namespace has no process")
            # Commands enter this user namespace (it maps uids 0..65535 only).
            self._userns_fd = os.open(f"/proc/{keeper[0]}/ns/user", os.O_RDONLY | os.O_CLOEXEC)
        inside = Path(f"/proc/{self._cwd_pid}/root")
        self.fs = SandboxFS(
            mounts=[
                Mount("/", inside, True),
                *(Mount(p, inside / p.lstrip("/"), False) for p in [TOOLS_DIR, *self.ro_binds]),
            ],
            workdir=self.workdir,
            virtual=("/proc", "/dev", "/sys"),
            owner=self.host_id,
        )
        try:
            bash = self.fs.resolve("/bin/bash").host_path.exists()
        except SandboxError:
            bash = False
        self._shell = "/bin/bash" if bash else "/bin/sh"

    async def _after_start(self) -> None:
        await self._start_entrypoint()

    async def _start_entrypoint(self) -> None:
        """Start the image's ``ENTRYPOINT`` (when it has one and the option asks for it)
        and wait for its ``HEALTHCHECK``, as a container's start does."""
        root = self.image_root
        if root is None or not self.options.entrypoint:
            return
        if root.config.entrypoint:
            # As a container would start it, with Harbor's keep-alive command as its
            # arguments: a service the entrypoint starts keeps running for the rollout.
            await self.start(
                [*root.config.entrypoint, "sh", "-c", "sleep infinity"],
                cwd=root.config.workdir or "/",
            )
        if root.config.healthcheck is not None:
            # As the image's USER where the sandbox has that user.
            user = root.config.user if (root.config.user and self.host_id is not None) else None
            await wait_healthy(
                self, root.config.healthcheck, shell=self._shell or "/bin/sh", user=user
            )

    def _hand_over_files(self, host_id: int, *, chown: bool = True) -> None:
        """Give the rollout's files to the sandbox's host id (see ``_hostid``)."""
        make_parents(self.fs_root, self.ro_binds)
        if chown:
            chown_tree(self.fs_root, host_id)

    async def _fail_start(self, reason: str = "") -> NoReturn:
        proc = self._bwrap_proc
        assert proc is not None and proc.stderr is not None
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGKILL)
        err = await error_tail(proc.stderr)
        await proc.wait()
        raise SandboxError(
            f"bubblewrap could not start the sandbox for {self.rollout_id or self.root}: "
            f"{err or reason or 'no output'} (if user namespaces are restricted, as on Ubuntu "
            "24.04, allow them: sysctl kernel.apparmor_restrict_unprivileged_userns=0)"
        )

    async def _await_ready(self, info_r: int, block_w: int) -> None:
        """Wait for the holder, making the sandbox safe to use meanwhile.

        bubblewrap reports its child's pid (on ``info_r``) as soon as it has
        made the namespaces and waits (on ``block_w``) for the user
        namespace's maps, which are written here. Then, while it sets up the
        mounts, user namespaces are forbidden inside. The holder says
        ``ready`` once everything is mounted.
        """
        proc = self._bwrap_proc
        assert proc is not None and proc.stdout is not None and proc.stderr is not None
        try:
            info = await asyncio.wait_for(read_json_fd(info_r), _START_TIMEOUT_SEC)
            self._holder_pid = int(info["child-pid"])
        except (TimeoutError, OSError, ValueError, KeyError, TypeError) as exc:
            await self._fail_start(f"bubblewrap reported no sandbox pid ({exc!r})")
        # bubblewrap waits for us to write the user namespace's maps.
        try:
            if self._joined is not None:
                # started through nsenter into the holder: its pid was the holder
                # namespace's; the maps are written from inside the holder
                inner, self._holder_pid = self._holder_pid, _joined_pid(proc.pid)
                await self._joined.holder.write_maps(inner)
            elif self.image is not None:
                write_id_maps(self._holder_pid, self.host_id, count=IMAGE_ID_COUNT)
            else:
                write_id_maps(self._holder_pid, self.host_id)
            os.write(block_w, b"1")
        except (OSError, SandboxError) as exc:
            await self._fail_start(f"could not map its user namespace: {exc}")
        # On an image root the holder forbids them itself.
        forbid = asyncio.ensure_future(
            self._forbid_user_namespaces() if self.image is None else asyncio.sleep(0)
        )
        try:
            try:
                line = await asyncio.wait_for(proc.stdout.readline(), _START_TIMEOUT_SEC)
            except TimeoutError:
                line = b""
            if line.strip() != b"ready":
                await self._fail_start()
            try:
                await forbid
            except SandboxError as exc:
                await self._fail_start(str(exc))
            if self._slirp_program is not None:
                # Only now: attached while bubblewrap still configures the
                # namespace's loopback, its netlink requests race bubblewrap's.
                # (Its failure is its own error; the caller takes the sandbox down.)
                self._slirp = await Slirp.start(self._slirp_program, self._holder_pid)
        finally:
            if not forbid.done():
                forbid.cancel()
                with contextlib.suppress(BaseException):
                    await forbid
        if self.host_id is not None and self.image is None:
            # /etc is a tmpfs bubblewrap filled as host root: hand it to the sandbox's id.
            root = f"/proc/{self._holder_pid}/root"
            for path in ["/etc", *(dest for dest, _, _ in self._etc_files())]:
                os.chown(root + path, self.host_id, self.host_id, follow_symlinks=False)

    async def _forbid_user_namespaces(self) -> None:
        """Set ``user.max_user_namespaces`` to 0 in the sandbox's user namespace.

        Run as soon as its ids are mapped, while bubblewrap sets up: a
        process entering the namespace (with its capabilities there, nowhere
        else) writes the limit, which applies to the namespace and everything
        inside it. (Bubblewrap's ``--disable-userns`` does the same, but
        cannot be combined with id maps the caller writes.) In the sandbox's
        own network namespace it also lets commands listen on ports below
        1024 and ping, as Docker does in a container's.
        """
        script = "echo 0 > /proc/sys/user/max_user_namespaces"
        if not self.host_network:
            script += (
                " && echo 0 > /proc/sys/net/ipv4/ip_unprivileged_port_start"
                " && echo '0 0' > /proc/sys/net/ipv4/ping_group_range"
            )
        # As root, become the namespace's root (the sandbox's own id); else our own uid
        # already is.
        await run_as_namespace_root(
            self._tools.nsenter,
            self._holder_pid,
            () if self.host_network else ("-n",),
            script,
            host_root=self.host_id is not None,
            what="forbid user namespaces inside",
        )

    async def _take_parent_etc(self, etc: Path) -> None:
        """A fork's child on the host's userland: put the parent's /etc over its own."""

        def copy() -> None:
            try:
                copy_tree(etc, f"/proc/{self._holder_pid}/root/etc", merge=True)
            finally:
                shutil.rmtree(etc, ignore_errors=True)

        await asyncio.to_thread(copy)
        self._parent_etc = None


def _joined_pid(nsenter_pid: int) -> int:
    """The host pid of the pid namespace's init of a bubblewrap that ``nsenter`` started
    (nsenter forked it into the holder's pid namespace; its child is the init)."""
    outer = _children(nsenter_pid)
    inits = _children(outer[0]) if len(outer) == 1 else []
    if len(inits) != 1:
        raise SandboxError(f"expected one bubblewrap under nsenter, found {outer} / {inits}")
    return inits[0]


def _descendants(pid: int) -> list[int]:
    """``pid`` and every process below it (host pids), parents first."""
    out = [pid]
    for p in out:
        out.extend(_children(p))
    return out


def _children(pid: int) -> list[int]:
    """Host pids of ``pid``'s children."""
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(p) for p in f.read().split()]
    except OSError:
        return []
