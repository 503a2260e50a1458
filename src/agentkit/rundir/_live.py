"""Runs in progress: whether a process holds a run's lock, and its ``live/`` event files.

Nothing here writes or locks anything: whether the lock is held is read from
``/proc/locks`` (Linux), so looking at a run can never make a starting
``agentkit run --resume`` find its directory busy. Where ``/proc/locks`` does
not exist the files' ages decide (see :func:`looks_running`).
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path
from typing import Any

from agentkit.rundir._layout import LIVE_DIR, MANIFEST, ROLLOUTS
from agentkit.rundir._types import LiveRollout, Step

__all__ = ["live_file", "lock_held", "looks_running", "read_live", "scan_live"]

#: A run whose files changed this recently, with no summary after them, is
#: taken to be running where the lock cannot be read (no /proc/locks).
RECENT_S = 600.0

_SAFE_ID = re.compile(r"^[A-Za-z0-9._-]+$")
_RETRY = b'"type":"rollout.retry"'


def lock_held(lock: Path) -> bool | None:
    """True when some process holds an flock on ``lock``; None when that cannot be known."""
    try:
        st = lock.stat()
    except OSError:
        return False
    try:
        with open("/proc/locks", encoding="ascii", errors="replace") as fh:
            lines = fh.read().splitlines()
    except OSError:
        return None
    exact = f" {os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino} "
    # on overlay file systems the lock names the upper layer's device: match the inode
    loose = re.compile(rf" [0-9a-f]+:[0-9a-f]+:{st.st_ino} ")
    flocks = [line + " " for line in lines if " FLOCK " in line]
    if any(exact in line for line in flocks):
        return True
    return any(loose.search(line) for line in flocks)


def looks_running(run_dir: Path, summary: Path) -> bool:
    """Without /proc/locks: files changed in the last ``RECENT_S`` and no summary since."""
    newest = 0.0
    for path in (run_dir / ROLLOUTS, run_dir / MANIFEST, run_dir / LIVE_DIR):
        try:
            newest = max(newest, path.stat().st_mtime)
        except OSError:
            continue
    try:
        if summary.stat().st_mtime >= newest:
            return False
    except OSError:
        pass
    return time.time() - newest < RECENT_S


def live_file(run_dir: Path, rollout_id: str) -> Path | None:
    """``live/<rollout_id>.jsonl``; None for an id that is not a plain file name."""
    if not _SAFE_ID.match(rollout_id) or rollout_id in (".", ".."):
        return None
    return run_dir / LIVE_DIR / f"{rollout_id}.jsonl"


def scan_live(run_dir: Path) -> list[LiveRollout]:
    """Every rollout with a live file, oldest first (only its first line is parsed)."""
    try:
        names = [n for n in os.listdir(run_dir / LIVE_DIR) if n.endswith(".jsonl")]
    except OSError:
        return []
    out = []
    for name in names:
        try:
            with open(run_dir / LIVE_DIR / name, "rb") as fh:
                data = fh.read()
        except OSError:  # it finished while we looked
            continue
        first = data.split(b"\n", 1)[0]
        try:
            head: dict[str, Any] = json.loads(first)
        except ValueError:  # created, its first line not written yet
            continue
        if not isinstance(head, dict) or head.get("type") != "rollout.start":
            continue
        lines = data.count(b"\n")
        retries = data.count(_RETRY)
        out.append(
            LiveRollout(
                rollout_id=str(head.get("rollout_id") or name[: -len(".jsonl")]),
                task_id=str(head.get("task_id", "")),
                rollout_index=int(head.get("rollout_index") or 0),
                group=int(head.get("group") or 0),
                attempt=1 + retries,
                started_at=_float(head.get("started_at")),
                events=max(0, lines - 1 - retries),
            )
        )
    out.sort(key=lambda r: (r.started_at or 0.0, r.rollout_id))
    return out


def read_live(path: Path, offset: int) -> tuple[list[Step], int]:
    """The complete lines of a live file after byte ``offset``, and where they end.

    A file shorter than ``offset`` was started again (a resumed run): it is
    read from the beginning. A missing file gives no steps.
    """
    try:
        with open(path, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            if size < offset:
                offset = 0
            fh.seek(offset)
            data = fh.read()
    except OSError:
        return [], offset
    end = data.rfind(b"\n") + 1
    steps = []
    for line in data[:end].split(b"\n"):
        if not line.strip():
            continue
        try:
            e = json.loads(line)
        except ValueError:
            continue
        if not isinstance(e, dict):
            continue
        kind = str(e.get("type", ""))
        if kind in ("rollout.start", "rollout.retry"):
            stamp = e.get("started_at") if kind == "rollout.start" else e.get("timestamp")
            data_fields = {k: v for k, v in e.items() if k not in ("type", "timestamp")}
            steps.append(Step(seq=-1, type=kind, timestamp=_float(stamp) or 0.0, data=data_fields))
            continue
        steps.append(
            Step(
                seq=int(e.get("seq") or 0),
                type=kind,
                timestamp=_float(e.get("timestamp")) or 0.0,
                data=dict(e.get("data") or {}),
            )
        )
    return steps, offset + end


def _float(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) else None
