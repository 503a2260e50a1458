"""The local sandbox: bubblewrap namespaces around a per-rollout root.

This module is the sandbox's lifecycle (bubblewrap started, made safe, its
commands entered, taken down); the task images it runs on are made and held
in ``_image``, and the files it generates in ``/etc`` in ``_etcfiles``.
See ``docs/sandboxes.md`` for the layout, the network and model-endpoint
design, the resource limits and what survives between commands.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import socket
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, ClassVar, NoReturn

import anyio

from agentkit._sandbox import ExecutionHints
from agentkit.sandbox._base import STANDARD_DIRS, BaseSandbox, HostFSSandbox, _rmtree
from agentkit.sandbox._carry import Carried, carry
from agentkit.sandbox._changes import layer_changes
from agentkit.sandbox._errors import SandboxDiedError, SandboxError
from agentkit.sandbox._fork import ForkStats, cannot_fork, fork_id
from agentkit.sandbox._forward import (
    HOLDER_SCRIPT,
    Endpoint,
    Relay,
    loopback_endpoint,
    parse_endpoint,
    python_for_holder,
    recv_fd,
)
from agentkit.sandbox._freshdir import remove_entry
from agentkit.sandbox._imageroot import IMAGE_ID_BASE, IMAGE_ID_COUNT, ImageRoot, hold
from agentkit.sandbox._layercopy import copy_tree
from agentkit.sandbox._paths import Mount, SandboxFS
from agentkit.sandbox._process import read_json_fd
from agentkit.sandbox._proctree import alive, kill_namespace, kill_tree, namespace_of
from agentkit.sandbox._reaper import OWNER_ENV, owner_token, reap_orphans_once, reaped
from agentkit.sandbox.local._bwrap import (
    LIFELINE,
    Limits,
    Tools,
    exec_prefix,
    find_tools,
    holder_argv,
    host_symlinks,
    ro_bind_sources,
)
from agentkit.sandbox.local._etcfiles import EtcFile, account_files, data_fds, net_files
from agentkit.sandbox.local._freeze import pause
from agentkit.sandbox.local._hostid import (
    allocate_id,
    chown_tree,
    make_parents,
    needs_own_id,
    write_id_maps,
)
from agentkit.sandbox.local._hosttools import TOOLS_DIR, host_tools
from agentkit.sandbox.local._image import (
    check_runnable,
    hold_image_root,
    prepare_images,
    wait_healthy,
)
from agentkit.sandbox.local._options import LocalOptions
from agentkit.sandbox.local._slirp import Slirp, find_slirp4netns, require_slirp4netns
from agentkit.sandbox.local._stage import DOCKER_CAPS, STAGE, StagePlan, stage_argv
from agentkit.sandbox.local._users import User, resolve_user

__all__ = ["LocalSandbox"]

_START_TIMEOUT_SEC = 30.0
#: Files of /etc every sandbox writes for itself at start (its network's): a
#: fork's child keeps its own, not the parent's.
NET_ETC_FILES = ("hosts", "hostname", "resolv.conf")
#: Directories every base image has, made in the rollout's root on the host userland.
USERLAND_DIRS = ("/var/log", "/var/tmp", "/home", "/opt", "/run", "/srv", "/mnt")


class LocalSandbox(HostFSSandbox):
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
    options_type: ClassVar[type[LocalOptions]] = LocalOptions
    #: The options the sandbox was made with (a fork's child is made with the same).
    options: LocalOptions

    def _init_kind(self) -> None:
        super()._init_kind()
        opts = self.options
        self._tools: Tools = find_tools(opts.bwrap)
        self.network = bool(self.hints.network and opts.allow_network)
        if opts.network_mode not in ("auto", "private", "host"):
            raise SandboxError(
                f"option network_mode={opts.network_mode!r}: expected auto, private or host"
            )
        #: slirp4netns, when the sandbox has network in a namespace of its own.
        self._slirp_program: str | None = None
        if self.network and opts.network_mode == "private":
            self._slirp_program = require_slirp4netns()
        elif self.network and opts.network_mode == "auto":
            self._slirp_program = find_slirp4netns()
        #: True when the sandbox shares the host's network namespace.
        self.host_network = self.network and self._slirp_program is None
        if opts.image not in ("auto", "host"):
            raise SandboxError(f"option image={opts.image!r}: expected auto or host")
        #: The task's image this sandbox runs on (None: the host's userland).
        self.image = self.hints.image if opts.image == "auto" else None
        if self.image is not None:
            check_runnable(self.image)
        self._image_cache = Path(opts.image_cache) if opts.image_cache else None
        if opts.max_builds < 1:
            raise SandboxError(f"max_builds must be at least 1, got {opts.max_builds}")
        self.image_root: ImageRoot | None = None
        #: The host uid/gid the sandbox's uid 0 maps to, when not the caller's own
        #: (always, when the caller is root; image sandboxes map 0..65535 from
        #: ``IMAGE_ID_BASE`` on).
        self.host_id: int | None = None
        if self.image is not None:
            if needs_own_id((IMAGE_ID_BASE, IMAGE_ID_COUNT)):
                self.host_id = IMAGE_ID_BASE
        elif needs_own_id():
            self.host_id = allocate_id()
        self.limits = Limits(
            max_processes=opts.max_processes,
            max_memory_mb=opts.max_memory_mb,
            max_file_size_mb=opts.max_file_size_mb,
            max_cpu_seconds=opts.max_cpu_seconds,
            max_open_files=opts.max_open_files,
        )
        self._endpoint: Endpoint | None = None
        self._python, self._python_prefix = "", ""
        self.ro_binds = self._read_only_binds()
        mounts = [Mount("/", self.fs_root, True)]
        mounts += [Mount(p, Path(p), False) for p in [*ro_bind_sources(), *self.ro_binds]]
        self.fs = SandboxFS(
            mounts=mounts,
            workdir=self.workdir,
            virtual=("/proc", "/dev", "/sys", "/etc"),
            owner=self.host_id,
        )
        self._bwrap_proc: asyncio.subprocess.Process | None = None
        self._holder_pid = 0
        #: The sandbox's own processes (bubblewrap's init, the holder, the nested user
        #: namespace's keeper), found before any command ran: never ended by
        #: :meth:`end_processes`.
        self._keepers: frozenset[int] = frozenset()
        #: The inode of the sandbox's pid namespace (0 until it started).
        self._pidns = 0
        #: The process whose working directory is the workdir (image roots: the holder).
        self._cwd_pid = 0
        self._relay: Relay | None = None
        self._slirp: Slirp | None = None
        #: The shared lock on the image root's cache entry (see ``_imageroot.hold``).
        self._root_lock: int | None = None
        self._userns_fd: int | None = None
        self._shell = ""
        #: A fork's child: the parent's image root, held again rather than looked up.
        self._parent_image_root: ImageRoot | None = None
        #: A fork's child on the host's userland: the parent's /etc, copied into its own.
        self._parent_etc: Path | None = None

    def _read_only_binds(self) -> list[str]:
        """The host paths bound read-only at the same paths (the hints' and the option's,
        and the holder's Python for a relayed endpoint); the endpoint and the holder's
        Python are set on the way."""
        binds: list[str] = []
        for path in [*self.hints.ro_binds, *(self.options.ro_binds or [])]:
            if not path.startswith("/") or not os.path.exists(path):
                raise SandboxError(f"ro_binds: {path!r} must be an existing absolute host path")
            binds.append(os.path.normpath(path))
        if self.image is not None:
            # The holder on an image root is the orchestrator's Python (on the stage only).
            self._python, self._python_prefix = python_for_holder()
        if self.model_endpoint and not self.host_network:
            # In its own network namespace: relayed in; with network, only a
            # loopback endpoint (a hostname is reachable over it, as from a container).
            relayed = loopback_endpoint if self.network else parse_endpoint
            self._endpoint = relayed(self.model_endpoint)
        if self._endpoint is not None:
            exe, prefix = python_for_holder()
            self._python = exe
            if self.image is None and prefix and prefix not in binds:
                binds.append(prefix)
        return binds

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

    # -- lifecycle ------------------------------------------------------------

    def _net_files(self) -> list[EtcFile]:
        """The network files written in the sandbox's /etc (see ``_etcfiles``)."""
        hosts_entry = self._endpoint.hosts_entry if self._endpoint is not None else None
        return net_files(hosts_entry, slirp=self._slirp_program is not None)

    def _etc_files(self) -> list[EtcFile]:
        """The files generated in the tmpfs /etc on the host's userland."""
        return [*account_files(), *self._net_files()]

    def _make_dirs(self) -> None:
        if self._fork_child:
            # A fork's child: its files are the parent's copy (the upper layer's
            # root included); only overlayfs' work directory is new.
            if self.image is not None:
                self._make_layer(self.root / "work")
            return
        if self.image is not None:
            # The overlay's upper layer (its root's owner and mode are the
            # sandbox's /) and work directory; the rest is made inside.
            for layer in (self.fs_root, self.root / "work"):
                self._make_layer(layer)
            return
        super()._make_dirs()
        for d in USERLAND_DIRS:
            self._fs_dir(d).mkdir(parents=True, exist_ok=True)
        os.chmod(self._fs_dir("/var/tmp"), 0o1777)

    def _make_layer(self, layer: Path) -> None:
        layer.mkdir(mode=0o755, parents=True, exist_ok=True)
        os.chmod(layer, 0o755)
        if self.host_id is not None:
            os.chown(layer, self.host_id, self.host_id)

    async def _start_backend(self) -> None:
        # Not cancellable: bubblewrap killed half-way through its start leaves a
        # process waiting forever to be released; a Ctrl-C waits for the start
        # (milliseconds) and then takes the sandbox down whole.
        with anyio.CancelScope(shield=True):
            try:
                await self._start_bwrap()
            except BaseException:
                self._release_image_root()
                raise
            if self._parent_etc is not None:
                await self._take_parent_etc(self._parent_etc)

    async def _start_bwrap(self) -> None:
        # Sandboxes an earlier orchestrator could not take down with it.
        if not reaped():
            await asyncio.to_thread(reap_orphans_once)
        # What commands create is the orchestrator's on the host (root's, as root):
        # a setuid file they plant must be out of other local users' reach.
        os.chmod(self.root, 0o700)
        if self.image is not None:
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
            # bubblewrap also holds the info pipe's read end: should this process die
            # before reading it, bubblewrap's write must not fail (SIGPIPE would end
            # its outer process and leave its child waiting forever to be released).
            pass_fds = [info_w, info_r, block_r, *data_fds]
            if chan_box is not None:
                pass_fds.append(chan_box.fileno())
            self._bwrap_proc = await asyncio.create_subprocess_exec(
                *argv,
                # The lifeline: the holder waits on this pipe, whose only write end
                # is ours; when this process dies, however abruptly, the holder
                # reads EOF and exits, and with it the whole sandbox.
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env={"PATH": "/usr/bin:/bin", OWNER_ENV: owner_token()},
                pass_fds=pass_fds,
                start_new_session=True,
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
                listener = await asyncio.to_thread(recv_fd, chan_host)
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
        plan = StagePlan(
            nested_ids=IMAGE_ID_COUNT if self.host_id is not None else 0,
            private_net=not self.host_network,
            workdir=self.workdir,
            binds=[
                (f"{STAGE}/tools{TOOLS_DIR}", TOOLS_DIR),
                *((f"{STAGE}/binds/{i}", path) for i, path in enumerate(self.ro_binds)),
            ],
            dirs=dirs,
            files=self._net_files(),
            relay=relay,
        )
        return stage_argv(
            self._tools,
            python=self._python,
            python_prefix=self._python_prefix,
            rootfs=image_root.rootfs,
            rollout_dir=self.root,
            network=self.host_network,
            host_files=tools.files,
            ro_binds=self.ro_binds,
            info_fd=info_w,
            userns_block_fd=block_r,
            plan=plan,
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

    async def _use_image_root(self) -> None:
        """Get the task's image root and hold it (no prune removes it while we run)."""
        image = self.image
        assert image is not None
        if self._parent_image_root is not None:
            # A fork's child: the parent holds this root, so it is there.
            fd = await asyncio.to_thread(hold, self._parent_image_root)
            if fd is not None:
                self.image_root, self._root_lock = self._parent_image_root, fd
                return
        self.image_root, self._root_lock = await hold_image_root(
            image,
            image_tool=self.options.image_tool,
            image_cache=self._image_cache,
            id_base=self.host_id,
        )

    def _release_image_root(self) -> None:
        if self._root_lock is not None:
            os.close(self._root_lock)
            self._root_lock = None

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
        err = (await proc.stderr.read()).decode(errors="replace").strip()
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
            if self.image is not None:
                write_id_maps(self._holder_pid, self.host_id, count=IMAGE_ID_COUNT)
            else:
                write_id_maps(self._holder_pid, self.host_id)
            os.write(block_w, b"1")
        except OSError as exc:
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
        proc = await asyncio.create_subprocess_exec(
            self._tools.nsenter, "-t", str(self._holder_pid), "-U",
            *(() if self.host_network else ("-n",)),
            # As root, become the namespace's root (the sandbox's own id); else
            # our own uid already is (and setgroups is denied).
            *(() if self.host_id is not None else ("--preserve-credentials",)),
            "--",
            "/bin/sh", "-c", script,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
            env={"PATH": "/usr/bin:/bin"},
        )  # fmt: skip
        _, err = await proc.communicate()
        if proc.returncode != 0:
            raise SandboxError(
                f"could not forbid user namespaces inside: {err.decode(errors='replace').strip()}"
            )

    async def _stop_backend(self) -> None:
        if self._relay is not None:
            await self._relay.close()
            self._relay = None
        if self._slirp is not None:
            await self._slirp.close()
            self._slirp = None
        if self._userns_fd is not None:
            os.close(self._userns_fd)
            self._userns_fd = None
        proc = self._bwrap_proc
        if proc is None:
            self._release_image_root()
            return
        # Killing the namespace's pid 1 makes the kernel kill everything in it
        # (the commands too: nsenter starts them in its pid namespace).
        if self._holder_pid:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(self._holder_pid, signal.SIGKILL)
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGKILL)
        if proc.stdin is not None:
            proc.stdin.close()  # the lifeline
        await proc.wait()
        self._bwrap_proc = None
        # Everything inside is gone, and with it the overlay on the image root.
        self._release_image_root()

    # -- ending every process (before grading) ---------------------------------

    async def end_processes(self) -> int:
        """End every process running in the sandbox; then start the image's entrypoint again.

        Every process in the sandbox's pid namespace ends, whatever it did to
        leave its command (a double fork, ``setsid``, ``nohup``, another uid
        inside, a stop signal): they are found by their namespace, stopped
        until no new one appears, killed, and waited for. Only the sandbox's
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
            killed = await asyncio.to_thread(
                kill_namespace, self._holder_pid, self._keepers, wrappers
            )
            left = await asyncio.to_thread(alive, killed)
            self._check_alive()
        if left:
            raise SandboxError(
                f"sandbox {who}: {len(left)} process(es) did not end when killed "
                f"(pids {', '.join(map(str, sorted(left)[:5]))}; an uninterruptible wait?)"
            )
        await self._start_entrypoint()
        return len(killed.difference(wrappers))

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

    def _check_alive(self) -> None:
        """Raise :class:`SandboxDiedError` unless bubblewrap and every keeper still run."""
        proc = self._bwrap_proc
        running = proc is not None and proc.returncode is None
        if (
            not running
            or alive(self._keepers) != self._keepers
            or any(namespace_of(pid) != self._pidns for pid in self._keepers)
        ):
            raise SandboxDiedError(
                f"sandbox {self.rollout_id or self.root} is no longer running: its own "
                "processes were killed (every process inside killed, from inside or by "
                "the system)"
            )

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
            for child in children:
                await child.close(remove=True)
            if (failed := self._fork_failed(exc, who)) is not None:
                raise failed from None
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

    async def _take_parent_etc(self, etc: Path) -> None:
        """A fork's child on the host's userland: put the parent's /etc over its own."""

        def copy() -> None:
            try:
                copy_tree(etc, f"/proc/{self._holder_pid}/root/etc", merge=True)
            finally:
                shutil.rmtree(etc, ignore_errors=True)

        await asyncio.to_thread(copy)
        self._parent_etc = None

    # -- commands -------------------------------------------------------------

    def _check_user(self, user: str | None) -> None:
        if self.image is None or user in (None, "root", "0"):
            super()._check_user(user)
        elif self.host_id is None:
            raise SandboxError(
                f"local sandbox on an image, run as an ordinary user: only root exists "
                f"inside (one uid is mapped); user={user!r} is not supported"
            )
        elif not isinstance(user, str) or not user:
            raise SandboxError(f"user={user!r}: expected a name or a uid")

    def _resolve_user(self, user: str | None) -> User | None:
        if self.image is None or user in (None, "root", "0"):
            return None
        assert user is not None

        def text(path: str) -> str:
            try:
                return self.fs.host_path(path).read_text(errors="replace")
            except (OSError, SandboxError):
                return ""

        return resolve_user(
            user, text("/etc/passwd"), text("/etc/group"), max_id=IMAGE_ID_COUNT - 1
        )

    def _user_env(self, who: User) -> dict[str, str]:
        return {"HOME": who.home, "USER": who.name, "LOGNAME": who.name}

    def _spawn_args(
        self, argv: list[str], cwd: str, env: dict[str, str], who: User | None = None
    ) -> tuple[list[str], dict[str, str], str | None]:
        if self._bwrap_proc is None or self._bwrap_proc.returncode is not None:
            raise SandboxDiedError(
                f"sandbox {self.rollout_id or self.root} is no longer running "
                "(was every process inside killed?)"
            )
        in_holder_cwd = cwd == self.workdir and self._holder_in_workdir()
        if self.image is None:
            prefix = exec_prefix(
                self._tools,
                self._holder_pid,
                cwd,
                self.limits,
                become_root=self.host_id is not None,
                in_holder_cwd=in_holder_cwd,
            )
            return [*prefix, *argv], env, None
        tools = host_tools("setpriv", "env")
        prefix = exec_prefix(
            self._tools,
            self._cwd_pid,
            cwd,
            self.limits,
            become_root=self.host_id is not None,
            in_holder_cwd=in_holder_cwd,
            userns=None if self._userns_fd is None else f"/proc/self/fd/{self._userns_fd}",
            helpers={"setpriv": tools.argv("setpriv"), "env": tools.argv("env")},
            keep_caps=DOCKER_CAPS,
            user=None if who is None else (who.uid, who.gid, who.groups),
        )
        return [*prefix, *argv], env, None

    def _holder_in_workdir(self) -> bool:
        """True while the holder's working directory is still the sandbox's workdir.

        Commands in the workdir then start in the holder's (nsenter opens it
        through /proc, not by path), which saves a process per command. False
        once the workdir was removed, replaced or made a link.
        """
        try:
            here = os.stat(f"/proc/{self._cwd_pid or self._holder_pid}/cwd")
            there = os.stat(self.fs.host_path(self.workdir))
        except (OSError, SandboxError):
            return False
        return (here.st_dev, here.st_ino) == (there.st_dev, there.st_ino)

    def _spawn_fds(self) -> tuple[int, ...]:
        return () if self._userns_fd is None else (self._userns_fd,)

    def _kill_process_tree(self, pid: int) -> None:
        kill_tree([pid], [pid])

    # -- environment ------------------------------------------------------------

    def base_env(self) -> dict[str, str]:
        """The environment every command starts from: on an image root, with its ``ENV``."""
        env = super().base_env()
        if self.image_root is not None:
            env.update(self.image_root.config.env)
        return env

    def _argv(self, cmd: str | list[str]) -> list[str]:
        if isinstance(cmd, str) and self._shell:
            return [self._shell, "-c", cmd]
        return super()._argv(cmd)


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
