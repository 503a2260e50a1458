"""Helpers for the mini-swe-agent tests: looking for processes and for leaked secrets."""

from __future__ import annotations

import os
from pathlib import Path


def processes_with(marker: str) -> list[tuple[int, str]]:
    """Live processes whose command line contains ``marker`` (zombies have none)."""
    found: list[tuple[int, str]] = []
    me = os.getpid()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if marker in cmdline:
            found.append((int(entry), cmdline))
    return found


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
