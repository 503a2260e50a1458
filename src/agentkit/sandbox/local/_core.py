"""The local sandbox's state and commands: what it was made with, how a command enters it.

:class:`LocalCore` holds what a local sandbox is (its options applied: network,
image, host ids, limits, read-only binds, its file system seen from the host)
and how a command runs in it (``nsenter`` into the holder's namespaces, as the
image's user where there is one) and is killed, and how the sandbox is taken
down. Starting bubblewrap is ``_lifecycle``'s; forks and grading are
:class:`~agentkit.sandbox.local.LocalSandbox`'s.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import ClassVar

import attrs

from agentkit._errors import SandboxDiedError, SandboxError
from agentkit._sandbox import TaskImage
from agentkit.images._imageroot import IMAGE_ID_BASE, IMAGE_ID_COUNT, ImageRoot, hold
from agentkit.sandbox._base import HostFSSandbox
from agentkit.sandbox._forward import (
    Endpoint,
    Relay,
    loopback_endpoint,
    parse_endpoint,
    python_for_holder,
)
from agentkit.sandbox._paths import Mount, SandboxFS
from agentkit.sandbox._proctree import alive, kill_tree, namespace_of
from agentkit.sandbox.local._bwrap import (
    Limits,
    Tools,
    exec_prefix,
    find_tools,
    ro_bind_sources,
)
from agentkit.sandbox.local._composefile import ComposeFile
from agentkit.sandbox.local._etcfiles import EtcFile, account_files, net_files
from agentkit.sandbox.local._hostid import (
    allocate_id,
    needs_own_id,
)
from agentkit.sandbox.local._hosttools import host_tools
from agentkit.sandbox.local._image import check_runnable, hold_image_root
from agentkit.sandbox.local._namespaces import end_holder
from agentkit.sandbox.local._netholder import Joined
from agentkit.sandbox.local._options import LocalOptions
from agentkit.sandbox.local._slirp import (
    RESOLV_CONF,
    Slirp,
    find_slirp4netns,
    require_slirp4netns,
)
from agentkit.sandbox.local._stage import DOCKER_CAPS
from agentkit.sandbox.local._users import User, resolve_user

__all__ = ["NET_ETC_FILES", "LocalCore"]

#: Files of /etc every sandbox writes for itself at start (its network's): a
#: fork's child keeps its own, not the parent's.
NET_ETC_FILES = ("hosts", "hostname", "resolv.conf")
#: Directories every base image has, made in the rollout's root on the host userland.
USERLAND_DIRS = ("/var/log", "/var/tmp", "/home", "/opt", "/run", "/srv", "/mnt")


class LocalCore(HostFSSandbox):
    """A local sandbox's state and commands (see the module's docstring)."""

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
        #: A compose task's services (None: one image), and each one's image.
        self.compose: ComposeFile | None = None
        self.compose_images: dict[str, TaskImage] = {}
        #: slirp4netns for a compose rollout's network holder (its services share it).
        self._compose_slirp: str | None = None
        #: Set on each service's sandbox of a compose rollout: it starts in the holder's.
        self._joined: Joined | None = None
        if self.image is not None:
            found = check_runnable(self.image, self.hints.env)
            if found is not None:
                self._init_compose(*found)
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
        #: Its transport, closed once it has exited (see :meth:`_stop_backend`).
        self._bwrap_transport: asyncio.SubprocessTransport | None = None
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
        #: The shared lock on the image root's cache entry (``images/_imageroot.hold``).
        self._root_lock: int | None = None
        self._userns_fd: int | None = None
        self._shell = ""
        #: A fork's child: the parent's image root, held again rather than looked up.
        self._parent_image_root: ImageRoot | None = None
        #: A fork's child on the host's userland: the parent's /etc, copied into its own.
        self._parent_etc: Path | None = None

    def _init_compose(self, compose: ComposeFile, images: dict[str, TaskImage]) -> None:
        """The rollout's sandbox is the compose task's main service: on its image, with its
        environment; the network its services share is made by their holder."""
        assert self.image is not None
        main = self.image.main_service
        self.compose, self.compose_images = compose, images
        self.image = images[main]
        if self.network and self.host_network:
            raise SandboxError(
                f"{compose.path}: a compose task's services share a private network of their "
                "own, which needs slirp4netns for network access (install it; "
                "network_mode=host is not supported for compose tasks)"
            )
        self._compose_slirp, self._slirp_program = self._slirp_program, None
        env = compose.services[main].environment
        if env:
            self.hints = attrs.evolve(self.hints, env={**env, **self.hints.env})

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

    # -- lifecycle ------------------------------------------------------------

    def _net_files(self) -> list[EtcFile]:
        """The network files written in the sandbox's /etc (see ``_etcfiles``)."""
        hosts_entry = self._endpoint.hosts_entry if self._endpoint is not None else None
        joined = self._joined
        if joined is not None:
            # a compose service: the rollout's names, its own host name
            hosts = joined.hosts + (f"127.0.0.1 {hosts_entry}\n" if hosts_entry else "")
            files = [("/etc/hosts", hosts, 0o644), ("/etc/hostname", f"{joined.hostname}\n", 0o644)]
            if joined.slirp:
                files.append(("/etc/resolv.conf", RESOLV_CONF, 0o644))
            return files
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
        await end_holder(proc, self._holder_pid)
        self._bwrap_proc = None
        # Its pipes are closed now, in this event loop: wait() returns at once for a
        # process that had already exited (a compose service's, ended with the rollout's
        # network holder) while its pipes' ends may still be on their way; left open, a
        # pipe would be closed when collected, after the loop ("Event loop is closed").
        if self._bwrap_transport is not None:
            self._bwrap_transport.close()
            self._bwrap_transport = None
        # Everything inside is gone, and with it the overlay on the image root.
        self._release_image_root()

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
        if self._joined is not None and self.host_id is None:
            # A compose service as an ordinary user: the network namespace is the
            # holder's, owned by the holder's user namespace, where a process in the
            # service's own (a child one) has no capability; nsenter enters it from the
            # holder's user namespace first (as root, nsenter enters it from the host's).
            prefix = [*self._joined.holder.outer_argv(), *prefix]
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
