"""Reading a run directory and writing training records in every export format.

JSONL keeps every field as JSON (messages nested). Parquet has one typed
column per field; the message lists and the per-metric rewards, whose shapes
vary from harness to harness, are stored as JSON text (``prompt``,
``completion``, ``rewards``, ``token_issues``), token ids as ``list<int64>``
columns, the mask as ``list<int8>`` and logprobs as ``list<float64>``. The
trainer formats (``skyrl``, ``tinker``, ``verifiers``) and the SFT formats
(``sft-chat``, ``sharegpt``) have modules of their own.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, Literal

import attrs

from agentkit._calls import ModelCall
from agentkit._errors import missing_extra
from agentkit.rundir import ROLLOUTS, load_rollouts
from agentkit.training._advantages import GroupBy
from agentkit.training._callfiles import ForeignCallsError, read_calls, run_id_of
from agentkit.training._errors import ExportError
from agentkit.training._files import write_lines, writing
from agentkit.training._pipeline import prepare
from agentkit.training._prefixes import Prefixes
from agentkit.training._records import TrainingRecord, from_rollouts, with_sequences
from agentkit.training._sequences import RolloutTokens, _sequences_of, sequences_of
from agentkit.training._sft import write_sft
from agentkit.training._skyrl import write_skyrl
from agentkit.training._tinker import write_tinker
from agentkit.training._tokenizer import load_tokenizer, retokenized
from agentkit.training._verifiers import CallsOf, write_verifiers

__all__ = [
    "EXPORT_FORMATS",
    "ExportError",
    "ExportSummary",
    "export_run",
    "from_run_dir",
    "rollout_tokens",
    "token_fidelity",
    "write_jsonl",
    "write_parquet",
    "write_records",
]

ExportFormat = Literal["jsonl", "parquet", "skyrl", "tinker", "verifiers", "sft-chat", "sharegpt"]
#: The formats :func:`write_records` and ``agentkit export`` accept.
EXPORT_FORMATS: tuple[str, ...] = (
    "jsonl",
    "parquet",
    "skyrl",
    "tinker",
    "verifiers",
    "sft-chat",
    "sharegpt",
)


def _run_path(run_dir: str | os.PathLike[str]) -> Path:
    path = Path(run_dir)
    if not (path / ROLLOUTS).is_file():
        raise ExportError(
            f"{path / ROLLOUTS}: no such file; expected a run directory written by "
            "'agentkit run' or AgentEnv.evaluate(run_dir=...)"
        )
    return path


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
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
    run_dir: str | os.PathLike[str], *, tokenizer: str | os.PathLike[str] | None = None
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
    """
    path = _run_path(run_dir)
    tok = load_tokenizer(tokenizer) if tokenizer is not None else None
    rollouts, _note = load_rollouts(path, repair=False)
    run_id = run_id_of(path)
    out: list[TrainingRecord] = []
    prefixes = Prefixes(path, rollouts, run_id=run_id)
    with _gc_paused():
        for record in from_rollouts(rollouts):
            references: dict[int, tuple[int, int]] = {}
            try:
                calls = read_calls(path, record.rollout_id, run_id=run_id, references=references)
            except ForeignCallsError as exc:
                out.append(_without_calls(record, str(exc)))
                continue
            if calls is None:
                records = [record]
            elif tok is not None and not all(c.has_tokens for c in calls):
                calls = retokenized(calls, tok, os.fspath(tokenizer or ""))
                records = with_sequences(record, sequences_of(calls))
            else:
                records = with_sequences(record, _sequences_of(calls, references))
            out.extend(records if record.prefix_id is None else prefixes.count(records))
    return out


def _without_calls(record: TrainingRecord, why: str) -> TrainingRecord:
    """The record of a rollout whose calls file is not its own: no token ids (neither the
    file's nor any in ``raw``), incomplete, its issue saying why."""
    return record.evolve(
        prompt_token_ids=None,
        completion_token_ids=None,
        completion_mask=None,
        completion_logprobs=None,
        calls=[],
        token_source="none",
        token_issues=[{"call": None, "reason": f"{why}; its calls are left out"}],
    )


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


