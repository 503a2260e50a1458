"""Reading a rollout's model calls (``calls/<rollout_id>.jsonl``) for training export.

A thin adapter over the run directory's reader,
:func:`agentkit.rundir.read_rollout_calls` (which :meth:`agentkit.runs.Run.calls`
uses too): a malformed file an :class:`~agentkit.training.ExportError` naming the
file, the line and the field, and a file that is not the rollout's own (another
rollout's calls, or another run's) a :class:`ForeignCallsError`.
"""

from __future__ import annotations

from pathlib import Path

from agentkit._calls import ModelCall
from agentkit.rundir import ForeignCallsError as ForeignCalls
from agentkit.rundir import RunDirError, read_rollout_calls
from agentkit.training._errors import ExportError

__all__ = ["ForeignCallsError", "read_calls"]


class ForeignCallsError(ExportError):
    """A rollout's calls file holds calls of another rollout or of another run."""


def read_calls(
    run_dir: Path,
    rollout_id: str,
    *,
    run_id: str | None,
    calls_file: str | None = None,
    references: dict[int, tuple[int, int]] | None = None,
) -> list[ModelCall] | None:
    """A rollout's model calls (``calls/<rollout_id>.jsonl``), read by the run
    directory's reader (:func:`agentkit.rundir.read_rollout_calls`); None when it has
    no calls file. A malformed file is an :class:`ExportError` naming the file, the
    line and the field; a call of another rollout, or one another run recorded (its
    ``run_id`` is not ``run_id``, the run's: :func:`agentkit.rundir.run_id_of`), a
    :class:`ForeignCallsError` naming the file and the call. ``calls_file``: the file the
    rollout's record names (kept inside the run; default ``calls/<rollout_id>.jsonl``).
    ``references``: see ``agentkit._calls.parse_calls``."""
    try:
        return read_rollout_calls(
            run_dir, rollout_id, run_id=run_id, calls_file=calls_file, references=references
        )
    except ForeignCalls as exc:
        raise ForeignCallsError(str(exc)) from None
    except RunDirError as exc:
        raise ExportError(str(exc)) from None
