"""What every sandbox that forks shares: the child's root and name, and the gate.

A fork copies the parent's files while its processes are paused. The
:class:`Gate` keeps the orchestrator itself from changing them meanwhile:
a command starting or an upload writing waits until the copy is done (a
command already running is paused with the rest).
"""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path

import attrs

from agentkit._errors import SandboxForkError

__all__ = ["ForkStats", "Gate", "cannot_fork", "fork_id", "fork_root"]


@attrs.frozen(kw_only=True)
class ForkStats:
    """What a fork cost, kept on the child (``child.fork_stats``).

    ``paused_sec``: how long the parent's processes were paused (the copy);
    ``entries`` and ``bytes``: what was copied (files, directories, links...
    and their data; for the docker sandbox, its host directories only: the
    container's files go through the engine's commit).
    """

    parent: str
    paused_sec: float
    entries: int = 0
    bytes: int = 0


class Gate:
    """Lets commands and uploads through, except while a fork copies the files.

    ``async with gate.passing():`` around what must not overlap a copy (a
    command's start, an upload); ``async with gate.closed():`` around the
    copy: it waits for those already passing, and holds new ones until it
    ends.
    """

    def __init__(self) -> None:
        self._open = asyncio.Event()
        self._open.set()
        self._idle = asyncio.Event()
        self._idle.set()
        self._busy = 0

    @contextlib.asynccontextmanager
    async def passing(self) -> AsyncIterator[None]:
        """Wait while a copy runs, then hold it off until the block ends."""
        while not self._open.is_set():
            await self._open.wait()
        self._busy += 1
        self._idle.clear()
        try:
            yield
        finally:
            self._busy -= 1
            if self._busy == 0:
                self._idle.set()

    @contextlib.asynccontextmanager
    async def closed(self) -> AsyncIterator[None]:
        """Hold new passers and wait for the current ones; reopen when the block ends."""
        self._open.clear()
        try:
            await self._idle.wait()
            yield
        finally:
            self._open.set()


def cannot_fork(kind: str, who: str, why: str) -> SandboxForkError:
    """The one error for a sandbox that cannot fork: names the sandbox and says why."""
    return SandboxForkError(f"sandbox {kind!r} ({who}) cannot fork: {why}")


def fork_id(parent_id: str, n: int) -> str:
    """The default rollout id of a parent's ``n``-th child."""
    return f"{parent_id or 'sandbox'}.fork{n}"


def fork_root(parent_root: Path, root: Path | str | None, *, kind: str, who: str) -> Path:
    """Make the child's root directory; with ``root`` None, a new one beside the parent's.

    A given ``root`` must not exist yet, or be an empty directory. The
    directory is private (``0700``), as a sandbox's root is.
    """
    if root is None:
        return Path(tempfile.mkdtemp(prefix=f"{parent_root.name}.fork-", dir=parent_root.parent))
    path = Path(root).absolute()
    if path.exists() and (not path.is_dir() or any(path.iterdir())):
        raise cannot_fork(
            kind, who, f"the child's root {path} exists and is not an empty directory"
        )
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    path.chmod(0o700)
    return path