def write_jsonl(records: Iterable[TrainingRecord], out: str | os.PathLike[str]) -> int:
    """Write one JSON object per record; returns how many were written."""
    return write_lines((record.to_json() for record in records), out)


def _pyarrow() -> Any:
    import importlib

    try:
        pyarrow = importlib.import_module("pyarrow")
        importlib.import_module("pyarrow.parquet")
    except ImportError:
        raise ExportError(
            missing_extra("writing parquet", "pyarrow", "parquet", note="or pip install pyarrow")
        ) from None
    return pyarrow


def parquet_schema() -> Any:
    """The parquet schema of exported records (needs pyarrow)."""
    pa = _pyarrow()
    return pa.schema(
        [
            ("rollout_id", pa.string()),
            ("task_id", pa.string()),
            ("example_id", pa.string()),
            ("rollout_index", pa.int64()),
            ("group", pa.int64()),
            ("status", pa.string()),
            ("prompt", pa.string()),
            ("completion", pa.string()),
            ("reward", pa.float64()),
            ("rewards", pa.string()),
            ("advantage", pa.float64()),
            ("stop_reason", pa.string()),
            ("overlong", pa.bool_()),
            ("loss_mask", pa.float64()),
            ("truncated", pa.bool_()),
            ("prompt_token_ids", pa.list_(pa.int64())),
            ("completion_token_ids", pa.list_(pa.int64())),
            ("completion_mask", pa.list_(pa.int8())),
            ("completion_logprobs", pa.list_(pa.float64())),
            ("passed", pa.bool_()),
            ("sequence", pa.int64()),
            ("calls", pa.list_(pa.int64())),
            ("sequence_start", pa.string()),
            ("token_source", pa.string()),
            ("token_issues", pa.string()),
            ("prefix_id", pa.string()),
            ("branch_step", pa.int64()),
            ("prefix_messages", pa.int64()),
            ("prefix_tokens", pa.int64()),
        ]
    )


_JSON_COLUMNS = ("prompt", "completion", "rewards", "token_issues")


def write_parquet(records: Iterable[TrainingRecord], out: str | os.PathLike[str]) -> int:
    """Write the records as one parquet file (``pip install 'agentkit[parquet]'``)."""
    pa = _pyarrow()
    schema = parquet_schema()
    rows = []
    for record in records:
        row = record.to_json()
        for name in _JSON_COLUMNS:
            row[name] = json.dumps(row[name], ensure_ascii=False, allow_nan=False)
        rows.append(row)
    table = pa.Table.from_pylist(rows, schema=schema)
    with writing(out) as fh:
        pa.parquet.write_table(table, fh)
    return len(rows)


def write_records(
    records: Iterable[TrainingRecord],
    out: str | os.PathLike[str],
    *,
    format: ExportFormat,
    calls_of: CallsOf | None = None,
) -> int:
    """Write records in ``format`` (one of :data:`EXPORT_FORMATS`); returns how many
    lines, rows or records were written.

    ``calls_of`` gives a rollout's model calls (the ``verifiers`` format takes
    each call's messages from them; ``sft-chat`` and ``sharegpt`` the tools).
    """
    if format == "jsonl":
        return write_jsonl(records, out)
    if format == "parquet":
        return write_parquet(records, out)
    if format == "skyrl":
        return write_skyrl(records, out)
    if format == "tinker":
        return write_tinker(records, out)
    if format == "verifiers":
        return write_verifiers(records, out, calls_of=calls_of)
    if format in ("sft-chat", "sharegpt"):
        return write_sft(records, out, sharegpt=format == "sharegpt", calls_of=calls_of)
    raise ExportError(
        f"unknown export format {format!r}; expected one of: {', '.join(EXPORT_FORMATS)}"
    )


@attrs.frozen(kw_only=True)
class ExportSummary:
    """What :func:`export_run` wrote, and which rollouts' tokens are incomplete.

    ``written``: lines, rows or records written. ``rollouts``: rollouts read.
    ``incomplete``: per rollout whose tokens are incomplete, its issues
    (``{"call": index or None, "reason": ...}``); such rollouts are exported
    with what they have, marked, unless ``require_token_ids`` was given.
    """

    written: int
    rollouts: int
    incomplete: dict[str, list[dict[str, Any]]] = attrs.field(factory=dict)


