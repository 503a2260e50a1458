"""Helpers for the Claude Code tests: processes inside a sandbox, leaked secrets."""

from __future__ import annotations

from pathlib import Path
from typing import Any

_LIST = "for p in /proc/[0-9]*; do tr '\\000' ' ' < $p/cmdline 2>/dev/null; echo; done"


async def sandbox_processes(sandbox: Any, needle: str) -> list[str]:
    """Command lines of the processes in ``sandbox``'s own pid namespace that contain
    ``needle`` (the listing command itself excluded)."""
    listing = await sandbox.exec(["/bin/sh", "-c", _LIST], timeout=60)
    return [line for line in listing.stdout.splitlines() if needle in line and "/proc/" not in line]


def files_containing(root: Path, needle: str) -> list[Path]:
    """Every regular file under ``root`` whose bytes contain ``needle``."""
    hits: list[Path] = []
    data = needle.encode()
    for path in root.rglob("*"):
        try:
            if path.is_file() and not path.is_symlink() and data in path.read_bytes():
                hits.append(path)
        except OSError:
            continue
    return hits


def host_processes_with(marker: str) -> list[str]:
    """Host processes whose command line contains ``marker``."""
    import os

    found: list[str] = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if marker in cmdline:
            found.append(cmdline)
    return found
