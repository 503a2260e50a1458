"""Reading a run directory into training records, in one pass over its files.

A rollout whose model calls were recorded gives one record per training sequence
of its calls; a branching run's leaf says where its shared prefix ends. The run's
files are read through :mod:`agentkit.rundir`, each once.
"""

from __future__ import annotations

import contextlib
import gc
import os
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, Generic, TypeVar

import attrs

from agentkit._calls import ModelCall
from agentkit.rundir import ROLLOUTS, RolloutRecord, load_rollouts, run_id_of
from agentkit.training._callfiles import ForeignCallsError, read_calls
from agentkit.training._errors import ExportError
from agentkit.training._left_out import LeftOut
from agentkit.training._prefixes import Prefixes
from agentkit.training._records import TrainingRecord, records_of, with_sequences
from agentkit.training._sequences import RolloutTokens, _sequences_of, sequences_of
from agentkit.training._tokenizer import load_tokenizer, retokenized

__all__ = [
    "RunRead",
    "damaged",
    "from_run_dir",
    "gc_paused",
    "read_run",
    "rollout_tokens",
    "token_fidelity",
]

K = TypeVar("K")


def _run_path(run_dir: str | os.PathLike[str]) -> Path:
    path = Path(run_dir)
    if not (path / ROLLOUTS).is_file():
        raise ExportError(
            f"{path / ROLLOUTS}: no such file; expected a run directory written by "
            "'agentkit run' or AgentEnv.evaluate(run_dir=...)"
        )
    return path


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while records are built and written.

    Records and calls hold no reference cycles (reference counting frees them),
    but each of their token lists is a container the collector would walk again
    at every collection while millions of ids are alive: a fifth of an export's
    time (bench/export.py). Restored on the way out, also on an error.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def from_run_dir(
    run_dir: str | os.PathLike[str],
    *,
    tokenizer: str | os.PathLike[str] | None = None,
    skip_damaged: bool = False,
) -> list[TrainingRecord]:
    """Training records for every rollout stored in ``RUN_DIR/rollouts.jsonl``.

    A rollout whose model calls were recorded (``calls/<rollout_id>.jsonl``)
    gives one record per training sequence of its calls (see "Sequences" in
    ``docs/training-data.md``); any other rollout one record, with the token
    ids its harness kept in ``raw``. A calls file that is not the rollout's own
    (a call of another rollout, or one another run recorded: its ``run_id`` is not
    the manifest's) is not used: the rollout gives one record without token ids,
    incomplete, its ``token_issues`` naming the file and the call. Each record of a
    branching run's leaf says where its shared prefix ends (``prefix_tokens``,
    counted per sequence; ``docs/branching.md``). A half-written last line (an
    interrupted run) is skipped; nothing is modified. Advantages are those stored;
    :func:`~agentkit.training.prepare` recomputes them.

    ``tokenizer``: the path of a local Hugging Face tokenizer that gives token ids
    to the chat calls the server returned none for (``pip install
    'agentkit[tokenizer]'``); their sequences are marked ``token_source:
    "tokenizer"``. Without it nothing is re-tokenized.

    A damaged run directory (a calls file that cannot be read, is cut short, leads
    outside the run or is missing; a corrupt line of ``rollouts.jsonl``; malformed token
    fields in a rollout's ``raw``) is an :class:`~agentkit.training.ExportError` naming
    every such file and why; with ``skip_damaged`` those rollouts are left out and the
    others returned (:func:`~agentkit.training.export_run` reports what it left out).
    """
    read: RunRead[None] = read_run(run_dir, tokenizer=tokenizer)
    if (read.left_out or read.notes) and not skip_damaged:
        raise ExportError(damaged(run_dir, read))
    return read.records


def damaged(run_dir: str | os.PathLike[str], read: RunRead[Any], limit: int = 10) -> str:
    """The error of a run directory with damaged files (``read.left_out`` and
    ``read.notes``): one line for the run, then one for each (at most ``limit``)."""
    reasons = [item.reason for item in read.left_out] + read.notes
    lines = [
        f"{len(read.left_out)} rollout(s) of {os.fspath(run_dir)} cannot be read "
        "(damaged files, or files that lead outside the run):"
    ]
    lines += [f"  {reason}" for reason in reasons[:limit]]
    if len(reasons) > limit:
        lines.append(f"  ... and {len(reasons) - limit} more")
    return "\n".join(lines)


@attrs.frozen
class RunRead(Generic[K]):
    """A run directory read once for an export: its training records, what a writer
    keeps of each rollout's calls (:attr:`~agentkit.training._formats.Format.keep`), by
    rollout id, and the rollouts left out because their files could not be read."""

    records: list[TrainingRecord]
    kept: dict[str, K] = attrs.field(factory=dict)
    left_out: list[LeftOut] = attrs.field(factory=list)
    #: Damage that left nothing out: a branching run's prefix whose calls file could not
    #: be read (its leaves are exported without ``prefix_tokens``), one line each.
    notes: list[str] = attrs.field(factory=list)