def _incomplete(records: list[TrainingRecord]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for record in records:
        if record.token_source == "tokenizer":
            issue = {
                "call": None,
                "reason": "token ids made by a local tokenizer, not the server",
            }
            out.setdefault(record.rollout_id, [*record.token_issues, issue])
        elif record.token_issues:
            out.setdefault(record.rollout_id, list(record.token_issues))
        elif not record.has_tokens and any(m.get("role") == "assistant" for m in record.completion):
            out.setdefault(
                record.rollout_id,
                [{"call": None, "reason": "no token ids recorded (no calls file, none in raw)"}],
            )
    return out


def _describe(incomplete: dict[str, list[dict[str, Any]]], limit: int = 10) -> str:
    lines = []
    for rollout_id, issues in list(incomplete.items())[:limit]:
        parts = [
            (f"call {i['call']}: " if i.get("call") is not None else "") + str(i.get("reason"))
            for i in issues
        ]
        lines.append(f"  {rollout_id}: {'; '.join(parts)}")
    if len(incomplete) > limit:
        lines.append(f"  ... and {len(incomplete) - limit} more")
    return "\n".join(lines)


def export_run(
    run_dir: str | os.PathLike[str],
    out: str | os.PathLike[str],
    *,
    format: ExportFormat = "jsonl",
    normalize: bool | Literal["group", "batch"] = False,
    eps: float | None = None,
    filter_overlong: bool = True,
    eos_token_id: int | None = None,
    max_seq_len: int | None = None,
    drop_unscored: bool = False,
    require_token_ids: bool = False,
    group_by: GroupBy = "task",
    tokenizer: str | os.PathLike[str] | None = None,
) -> ExportSummary:
    """Read a run directory, :func:`~agentkit.training.prepare` it, write ``out``.

    With ``require_token_ids`` a rollout whose tokens are incomplete (a call
    without token ids, or no token ids at all) fails the export: an
    :class:`ExportError` names each such rollout, its calls and why, and
    nothing is written; a sequence whose ids a ``tokenizer`` made (see
    :func:`from_run_dir`) counts as incomplete there, since they are not the
    server's. ``group_by="branch_point"`` forms the GRPO groups per branch point
    of a branching run (see :func:`~agentkit.training.assign_advantages`).
    """
    if format not in EXPORT_FORMATS:
        raise ExportError(
            f"unknown export format {format!r}; expected one of: {', '.join(EXPORT_FORMATS)}"
        )
    if format == "parquet":
        _pyarrow()  # fail before reading anything
    records = prepare(
        from_run_dir(run_dir, tokenizer=tokenizer),
        normalize=normalize,
        eps=eps,
        filter_overlong=filter_overlong,
        eos_token_id=eos_token_id,
        max_seq_len=max_seq_len,
        drop_unscored=drop_unscored,
        group_by=group_by,
    )
    incomplete = _incomplete(records)
    if require_token_ids and incomplete:
        raise ExportError(
            f"{len(incomplete)} rollout(s) of {run_dir} lack token ids "
            f"(--require-token-ids); nothing was written:\n{_describe(incomplete)}"
        )
    path = Path(run_dir)
    run_id = run_id_of(path)
    tok = load_tokenizer(tokenizer) if tokenizer is not None else None

    def calls_of(rollout_id: str) -> list[ModelCall] | None:
        try:
            calls = read_calls(path, rollout_id, run_id=run_id)
        except ForeignCallsError:  # not its calls: its record already says so
            return None
        # the calls the records' sequences were built from: with a tokenizer, those it
        # gave ids to (the verifiers writer cuts a sequence's tokens per call)
        if tok is not None and calls is not None and not all(c.has_tokens for c in calls):
            calls = retokenized(calls, tok, os.fspath(tokenizer or ""))
        return calls

    with _gc_paused():
        written = write_records(records, out, format=format, calls_of=calls_of)
    return ExportSummary(
        written=written,
        rollouts=len({r.rollout_id for r in records}),
        incomplete=incomplete,
    )
