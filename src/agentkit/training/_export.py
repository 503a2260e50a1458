"""Exporting a run directory: read it once, prepare its records, write one format.

JSONL keeps every field as JSON (messages nested); parquet has one typed column
per field; the trainer formats (``skyrl``, ``tinker``, ``verifiers``) and the SFT
formats (``sft-chat``, ``sharegpt``) have modules of their own, and
:data:`~agentkit.training._formats.FORMATS` names each one's writer.
"""

from __future__ import annotations

import os
from typing import Any, Literal

import attrs

from agentkit.training._advantages import GroupBy
from agentkit.training._errors import ExportError
from agentkit.training._formats import ExportFormat, format_named
from agentkit.training._left_out import LeftOut
from agentkit.training._pipeline import prepare
from agentkit.training._read import damaged, gc_paused, read_run
from agentkit.training._records import TrainingRecord

__all__ = ["ExportSummary", "export_run"]


@attrs.frozen(kw_only=True)
class ExportSummary:
    """What :func:`export_run` wrote, and which rollouts' tokens are incomplete.

    ``written``: lines, rows or records written. ``rollouts``: rollouts exported.
    ``incomplete``: per rollout whose tokens are incomplete, its issues
    (``{"call": index or None, "reason": ...}``); such rollouts are exported
    with what they have, marked, unless ``require_token_ids`` was given.
    ``left_out``: the rollouts (and corrupt lines of ``rollouts.jsonl``) left out
    because their files are damaged or lead outside the run, each with one line
    naming the file and why. ``notes``: damage that left nothing out (a branching
    run's prefix whose calls file could not be read: its leaves have no
    ``prefix_tokens``).
    """

    written: int
    rollouts: int
    incomplete: dict[str, list[dict[str, Any]]] = attrs.field(factory=dict)
    left_out: list[LeftOut] = attrs.field(factory=list)
    notes: list[str] = attrs.field(factory=list)


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
    strict: bool = False,
) -> ExportSummary:
    """Read a run directory, :func:`~agentkit.training.prepare` it, write ``out``.

    With ``require_token_ids`` a rollout whose tokens are incomplete (a call
    without token ids, or no token ids at all) fails the export: an
    :class:`ExportError` names each such rollout, its calls and why, and
    nothing is written; a sequence whose ids a ``tokenizer`` made (see
    :func:`~agentkit.training.from_run_dir`) counts as incomplete there, since they are not the
    server's. ``group_by="branch_point"`` forms the GRPO groups per branch point
    of a branching run (see :func:`~agentkit.training.assign_advantages`).

    A rollout whose files cannot be read (its calls file is damaged, cut short,
    missing or leads outside the run, which is never opened; its line of
    ``rollouts.jsonl`` is corrupt; its ``raw`` token fields are malformed) is left
    out, and the others are exported: its group's advantages are those of the
    rollouts that remain, as for a rollout that could not run.
    :attr:`ExportSummary.left_out` says which and why. With ``strict`` any such
    damage fails the export instead (an :class:`ExportError` naming each file;
    nothing is written), and so does a run every rollout of which was left out.
    """
    chosen = format_named(format)
    if chosen.check is not None:
        chosen.check()  # fail before reading anything
    read = read_run(run_dir, tokenizer=tokenizer, keep=chosen.keep)
    if strict and (read.left_out or read.notes):
        raise ExportError(f"{damaged(run_dir, read)}\n(--strict) nothing was written")
    if read.left_out and not read.records:
        raise ExportError(f"{damaged(run_dir, read)}\nno rollout is left to export")
    records = prepare(
        read.records,
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
    with gc_paused():
        written = chosen.write(records, out, read.kept.get)
    return ExportSummary(
        written=written,
        rollouts=len({r.rollout_id for r in records}),
        incomplete=incomplete,
        left_out=list(read.left_out),
        notes=list(read.notes),
    )
