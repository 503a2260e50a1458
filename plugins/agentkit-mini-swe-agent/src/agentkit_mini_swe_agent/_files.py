"""Reading mini's files in the sandbox while it runs, and keeping the API key out of them
(:func:`agentkit.programs.scrub_tree`).

The agent's commands run as the same user as mini and may replace its files
with links, so files are read through a directory descriptor opened before
mini starts (``O_NOFOLLOW``, regular files only), never by path on the host.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from agentkit.programs import MIN_SECRET_LEN, scrub_tree

if TYPE_CHECKING:
    from agentkit import Sandbox

__all__ = ["SandboxDir"]

#: A trajectory larger than this is not read live (only at the end, by download).
_MAX_LIVE_BYTES = 256 * 1024 * 1024


class SandboxDir:
    """One directory of the sandbox, read from the host when the sandbox allows it.

    With ``host_path`` (local, host, and docker's ``/logs`` directories) the
    directory is opened once; otherwise files are downloaded.
    """

    def __init__(self, sandbox: Sandbox, path: str) -> None:
        self.sandbox = sandbox
        self.path = path.rstrip("/")
        self._fd: int | None = None
        self._last: tuple[int, int] | None = None

    def open(self) -> None:
        """Open the directory on the host (it must exist in the sandbox)."""
        host_path = getattr(self.sandbox, "host_path", None)
        if not callable(host_path):
            return
        try:
            host = Path(host_path(self.path))
            self._fd = os.open(host, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except (OSError, ValueError, Exception):
            self._fd = None

    def close(self) -> None:
        """Release the directory."""
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = None

    @property
    def on_host(self) -> bool:
        """Whether files are read straight from the host (cheap to poll)."""
        return self._fd is not None

    def read_if_changed(self, name: str) -> bytes | None:
        """The file's bytes when it changed since the last call (host only), else None."""
        if self._fd is None:
            return None
        try:
            fd = os.open(
                name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=self._fd
            )
        except OSError:
            return None
        with os.fdopen(fd, "rb") as f:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode) or info.st_size > _MAX_LIVE_BYTES:
                return None
            mark = (info.st_mtime_ns, info.st_size)
            if mark == self._last:
                return None
            data = f.read(_MAX_LIVE_BYTES)
        self._last = mark
        return data

    async def read(self, name: str) -> bytes | None:
        """The file's bytes now (None when missing)."""
        if self._fd is not None:
            self._last = None
            return self.read_if_changed(name)
        with tempfile.TemporaryDirectory(prefix="agentkit-mini-") as tmp:
            target = Path(tmp) / "file"
            try:
                await self.sandbox.download(f"{self.path}/{name}", target)
                return target.read_bytes() if target.is_file() else None
            except Exception:
                return None

    def scrub(self, secret: str) -> int:
        """Overwrite ``secret`` with ``*`` (same length) in every regular file below the
        directory, never following links; returns how many files changed (host only)."""
        if self._fd is None or len(secret) < MIN_SECRET_LEN:
            return 0
        return scrub_tree(".", secret.encode(), dir_fd=self._fd)
