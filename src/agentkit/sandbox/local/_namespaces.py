"""What the orchestrator does to a sandbox's namespaces from outside: run a setup
script in them as their root, and end them with their holder.

Shared by a sandbox's own holder (:mod:`._lifecycle`, :mod:`._core`) and a compose
rollout's network holder (:mod:`._netholder`).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Sequence

from agentkit._errors import SandboxError
from agentkit.sandbox._process import wait_readable
from agentkit.sandbox._proctree import EXIT_WAIT_SEC

__all__ = ["ERROR_TAIL_BYTES", "end_holder", "error_tail", "run_as_namespace_root"]

#: How much of a failed helper's error output is kept (its end: what it said last).
ERROR_TAIL_BYTES = 16 << 10


async def run_as_namespace_root(
    nsenter: str, pid: int, namespaces: Sequence[str], script: str, *, host_root: bool, what: str
) -> None:
    """Run ``script`` (``/bin/sh -c``) in the user namespace of process ``pid`` and its
    other ``namespaces`` (nsenter flags such as ``-n``), as that namespace's root: the
    orchestrator's own setup, nothing of the task's. As host root (``host_root``)
    nsenter becomes the namespace's root; otherwise our own uid already is (and
    setgroups is denied), so the credentials are kept. Raises :class:`SandboxError`
    ("could not ``what``", with the script's error output) when it fails."""
    proc = await asyncio.create_subprocess_exec(
        nsenter, "-t", str(pid), "-U", *namespaces,
        *(() if host_root else ("--preserve-credentials",)),
        "--", "/bin/sh", "-c", script,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
        env={"PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    try:
        _, err = await proc.communicate()
    except BaseException:
        # cancelled (the start it belongs to failed): nsenter must not outlive it
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        await asyncio.shield(proc.wait())
        raise
    if proc.returncode != 0:
        raise SandboxError(f"could not {what}: {err.decode(errors='replace').strip()}")


async def error_tail(stream: asyncio.StreamReader, limit: int = ERROR_TAIL_BYTES) -> str:
    """What a failed process wrote to ``stream`` (its stderr) until it closed, of which
    only the last ``limit`` bytes are kept: a process that writes without end costs
    reading, never memory."""
    kept = b""
    while chunk := await stream.read(1 << 16):
        kept = (kept + chunk)[-limit:]
    return kept.decode(errors="replace").strip()


async def end_holder(proc: asyncio.subprocess.Process, init_pid: int | None) -> None:
    """Kill a holder's namespace init ``init_pid`` (the kernel then kills every process
    of its pid namespace) and its bubblewrap ``proc``, close the lifeline (its stdin),
    and wait for both: the init exits only once the kernel has reaped every other
    process of its namespace, so when this returns nothing of the sandbox runs (at most
    :data:`EXIT_WAIT_SEC` for a process the kernel holds). Waiting for bubblewrap alone
    returned while the namespace's processes were still being killed. The caller closes
    its pipes' transport afterwards, in the loop."""
    pidfd: int | None = None
    if init_pid:
        with contextlib.suppress(OSError):  # gone already
            pidfd = os.pidfd_open(init_pid)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            if pidfd is not None:
                signal.pidfd_send_signal(pidfd, signal.SIGKILL)
            else:
                os.kill(init_pid, signal.SIGKILL)
    if proc.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGKILL)
    if proc.stdin is not None:
        proc.stdin.close()
    try:
        await proc.wait()
        if pidfd is not None:
            # readable once it has exited; at most EXIT_WAIT_SEC for one the kernel holds
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(wait_readable(pidfd), EXIT_WAIT_SEC)
    finally:
        if pidfd is not None:
            os.close(pidfd)
