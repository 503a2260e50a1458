"""Reading the append-only files of a run whole: ``rollouts.jsonl`` and ``groups.jsonl``.

A process killed mid-write leaves at most one half-written last line; it is
dropped here (and cut off the file when ``repair``: resume does, holding the
run's lock). Corruption anywhere else is an error naming the line.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from agentkit.rundir._layout import GROUPS, ROLLOUTS, RunDirError
from agentkit.rundir._records import RolloutRecord

__all__ = ["load_groups", "load_rollouts"]


def load_rollouts(
    run_dir: Path, *, repair: bool, corrupt: list[str] | None = None
) -> tuple[list[RolloutRecord], str | None]:
    """Read ``rollouts.jsonl`` whole; a half-written last line is dropped (and cut off if
    ``repair``).

    Returns the records (the last line of each rollout id: a rollout run
    again by ``--resume``, after an infrastructure failure or with
    ``--retry-errors``, supersedes its earlier line), in the order their
    ids first appear, and a note about what was repaired, if anything.
    Corruption anywhere else is an error naming the line, unless ``corrupt`` is given
    (a reader that skips what it cannot read, as training export does): then each
    corrupt line is left out and its message appended to ``corrupt``.
    """
    return _load_lines(Path(run_dir) / ROLLOUTS, repair=repair, corrupt=corrupt)


def load_groups(run_dir: Path, *, repair: bool) -> dict[str, dict[str, Any]]:
    """The last ``groups.jsonl`` line of each task (a torn or corrupt last line is cut).

    A task has several lines when its group changed after it was first
    complete (a rollout run again, more rollouts per task): the last wins.
    """
    path = Path(run_dir) / GROUPS
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return {}
    cut = _torn_tail(data)
    lines = data[:cut].split(b"\n")[:-1] if cut else []
    found: dict[str, dict[str, Any]] = {}
    for number, raw in enumerate(lines, start=1):
        try:
            line = json.loads(raw)
            found[str(line["task_id"])] = line
        except (ValueError, KeyError, TypeError):
            if number != len(lines):
                raise RunDirError(f"{path}: line {number} is corrupt; fix or remove it") from None
            cut -= len(raw) + 1
    if repair and cut != len(data):
        with open(path, "r+b") as fh:
            fh.truncate(cut)
            fh.flush()
            os.fsync(fh.fileno())
    return found


def _torn_tail(data: bytes) -> int:
    """Where the complete lines of ``data`` end (a missing final newline means a torn write)."""
    return len(data) if not data or data.endswith(b"\n") else data.rfind(b"\n") + 1


def _load_lines(
    path: Path, *, repair: bool, corrupt: list[str] | None
) -> tuple[list[RolloutRecord], str | None]:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return [], None
    note = None
    cut = len(data)
    if data and not data.endswith(b"\n"):
        cut = data.rfind(b"\n") + 1
        note = (
            f"{path.name}: dropped a half-written last line ({len(data) - cut} bytes) "
            "left by an interrupted run"
        )
    lines = data[:cut].split(b"\n")[:-1] if cut else []
    records: dict[str, RolloutRecord] = {}
    for number, raw in enumerate(lines, start=1):
        try:
            obj = json.loads(raw)
            if not isinstance(obj, dict) or obj.get("type") != "rollout":
                raise ValueError("not a rollout record")
            record = RolloutRecord.from_json(obj)
        except (ValueError, TypeError) as exc:
            if number == len(lines) and cut == len(data):
                # A complete but unparsable last line: also a torn write.
                cut = sum(len(x) + 1 for x in lines[:-1])
                note = f"{path.name}: dropped a corrupt last line ({exc})"
                break
            if corrupt is not None:
                corrupt.append(
                    f"{path}: line {number} is corrupt ({exc}); expected one rollout record "
                    "(a JSON object) per line"
                )
                continue
            raise RunDirError(
                f"{path}: line {number} is corrupt ({exc}); it is not the last line, so this "
                "is not an interrupted write: fix or remove that line, then resume"
            ) from None
        records[record.rollout_id] = record  # a later line supersedes an earlier one
    if note and repair:
        with open(path, "r+b") as fh:
            fh.truncate(cut)
            fh.flush()
            os.fsync(fh.fileno())
    return list(records.values()), note
