"""The network holder of a compose rollout: one network and pid namespace its services share.

Every service of a compose task runs in a local sandbox of its own (its own
image root, user, mount, ipc and uts namespaces); what they share is the
*network holder*, one bubblewrap per rollout that makes a user, network and
pid namespace and then only waits on its lifeline (see ``_bwrap.LIFELINE``).
A service's bubblewrap starts inside them (:meth:`NetHolder.enter_argv`:
``nsenter`` into the holder's user, network, pid and mount namespaces): its
own user namespace is a child of the holder's, its processes are in the
holder's pid namespace (a child one of their own below it), and its network
is the holder's, so services reach each other on the one loopback and two
rollouts never see each other's.

The holder's mount namespace holds only what the services' bubblewraps bind
(the host's ``/usr``, the ``/etc`` pieces its programs read, the image roots
read-only, the rollout's directory writable); nothing untrusted ever runs in
it, nor in its user namespace, where only the orchestrator's own helpers
(the id maps' writer, the sysctl writer) enter. As root its user namespace
maps the image id range (``IMAGE_ID_BASE``...) and host root, as
``write_id_maps`` maps an image sandbox's; a service's bubblewrap runs as
that mapped host root (``nsenter -S/-G``) and its own namespace maps the
range through (:meth:`NetHolder.write_maps`).

When the holder's lifeline closes (the rollout is closed, or the orchestrator
died however abruptly) it exits; bubblewrap, the pid namespace's init, exits
with it and the kernel kills every process of the namespace: every service.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Sequence

import attrs

from agentkit._errors import SandboxError
from agentkit.images._imageroot import IMAGE_ID_BASE, IMAGE_ID_COUNT
from agentkit.sandbox._process import read_json_fd, spawn
from agentkit.sandbox._reaper import OWNER_ENV, owner_token
from agentkit.sandbox.local._bwrap import LIFELINE, Tools, host_etc_args, host_usr_args
from agentkit.sandbox.local._hostid import write_id_maps
from agentkit.sandbox.local._namespaces import end_holder, error_tail, run_as_namespace_root
from agentkit.sandbox.local._slirp import Slirp

__all__ = ["Joined", "NetHolder"]

_START_TIMEOUT_SEC = 30.0


class NetHolder:
    """One rollout's network holder (see the module's docstring).

    ``root_mode`` says agentkit runs as root: the holder maps the image id range
    and services' bubblewraps run as its mapped host root; otherwise it maps the
    caller's own uid and services keep it.
    """

    def __init__(self, tools: Tools, *, root_mode: bool) -> None:
        self._tools = tools
        self.root_mode = root_mode
        self._proc: asyncio.subprocess.Process | None = None
        self._transport: asyncio.SubprocessTransport | None = None
        #: The host pid of the holder's pid namespace's init (bubblewrap's child).
        self.pid = 0
        self._slirp: Slirp | None = None

    async def start(
        self,
        *,
        writable: Sequence[str],
        read_only: Sequence[str],
        slirp_program: str | None,
    ) -> None:
        """Start the holder, its mount namespace binding ``writable`` and ``read_only``
        host paths at the same place; attach slirp4netns when given (outbound network)."""
        info_r, info_w = os.pipe()
        block_r, block_w = os.pipe()
        argv = [
            self._tools.bwrap,
            "--unshare-user", "--unshare-net", "--unshare-pid",
            "--unshare-ipc", "--unshare-uts",
            "--uid", "0", "--gid", "0",
            # No --die-with-parent: the lifeline ends it (see _bwrap.holder_argv).
            "--new-session",
            "--cap-drop", "ALL",
            "--unsetenv", OWNER_ENV,
            "--userns-block-fd", str(block_r),
            *host_usr_args(),
            *host_etc_args(),
            # (before the binds: they may be below /tmp)
            "--tmpfs", "/tmp",
        ]  # fmt: skip
        for path in dict.fromkeys(read_only):
            argv += ["--ro-bind", path, path]
        for path in dict.fromkeys(writable):
            argv += ["--bind", path, path]
        argv += [
            "--proc", "/proc",
            "--dev", "/dev",
            "--hostname", "sandbox",
            "--chdir", "/",
            "--info-fd", str(info_w),
            "--",
            "/bin/sh", "-c", f"echo ready; {LIFELINE}",
        ]  # fmt: skip
        try:
            # stdin is the lifeline: a pipe whose only write end is ours.
            self._proc, _, self._transport = await spawn(
                argv,
                stdin=True,
                env={"PATH": "/usr/bin:/bin", OWNER_ENV: owner_token()},
                cwd=None,
                pass_fds=(info_w, info_r, block_r),
            )
        finally:
            os.close(info_w)
            os.close(block_r)
        try:
            await self._await_ready(info_r, block_w)
            await self._configure()
            if slirp_program is not None:
                self._slirp = await Slirp.start(slirp_program, self.pid)
        except BaseException:
            await self.close()
            raise
        finally:
            os.close(info_r)
            os.close(block_w)

    async def _await_ready(self, info_r: int, block_w: int) -> None:
        proc = self._proc
        assert proc is not None and proc.stdout is not None
        try:
            info = await asyncio.wait_for(read_json_fd(info_r), _START_TIMEOUT_SEC)
            self.pid = int(info["child-pid"])
            if self.root_mode:
                write_id_maps(self.pid, IMAGE_ID_BASE, count=IMAGE_ID_COUNT)
            else:
                write_id_maps(self.pid, None)
            os.write(block_w, b"1")
            line = await asyncio.wait_for(proc.stdout.readline(), _START_TIMEOUT_SEC)
        except (TimeoutError, OSError, ValueError, KeyError, TypeError) as exc:
            await self._fail(repr(exc))
        if line.strip() != b"ready":
            await self._fail("no ready line")

    async def _fail(self, reason: str) -> None:
        proc = self._proc
        assert proc is not None and proc.stderr is not None
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGKILL)
        err = await error_tail(proc.stderr)
        raise SandboxError(
            f"bubblewrap could not start the compose rollout's network: {err or reason}"
        )

    async def _configure(self) -> None:
        """In the shared network namespace: ports below 1024 and ping for every service,
        as Docker allows them in a container's."""
        groups = IMAGE_ID_COUNT - 1 if self.root_mode else 0
        await self.run_inside(
            ["-n"],
            "echo 0 > /proc/sys/net/ipv4/ip_unprivileged_port_start"
            f" && echo '0 {groups}' > /proc/sys/net/ipv4/ping_group_range",
            what="configure the services' network",
        )

    async def run_inside(self, namespaces: Sequence[str], script: str, *, what: str) -> None:
        """Run ``script`` as the holder's user namespace's root (the orchestrator's helper;
        nothing of the task's), in its user namespace and ``namespaces``."""
        await run_as_namespace_root(
            self._tools.nsenter, self.pid, namespaces, script, host_root=self.root_mode, what=what
        )

    def enter_argv(self) -> list[str]:
        """The prefix that starts a service's bubblewrap in the holder's namespaces."""
        who = ["-S", str(IMAGE_ID_COUNT), "-G", str(IMAGE_ID_COUNT)]
        return [
            self._tools.nsenter, "-t", str(self.pid), "-U", "-n", "-p", "-m",
            *(who if self.root_mode else ["--preserve-credentials"]),
            "--",
        ]  # fmt: skip

    def outer_argv(self) -> list[str]:
        """The prefix that puts a command into the holder's user and network namespaces,
        keeping the caller's credentials (the holder's root: an ordinary user's own
        uid), for a service's command to enter the service's namespaces from there."""
        return [
            self._tools.nsenter, "-t", str(self.pid), "-U", "-n", "--preserve-credentials",
            "--",
        ]  # fmt: skip

    async def write_maps(self, inner_pid: int) -> None:
        """Map a service's user namespace (``inner_pid``: its bubblewrap's child, as the
        holder's pid namespace numbers it): as root the image id range, and the holder's
        mapped host root for bubblewrap's setup; else the one uid."""
        if self.root_mode:
            text = f"0 0 {IMAGE_ID_COUNT}\\n{IMAGE_ID_COUNT} {IMAGE_ID_COUNT} 1\\n"
            script = (
                f"printf '{text}' > /proc/{inner_pid}/uid_map"
                f" && printf '{text}' > /proc/{inner_pid}/gid_map"
            )
        else:
            script = (
                f"echo deny > /proc/{inner_pid}/setgroups"
                f" && echo '0 0 1' > /proc/{inner_pid}/uid_map"
                f" && echo '0 0 1' > /proc/{inner_pid}/gid_map"
            )
        await self.run_inside(["-m"], script, what="map a service's user namespace")

    def alive(self) -> bool:
        """True while the holder runs."""
        return self._proc is not None and self._proc.returncode is None

    async def close(self) -> None:
        """Close the lifeline and kill the holder: every service goes with it."""
        if self._slirp is not None:
            await self._slirp.close()
            self._slirp = None
        proc, self._proc = self._proc, None
        if proc is None:
            return
        await end_holder(proc, self.pid)
        # Its pipes closed now, in this event loop: wait() returns at once for a process
        # that had already exited, while its pipes' ends may still be on their way; left
        # open, a pipe would be closed when collected, after the loop.
        transport, self._transport = self._transport, None
        if transport is not None:
            transport.close()


@attrs.frozen(kw_only=True)
class Joined:
    """What a service's sandbox needs to start inside a rollout's :class:`NetHolder`."""

    holder: NetHolder
    #: The service's host name (``/etc/hostname`` and its uts namespace's).
    hostname: str
    #: The rollout's ``/etc/hosts``: every service's name and aliases.
    hosts: str
    #: (host path, in-sandbox path, read-only): its named volumes and bind mounts.
    volumes: tuple[tuple[str, str, bool], ...] = ()
    #: In-sandbox paths with a tmpfs of their own.
    tmpfs: tuple[str, ...] = ()
    #: True when the holder has slirp4netns (outbound network, its DNS).
    slirp: bool = False
