"""Network for a sandbox's own network namespace, through slirp4netns.

When a task may use the network, the local sandbox keeps its private network
namespace (as a Docker container does) instead of sharing the host's:
``slirp4netns`` (the user-mode network stack rootless Podman uses) attaches a
``tap0`` device to it, with the address ``10.0.2.100/24``, a default route
through ``10.0.2.2`` and a DNS forwarder at ``10.0.2.3``, and carries its
traffic out through ordinary sockets on the host. Services a task starts
listen inside the sandbox only (two rollouts can both use port 80), and the
host's loopback (``127.0.0.1`` on the host: a model server, a database) is
out of reach (``--disable-host-loopback``); the run's model endpoint still
reaches in through the relay, as without network.

One slirp4netns process serves one sandbox. Its exit descriptor is a pipe
whose only write end the orchestrator holds: it exits when the sandbox is
closed, or when the orchestrator dies, however abruptly.

**Its sandbox must not unmount the host's file systems.** ``--enable-sandbox``
moves slirp4netns into a mount namespace of its own, makes only ``/`` private
there (not what is mounted below it), pivots into a tmpfs and detaches the old
root. Run as root (in the user namespace the mounts belong to), that detach
propagates to every mount that is a peer of one in the old root: Docker's
data root is a shared mount, so the root file system of every running
container vanished from the engine's view (``docker cp`` and the archive API
then wrote into an empty directory the container never sees, ``exec -u root``
found no ``/etc/passwd``). As root, slirp4netns therefore starts in a mount
namespace whose mounts are all slaves of ours (``unshare --mount
--propagation slave``): the host's mount events still reach it, its own
unmounts stay its own. As another user it builds its sandbox in the
sandbox's user namespace, where the kernel already makes the mounts slaves.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil

from agentkit._errors import SandboxError, SandboxUnavailableError
from agentkit.sandbox._process import wait_readable

__all__ = ["RESOLV_CONF", "SLIRP_HINT", "Slirp", "find_slirp4netns", "require_slirp4netns"]

#: The sandbox's /etc/resolv.conf: slirp4netns's DNS forwarder.
RESOLV_CONF = "nameserver 10.0.2.3\n"
SLIRP_HINT = (
    "install slirp4netns (`apt-get install slirp4netns`, `dnf install slirp4netns`), "
    "or give the sandbox the host's network on purpose with -S network_mode=host"
)
_READY_TIMEOUT_SEC = 30.0


def find_slirp4netns() -> str | None:
    """The slirp4netns program on PATH, or None."""
    return shutil.which("slirp4netns")


def require_slirp4netns() -> str:
    """The slirp4netns program, or a :class:`SandboxUnavailableError` saying how to get it."""
    found = find_slirp4netns()
    if found is None:
        raise SandboxUnavailableError(
            f"network_mode=private needs slirp4netns, which is not installed: {SLIRP_HINT}"
        )
    return found


def _own_mount_namespace() -> list[str]:
    """The command prefix that starts slirp4netns where its sandbox cannot unmount ours.

    As root: ``unshare --mount --propagation slave --`` (util-linux), so the
    mounts slirp4netns detaches are slaves of the host's, whose unmounting
    does not propagate back (see the module docstring). As another user:
    nothing (it builds its sandbox in the sandbox's user namespace).
    """
    if os.geteuid() != 0:
        return []
    unshare = shutil.which("unshare")
    if unshare is None:
        raise SandboxUnavailableError(
            "network_mode=private as root needs unshare from util-linux, to keep "
            "slirp4netns's unmounts out of the host's mount namespace: "
            "install it with `apt-get install util-linux`"
        )
    return [unshare, "--mount", "--propagation", "slave", "--"]


class Slirp:
    """A running slirp4netns attached to one sandbox's network namespace."""

    def __init__(self, proc: asyncio.subprocess.Process, exit_w: int) -> None:
        self._proc = proc
        self._exit_w: int | None = exit_w

    @property
    def pid(self) -> int:
        """The host pid of the slirp4netns process."""
        return self._proc.pid

    @classmethod
    async def start(cls, program: str, pid: int) -> Slirp:
        """Attach to the network namespace of ``pid``; return once ``tap0`` is configured.

        Raises :class:`SandboxError` with slirp4netns's own message when it
        cannot (no ``/dev/net/tun``, a kernel without tap support...).
        """
        prefix = _own_mount_namespace()
        ready_r, ready_w = os.pipe()
        exit_r, exit_w = os.pipe()
        try:
            proc = await asyncio.create_subprocess_exec(
                *prefix,
                program,
                "--configure",
                "--mtu=65520",
                "--disable-host-loopback",
                "--enable-sandbox",
                "--enable-seccomp",
                f"--ready-fd={ready_w}",
                f"--exit-fd={exit_r}",
                str(pid),
                "tap0",
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.DEVNULL,
                stderr=asyncio.subprocess.PIPE,
                pass_fds=(ready_w, exit_r),
                # Its own session: a Ctrl-C meant for the run must not end it
                # before the sandbox it serves.
                start_new_session=True,
            )
        except BaseException:
            for fd in (ready_r, exit_w):
                os.close(fd)
            raise
        finally:
            os.close(ready_w)
            os.close(exit_r)
        slirp = cls(proc, exit_w)
        try:
            try:
                ready = await asyncio.wait_for(_read_byte(ready_r), _READY_TIMEOUT_SEC)
            except TimeoutError:
                ready = b""
            if ready != b"1":
                err = await slirp._stop()
                raise SandboxError(
                    f"slirp4netns could not give the sandbox its network: {err or 'no output'} "
                    "(-S network_mode=host gives it the host's network instead)"
                )
        except BaseException:
            await slirp.close()
            raise
        finally:
            os.close(ready_r)
        return slirp

    async def _stop(self) -> str:
        """Stop it; return the last lines it wrote on stderr."""
        if self._exit_w is not None:
            os.close(self._exit_w)
            self._exit_w = None
        if self._proc.returncode is None:
            try:
                await asyncio.wait_for(self._proc.wait(), 5)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    self._proc.kill()
                await self._proc.wait()
        assert self._proc.stderr is not None
        lines = (await self._proc.stderr.read()).decode(errors="replace").strip().splitlines()
        return "; ".join(lines[-3:])

    async def close(self) -> None:
        """Stop it (closing its exit descriptor) and wait for it."""
        await self._stop()


async def _read_byte(fd: int) -> bytes:
    """One byte from pipe ``fd`` (b"" at EOF) without blocking the event loop."""
    os.set_blocking(fd, False)
    while True:
        await wait_readable(fd)
        try:
            return os.read(fd, 1)
        except BlockingIOError:
            continue