def read_run(
    run_dir: str | os.PathLike[str],
    *,
    tokenizer: str | os.PathLike[str] | None = None,
    keep: Callable[[list[ModelCall]], K] | None = None,
) -> RunRead[K]:
    """:func:`from_run_dir`, reading each of the run's files once: the manifest (the run's
    id), ``rollouts.jsonl``, and each calls file (a leaf's as its records are built, a
    branching run's prefix's when a leaf is counted against it). ``keep`` takes what a
    writer needs of a rollout's calls (those its sequences were built from) as they
    are read."""
    path = _run_path(run_dir)
    tok = load_tokenizer(tokenizer) if tokenizer is not None else None
    corrupt: list[str] = []
    rollouts, _note = load_rollouts(path, repair=False, corrupt=corrupt)
    left_out = [LeftOut(None, why) for why in corrupt]
    run_id = run_id_of(path)
    stored = {r.rollout_id: r for r in rollouts}
    out: list[TrainingRecord] = []
    kept: dict[str, K] = {}
    prefixes = Prefixes(path, rollouts, run_id=run_id)
    with gc_paused():
        for record in records_of(rollouts, left_out=left_out, source=str(path / ROLLOUTS)):
            references: dict[int, tuple[int, int]] = {}
            try:
                calls = _calls_of(path, stored[record.rollout_id], run_id, references)
            except ForeignCallsError as exc:
                out.append(_without_calls(record, str(exc)))
                continue
            except ExportError as exc:  # a damaged or hostile file: this rollout only
                left_out.append(LeftOut(record.rollout_id, str(exc)))
                continue
            if calls is None:
                records = [record]
            elif tok is not None and not all(c.has_tokens for c in calls):
                calls = retokenized(calls, tok, os.fspath(tokenizer or ""))
                records = with_sequences(record, sequences_of(calls))
            else:
                records = with_sequences(record, _sequences_of(calls, references))
            if keep is not None and calls is not None:
                kept[record.rollout_id] = keep(calls)
            out.extend(records if record.prefix_id is None else prefixes.count(records))
    return RunRead(out, kept, left_out, prefixes.unread)


def _calls_of(
    run_dir: Path,
    rollout: RolloutRecord,
    run_id: str | None,
    references: dict[int, tuple[int, int]],
) -> list[ModelCall] | None:
    """The rollout's calls, from the file its record names (``calls_file``; else
    ``calls/<rollout_id>.jsonl``, a run made before records named it); None when it has
    none. A file the record names that is not there is an :class:`ExportError`."""
    calls = read_calls(
        run_dir,
        rollout.rollout_id,
        run_id=run_id,
        calls_file=rollout.calls_file,
        references=references,
    )
    if calls is None and rollout.calls_file is not None:
        raise ExportError(
            f"{run_dir / str(rollout.calls_file)}: no such file; expected the rollout's "
            f"model calls, which its line in {run_dir / ROLLOUTS} names (calls_file)"
        )
    return calls


def _without_calls(record: TrainingRecord, why: str) -> TrainingRecord:
    """The record of a rollout whose calls file is not its own: no token ids (neither the
    file's nor any in ``raw``), incomplete, its issue saying why."""
    return record.without_tokens([{"call": None, "reason": f"{why}; its calls are left out"}])


def rollout_tokens(run_dir: str | os.PathLike[str], rollout_id: str) -> RolloutTokens | None:
    """The training sequences of one rollout's recorded calls (None: no calls file).

    A calls file that is not the rollout's own (another rollout's calls, or another
    run's) raises :class:`~agentkit.training.ExportError` naming the file and the call.
    """
    path = Path(run_dir)
    calls = read_calls(path, rollout_id, run_id=run_id_of(path))
    return None if calls is None else sequences_of(calls)


def token_fidelity(
    run_dir: str | os.PathLike[str], rollout_id: str, raw: Mapping[str, Any] | None = None
) -> str:
    """One line on a rollout's token ids, as ``agentkit show --rollout`` prints it.

    From its calls file: ``complete (N calls, M sequences)`` or which calls
    lack ids and why; without one, from what its harness kept in ``raw``.
    """
    try:
        tokens = rollout_tokens(run_dir, rollout_id)
    except ForeignCallsError as exc:
        return f"incomplete: {exc}; its calls are left out"
    if tokens is not None:
        return tokens.describe()
    raw = raw or {}
    if isinstance(raw.get("token_ids_note"), str):
        return f"incomplete: {raw['token_ids_note']}"
    if raw.get("completion_token_ids") is not None:
        return "complete (recorded by the harness; no calls file)"
    return "none recorded (no calls file)"
