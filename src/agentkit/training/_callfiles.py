"""Reading a rollout's model calls (``calls/<rollout_id>.jsonl``) for training export.

A thin adapter over the run directory's one parser,
:func:`agentkit._calls.read_calls_file` (which :meth:`agentkit.runs.Run.calls`
uses too): the full ``ModelCall`` records, a malformed file an
:class:`~agentkit.training.ExportError` naming the file, the line and the field,
and a file that is not the rollout's own (another rollout's calls, or another
run's: :func:`agentkit._calls.foreign_calls`) a :class:`ForeignCallsError`.
"""

from __future__ import annotations

import json
from pathlib import Path

from agentkit._calls import ModelCall, foreign_calls, read_calls_file
from agentkit.rundir import CALLS_DIR, MANIFEST, RunDirError
from agentkit.training._errors import ExportError

__all__ = ["ForeignCallsError", "read_calls", "run_id_of"]


class ForeignCallsError(ExportError):
    """A rollout's calls file holds calls of another rollout or of another run."""


def run_id_of(run_dir: Path) -> str | None:
    """The ``run_id`` of the run's manifest.json (None: a run made before runs had ids,
    or no manifest to read)."""
    try:
        manifest = json.loads((run_dir / MANIFEST).read_bytes())
    except (OSError, ValueError):
        return None
    run_id = manifest.get("run_id") if isinstance(manifest, dict) else None
    return run_id if isinstance(run_id, str) else None


def read_calls(
    run_dir: Path,
    rollout_id: str,
    *,
    run_id: str | None,
    references: dict[int, tuple[int, int]] | None = None,
) -> list[ModelCall] | None:
    """A rollout's model calls (``calls/<rollout_id>.jsonl``), read by the run
    directory's one parser (:func:`agentkit.runs.Run.calls` uses it too); None
    when it has no calls file. A malformed file is an :class:`ExportError`
    naming the file, the line and the field; a call of another rollout, or one
    another run recorded (its ``run_id`` is not ``run_id``, the run's:
    :func:`run_id_of`), a :class:`ForeignCallsError` naming the file and the call.
    ``references``: see ``agentkit._calls.parse_calls``."""
    path = run_dir / CALLS_DIR / f"{rollout_id}.jsonl"
    try:
        calls = read_calls_file(path, references=references)
    except RunDirError as exc:
        raise ExportError(str(exc)) from None
    if calls is not None:
        why = foreign_calls(calls, rollout_id=rollout_id, run_id=run_id)
        if why is not None:
            raise ForeignCallsError(f"{path}: {why}")
    return calls
