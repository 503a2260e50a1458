"""Reading one rollout's model calls: ``calls/<rollout_id>.jsonl``, checked to be its own.

The calls file's lines are parsed by :func:`agentkit._calls.read_calls_file` (the one
parser of the format: every field checked, a prompt's ids stored by reference rebuilt).
Here the file is found (the name the rollout's record gives, which must stay inside the
run, or ``calls/<rollout_id>.jsonl``; read by :func:`agentkit.rundir._confined.read_in_run`,
which follows no link out of the run) and its calls are checked to be the rollout's own:
each names the rollout, and the run that recorded it (:func:`agentkit._calls.foreign_calls`).

A call the proxy translated carries ``chat_answer``, the chat message its answer stands
for, since the proxy records it; for the calls of files written before, it is worked
out here as the proxy does, from the answer as recorded
(:func:`agentkit.proxy.translated_answer`), so that every reader sees it.
"""

from __future__ import annotations

from pathlib import Path

import attrs

from agentkit._calls import ModelCall, foreign_calls, parse_calls
from agentkit.rundir._confined import LeadsOutside, read_in_run
from agentkit.rundir._layout import CALLS_DIR, ROLLOUTS, RunDirError

__all__ = ["ForeignCallsError", "read_rollout_calls"]


class ForeignCallsError(RunDirError):
    """A rollout's calls file holds calls of another rollout or of another run."""


def read_rollout_calls(
    run_dir: Path,
    rollout_id: str,
    *,
    run_id: str | None,
    calls_file: str | None = None,
    references: dict[int, tuple[int, int]] | None = None,
) -> list[ModelCall] | None:
    """The model calls of rollout ``rollout_id`` (in order of ``index``), or None when it
    has no calls file.

    ``calls_file`` is the file the rollout's record names (relative to the run), else
    ``calls/<rollout_id>.jsonl``; a name that leads outside the run directory is a
    :class:`~agentkit.rundir.RunDirError`. ``run_id`` is the run's (its
    manifest's; None for a run made before runs had ids). A malformed file is a
    :class:`~agentkit.rundir.RunDirError` naming the file, the line and the field; a
    call of another rollout, or one another run recorded, a :class:`ForeignCallsError`
    naming the file and the call. ``references``: see :func:`agentkit._calls.parse_calls`.
    """
    if calls_file is not None and not isinstance(calls_file, str):
        raise RunDirError(
            f"{run_dir / ROLLOUTS}: rollout {rollout_id}: calls_file: expected a path "
            f"relative to the run (calls/<rollout_id>.jsonl), got {type(calls_file).__name__}"
        )
    name = calls_file or f"{CALLS_DIR}/{rollout_id}.jsonl"
    path = run_dir / name
    try:
        data = read_in_run(run_dir, name)
    except LeadsOutside:
        raise RunDirError(
            f"{run_dir / ROLLOUTS}: rollout {rollout_id}: calls_file {name!r} "
            "is outside the run directory; expected calls/<rollout_id>.jsonl"
        ) from None
    except OSError as exc:
        raise RunDirError(f"{path}: cannot read: {exc.strerror or exc}") from None
    calls = None if data is None else parse_calls(data, str(path), references=references)
    if calls is not None:
        why = foreign_calls(calls, rollout_id=rollout_id, run_id=run_id)
        if why is not None:
            raise ForeignCallsError(f"{path}: {why}")
        calls = _with_chat_answers(calls)
    return calls


def _with_chat_answers(calls: list[ModelCall]) -> list[ModelCall]:
    """``calls``, each translated call without a ``chat_answer`` (a file written before
    the proxy recorded it) given the one its translation says."""
    if all(c.upstream_protocol is None or c.chat_answer is not None for c in calls):
        return calls
    # deferred: agentkit.proxy loads its server and protocols; only calls files written before the
    # proxy recorded chat_answer (and answers with none) need it
    from agentkit.proxy import translated_answer

    return [
        c
        if c.upstream_protocol is None or c.chat_answer is not None
        else attrs.evolve(c, chat_answer=translated_answer(c))
        for c in calls
    ]
