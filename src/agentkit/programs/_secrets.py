"""Keeping the API key out of what an agent program leaves: text it prints, files it writes."""

from __future__ import annotations

import asyncio
import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agentkit._events import EventRecorder
    from agentkit._sandbox import Sandbox

__all__ = ["MIN_SECRET_LEN", "REDACTED", "redactor", "scrub_sandbox_dir", "scrub_tree"]

#: What a secret is replaced with in recorded text.
REDACTED = "[redacted]"
#: Secrets shorter than this are not searched for (a one-letter test key would
#: otherwise blank out every occurrence of that letter).
MIN_SECRET_LEN = 6


def redactor(secret: str | None) -> Callable[[str], str]:
    """A function replacing ``secret`` with ``[redacted]`` in a text (identity without one)."""
    if not secret or len(secret) < MIN_SECRET_LEN:
        return lambda text: text
    return lambda text: text.replace(secret, REDACTED)


def scrub_tree(root: Path, secret: bytes) -> int:
    """Overwrite ``secret`` (with ``*`` of the same length, so file layouts hold) in
    every regular file under ``root``, never following a link the agent may have
    planted. Returns how many files changed."""
    mask = b"*" * len(secret)
    changed = 0
    for _, _, files, dir_fd in os.fwalk(root, follow_symlinks=False):
        for name in files:
            flags = os.O_RDWR | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
            try:
                fd = os.open(name, flags, dir_fd=dir_fd)
            except OSError:
                continue  # a link, a FIFO nobody reads, gone
            with os.fdopen(fd, "r+b") as f:
                if not stat.S_ISREG(os.fstat(fd).st_mode):
                    continue
                data = f.read()
                if secret in data:
                    f.seek(0)
                    f.write(data.replace(secret, mask))
                    changed += 1
    return changed


async def scrub_sandbox_dir(
    sandbox: Sandbox, path: str, secret: str | None, recorder: EventRecorder | None = None
) -> int:
    """Remove ``secret`` from the files under the in-sandbox directory ``path``
    (a program's home under ``/logs/agent``, kept with a failed rollout).

    Done where the host can reach the sandbox's files (its ``host_path``: the
    local, host and docker sandboxes for ``/logs``); never fails the run.
    Returns how many files changed.
    """
    host_path = getattr(sandbox, "host_path", None)
    if not secret or len(secret) < MIN_SECRET_LEN or not callable(host_path):
        return 0
    try:
        root = Path(host_path(path))
        if not root.is_dir() or root.is_symlink():
            return 0
        changed = await asyncio.to_thread(scrub_tree, root, secret.encode())
    except Exception as exc:  # never fail a finished run over the clean-up
        if recorder is not None:
            await recorder.emit(
                "log",
                level="warning",
                message=f"could not check {path} for the API key: {type(exc).__name__}",
            )
        return 0
    if changed and recorder is not None:
        await recorder.emit(
            "log", level="info", message=f"removed the API key from {changed} file(s) under {path}"
        )
    return changed
