"""Reading a rollout's model calls (``calls/<rollout_id>.jsonl``) for training export.

A thin adapter over the run directory's one parser,
:func:`agentkit._calls.read_calls_file` (which :meth:`agentkit.runs.Run.calls`
uses too): the full ``ModelCall`` records, a malformed file an
:class:`~agentkit.training.ExportError` naming the file, the line and the field.
"""

from __future__ import annotations

from pathlib import Path

from agentkit._calls import ModelCall, read_calls_file
from agentkit._rundir import CALLS_DIR, RunDirError
from agentkit.training._errors import ExportError

__all__ = ["read_calls"]


def read_calls(
    run_dir: Path, rollout_id: str, *, references: dict[int, tuple[int, int]] | None = None
) -> list[ModelCall] | None:
    """A rollout's model calls (``calls/<rollout_id>.jsonl``), read by the run
    directory's one parser (:func:`agentkit.runs.Run.calls` uses it too); None
    when it has no calls file. A malformed file is an :class:`ExportError`
    naming the file, the line and the field. ``references``: see
    ``agentkit._calls.parse_calls``."""
    try:
        path = run_dir / CALLS_DIR / f"{rollout_id}.jsonl"
        return read_calls_file(path, references=references)
    except RunDirError as exc:
        raise ExportError(str(exc)) from None
