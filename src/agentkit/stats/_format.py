"""Leaderboards and comparisons as text: a terminal table, CSV, Markdown and JSON.

Every format of a leaderboard comes from the same flat records
(:func:`leaderboard_records`), one per row, so CSV, JSON and the tables agree.
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Sequence
from typing import Any

from rich.console import Console
from rich.table import Table

from agentkit.stats._compare import Comparison, TaskDifference
from agentkit.stats._leaderboard import RunStats

__all__ = [
    "LEADERBOARD_FORMATS",
    "comparison_json",
    "comparison_text",
    "format_leaderboard",
    "leaderboard_records",
    "leaderboard_table",
    "ranked",
]

#: What :func:`format_leaderboard` writes.
LEADERBOARD_FORMATS = ("table", "csv", "markdown", "json")


def ranked(rows: Sequence[RunStats]) -> list[RunStats]:
    """Rows by mean reward, highest first (rows without one last; ties keep their order)."""
    known = [r for r in rows if r.reward.mean is not None]
    known.sort(key=lambda r: -(r.reward.mean or 0.0))
    return known + [r for r in rows if r.reward.mean is None]


def _ks(rows: Sequence[RunStats]) -> list[int]:
    return sorted({k for r in rows for k in r.pass_at_k})


def leaderboard_records(rows: Sequence[RunStats]) -> list[dict[str, Any]]:
    """One flat dict per row, every row with the same keys (the CSV and JSON columns).

    ``pass@K`` keys cover every k of any row (None where a row lacks that k).
    """
    ks = _ks(rows)
    out = []
    for r in rows:
        e = r.reward
        record: dict[str, Any] = {
            "label": r.label,
            "path": r.path,
            "taskset": r.taskset,
            "harness": r.harness,
            "model": r.model,
            "planned": r.planned,
            "rollouts": r.rollouts,
            "scored": r.scored,
            "could_not_run": r.could_not_run,
            "unscored": r.unscored,
            "tasks": r.tasks,
            "tasks_unscored": r.tasks_unscored,
            "mean_reward": e.mean,
            "se": e.se,
            "ci_low": e.ci_low,
            "ci_high": e.ci_high,
            "df": e.df,
            "confidence": e.confidence,
            "pass_threshold": r.pass_threshold,
        }
        for k in ks:
            record[f"pass@{k}"] = r.pass_at_k.get(k)
        record.update(
            {
                "input_tokens": r.input_tokens,
                "output_tokens": r.output_tokens,
                "cached_tokens": r.cached_tokens,
                "reasoning_tokens": r.reasoning_tokens,
                "tokens_per_rollout": r.tokens_per_rollout,
                "cost": r.cost,
                "priced": r.priced,
                "cost_per_rollout": r.cost_per_rollout,
                "duration_s": r.duration_s,
                "seconds_per_rollout": r.seconds_per_rollout,
            }
        )
        out.append(record)
    return out


def _num(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _signed(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:+.{digits}f}"


def _money(value: float | None) -> str:
    if value is None:
        return "-"
    return f"${value:.4f}" if value < 100 else f"${value:,.2f}"


def _interval(low: float | None, high: float | None, *, signed: bool = False) -> str:
    if low is None or high is None:
        return "-"
    f = _signed if signed else _num
    return f"[{f(low)}, {f(high)}]"


def _human_rows(rows: Sequence[RunStats]) -> tuple[list[str], list[list[str]]]:
    """The columns people read, shared by the terminal table and Markdown."""
    ks = _ks(rows)
    tasksets = {r.taskset for r in rows}
    confidence = rows[0].reward.confidence if rows else 0.95
    head = ["run"]
    if len(tasksets) > 1:
        head.append("taskset")
    head += ["harness", "model", "tasks", "scored", "left out", "mean reward"]
    head += [f"{confidence * 100:g}% CI", "± SE"]
    head += [f"pass@{k}" for k in ks]
    head += ["tokens/rollout", "cost", "s/rollout"]
    body = []
    for r in rows:
        e = r.reward
        cells = [r.label]
        if len(tasksets) > 1:
            cells.append(r.taskset or "-")
        cells += [
            r.harness or "-",
            r.model or "-",
            str(r.tasks),
            str(r.scored),
            str(r.could_not_run + r.unscored),
            _num(e.mean),
            _interval(e.ci_low, e.ci_high),
            _num(e.se, 4),
        ]
        cells += [_num(r.pass_at_k.get(k)) for k in ks]
        tokens = r.tokens_per_rollout
        cells += [
            "-" if tokens is None else f"{tokens:,.0f}",
            _money(r.cost),
            _num(r.seconds_per_rollout, 2),
        ]
        body.append(cells)
    return head, body


#: Columns right-aligned in the terminal table and Markdown.
_TEXT_COLUMNS = {"run", "taskset", "harness", "model"}


def leaderboard_table(rows: Sequence[RunStats], *, title: str | None = None) -> Table:
    """The leaderboard as a rich table (rows as given: rank them with :func:`ranked`)."""
    head, body = _human_rows(rows)
    table = Table(title=title)
    for name in head:
        table.add_column(
            name, overflow="fold", justify="left" if name in _TEXT_COLUMNS else "right"
        )
    for cells in body:
        table.add_row(*cells)
    return table


def _markdown(rows: Sequence[RunStats]) -> str:
    head, body = _human_rows(rows)

    def line(cells: Sequence[str]) -> str:
        return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"

    align = ["---" if name in _TEXT_COLUMNS else "---:" for name in head]
    return "\n".join([line(head), line(align), *(line(c) for c in body)]) + "\n"


def _csv(rows: Sequence[RunStats]) -> str:
    records = leaderboard_records(rows)
    buffer = io.StringIO()
    if not records:
        return ""
    writer = csv.DictWriter(buffer, fieldnames=list(records[0]), lineterminator="\n")
    writer.writeheader()
    for record in records:
        writer.writerow({k: "" if v is None else v for k, v in record.items()})
    return buffer.getvalue()


def _json_safe(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def format_leaderboard(
    rows: Sequence[RunStats],
    fmt: str = "table",
    *,
    title: str | None = None,
    width: int = 200,
) -> str:
    """The leaderboard as text: ``table`` (plain, ``width`` columns), ``csv``, ``markdown`` or
    ``json`` (a list of :func:`leaderboard_records`)."""
    if fmt == "csv":
        return _csv(rows)
    if fmt == "markdown":
        return _markdown(rows)
    if fmt == "json":
        records = [{k: _json_safe(v) for k, v in r.items()} for r in leaderboard_records(rows)]
        return json.dumps(records, indent=2) + "\n"
    if fmt == "table":
        buffer = io.StringIO()
        console = Console(file=buffer, width=width, no_color=True, soft_wrap=False)
        console.print(leaderboard_table(rows, title=title))
        return buffer.getvalue()
    raise ValueError(f"format must be one of {', '.join(LEADERBOARD_FORMATS)}, not {fmt!r}")


def _task_json(d: TaskDifference) -> dict[str, Any]:
    return {
        "task_id": d.task_id,
        "a_mean": d.a_mean,
        "b_mean": d.b_mean,
        "a_scored": d.a_scored,
        "b_scored": d.b_scored,
        "difference": d.difference,
    }


def comparison_json(comparison: Comparison, *, top: int = 10) -> dict[str, Any]:
    """The comparison as one JSON object (what ``agentkit compare --json`` prints)."""
    c, t = comparison, comparison.test
    a, b = leaderboard_records([c.a, c.b])
    return {
        "a": a,
        "b": b,
        "shared_tasks": c.shared,
        "only_a": c.only_a,
        "only_b": c.only_b,
        "a_mean": c.a_mean,
        "b_mean": c.b_mean,
        "difference": {
            "mean": t.mean,
            "se": t.se,
            "ci_low": t.ci_low,
            "ci_high": t.ci_high,
            "confidence": t.confidence,
            "df": t.df,
            "t": t.t,
            "p_value": t.p_value,
            "test": "paired t-test on per-task mean rewards (A - B)",
        },
        "wins_a": c.wins_a,
        "wins_b": c.wins_b,
        "ties": c.ties,
        "top": [_task_json(d) for d in c.top(top)],
        "notes": c.notes,
    }


def _who(row: RunStats) -> str:
    parts = [p for p in (row.harness, row.model) if p]
    return f"{row.label}" + (f"  ({', '.join(parts)})" if parts else "")


def comparison_text(comparison: Comparison, *, top: int = 10) -> str:
    """The comparison for people (what ``agentkit compare`` prints)."""
    c, t = comparison, comparison.test
    level = f"{t.confidence * 100:g}%"
    lines = [f"A: {_who(c.a)}", f"B: {_who(c.b)}"]
    lines.append(f"Shared tasks: {c.shared}")
    for note in c.notes:
        lines.append(f"Note: {note}")
    if not c.shared:
        return "\n".join(lines) + "\n"
    lines.append(f"Mean reward on the shared tasks: A {_num(c.a_mean)}, B {_num(c.b_mean)}")
    diff = f"Difference A - B: {_signed(t.mean)}"
    if t.ci_low is not None:
        diff += f"  {level} CI {_interval(t.ci_low, t.ci_high, signed=True)}"
    if t.se is not None:
        diff += f"  SE {_num(t.se)}"
    lines.append(diff)
    if t.p_value is not None and t.t is not None:
        lines.append(
            f"Paired t-test on per-task means: t = {t.t:.3f}, df = {t.df}, p = {t.p_value:.4g}"
        )
    lines.append(f"Tasks: A higher on {c.wins_a}, B higher on {c.wins_b}, tied on {c.ties}")
    shown = c.top(top)
    if shown:
        differ = sum(1 for d in c.tasks if d.difference != 0)
        lines.append(f"Tasks that differ most ({len(shown)} of {differ} that differ):")
        width = max(len(d.task_id) for d in shown)
        lines.append(f"  {'task':<{width}}  {'A':>6}  {'B':>6}  {'A - B':>7}")
        for d in shown:
            lines.append(
                f"  {d.task_id:<{width}}  {d.a_mean:6.3f}  {d.b_mean:6.3f}  {d.difference:+7.3f}"
            )
    return "\n".join(lines) + "\n"
