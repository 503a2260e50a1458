"""Keeping the run's secrets (its API key, the values of secret-looking request
headers) out of what an agent program leaves: text it prints, files it writes."""

from __future__ import annotations

import asyncio
import os
import stat
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from agentkit._context import SECRET_HEADER_WORDS
from agentkit._redact import MARKER

if TYPE_CHECKING:
    from agentkit._context import RunContext
    from agentkit._events import EventRecorder
    from agentkit._sandbox import Sandbox

__all__ = [
    "MIN_SECRET_LEN",
    "REDACTED",
    "Secrets",
    "redactor",
    "run_secrets",
    "scrub_sandbox_dir",
    "scrub_tree",
]

#: What a secret is replaced with in recorded text: the run-wide marker
#: (:data:`agentkit._redact.MARKER`), so a secret hidden by a harness and one
#: hidden by the run's redactor look the same.
REDACTED = MARKER
#: Secrets shorter than this are not searched for (a one-letter test key would
#: otherwise blank out every occurrence of that letter).
MIN_SECRET_LEN = 6


#: One secret, several, or none.
Secrets = str | Iterable[str | None] | None


def _secrets(secret: Secrets) -> list[str]:
    """The secrets worth looking for, longest first (one containing another goes whole)."""
    values = [secret] if secret is None or isinstance(secret, str) else list(secret)
    found = {v for v in values if v and len(v) >= MIN_SECRET_LEN}
    return sorted(found, key=lambda v: (-len(v), v))


def run_secrets(context: RunContext) -> list[str]:
    """What a program run must keep out of what it records and leaves: the run's API
    key and the values of its request headers whose names look secret."""
    headers = [
        value
        for name, value in context.headers.items()
        if any(word in name.lower() for word in SECRET_HEADER_WORDS)
    ]
    return _secrets([context.resolved_api_key, *headers])


def redactor(secret: Secrets) -> Callable[[str], str]:
    """A function replacing each secret with :data:`REDACTED` (``***``) in a text
    (identity without one)."""
    secrets = _secrets(secret)
    if not secrets:
        return lambda text: text

    def redact(text: str) -> str:
        for value in secrets:
            text = text.replace(value, REDACTED)
        return text

    return redact


def scrub_tree(root: Path | str, secret: bytes, *, dir_fd: int | None = None) -> int:
    """Overwrite ``secret`` (with ``*`` of the same length, so file layouts hold) in
    every regular file under ``root``, never following a link the agent may have
    planted. Returns how many files changed.

    With ``dir_fd`` (an open directory), ``root`` is relative to it: ``"."`` is
    that directory, however its path has been replaced since it was opened."""
    mask = b"*" * len(secret)
    changed = 0
    for _, _, files, walk_fd in os.fwalk(root, follow_symlinks=False, dir_fd=dir_fd):
        for name in files:
            flags = os.O_RDWR | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
            try:
                fd = os.open(name, flags, dir_fd=walk_fd)
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
    sandbox: Sandbox, path: str, secret: Secrets, recorder: EventRecorder | None = None
) -> int:
    """Remove the secrets (``secret``: one, several, see :func:`run_secrets`) from
    the files under the in-sandbox directory ``path`` (a program's home under
    ``/logs/agent``, kept with a failed rollout).

    Done where the host can reach the sandbox's files (its ``host_path``: the
    local, host and docker sandboxes for ``/logs``); never fails the run.
    Returns how many files changed (a file counted once per secret it held).
    """
    host_path = getattr(sandbox, "host_path", None)
    secrets = _secrets(secret)
    if not secrets or not callable(host_path):
        return 0
    try:
        root = Path(host_path(path))
        if not root.is_dir() or root.is_symlink():
            return 0
        changed = 0
        for value in secrets:
            changed += await asyncio.to_thread(scrub_tree, root, value.encode())
    except Exception as exc:  # never fail a finished run over the clean-up
        if recorder is not None:
            await recorder.emit(
                "log",
                level="warning",
                message=f"could not check {path} for the run's secrets: {type(exc).__name__}",
            )
        return 0
    if changed and recorder is not None:
        await recorder.emit(
            "log",
            level="info",
            message=f"removed the run's secrets from {changed} file(s) under {path}",
        )
    return changed
