"""The results of a run as the CLI prints them: the table, tokens and cost, errors.

Shared by ``agentkit run`` (at the end of a run) and ``agentkit show``; kept apart from
``_show_cmd`` so that ``agentkit run`` loads neither the run reader nor the statistics.
"""

from __future__ import annotations

import math
from typing import Any, TextIO

from rich.console import Console
from rich.table import Table

__all__ = [
    "money",
    "planned_rollouts",
    "plural",
    "print_results",
    "render_results_table",
    "start_notes",
    "usage_lines",
]


def money(value: Any) -> str:
    if not isinstance(value, (int, float)):
        return "unknown"
    return f"${value:.4f}" if value < 100 else f"${value:,.2f}"


def usage_lines(summary: dict[str, Any]) -> list[str]:
    """Tokens and cost: totals and per-rollout means."""
    usage = summary.get("usage") or {}
    means = summary.get("usage_mean") or {}
    if not usage:
        return []
    tokens = (
        f"Tokens: {usage.get('input_tokens', 0):,} in ({usage.get('cached_tokens', 0):,} cached), "
        f"{usage.get('output_tokens', 0):,} out ({usage.get('reasoning_tokens', 0):,} reasoning)"
    )
    if means:
        tokens += (
            f"; per rollout {means.get('input_tokens', 0):,.0f} in, "
            f"{means.get('output_tokens', 0):,.0f} out"
        )
    cost = f"Cost: {money(usage.get('cost'))}"
    if isinstance(means.get("cost"), (int, float)):
        cost += f" ({money(means['cost'])} per rollout)"
    priced = summary.get("priced")
    finished = summary.get("finished", 0)
    if isinstance(priced, int) and 0 < priced < finished:
        cost += f"; {priced} of {finished} rollouts priced"
    return [tokens, cost]


def print_results(summary: dict[str, Any], *, title: str, file: TextIO | None = None) -> None:
    """The results table, tokens and cost, and one line per error kind (on ``file``,
    default stdout)."""
    console = Console(soft_wrap=False, file=file)
    console.print(render_results_table(summary, title=title))
    for line in usage_lines(summary):
        console.print(line, highlight=False, markup=False)
    kinds = summary.get("error_kinds") or {}
    firsts = summary.get("first_error_by_kind") or {}
    for kind, count in sorted(kinds.items()):
        console.print(
            f"[red]{count} rollout{'' if count == 1 else 's'} with {kind}[/red]: "
            + firsts.get(kind, "").replace("[", "\\["),
            markup=True,
            highlight=False,
        )
    could_not_run = summary.get("infra_errors") or 0
    if could_not_run:
        console.print(
            f"[yellow]{could_not_run} rollout{'' if could_not_run == 1 else 's'} could not "
            "run[/yellow] (infrastructure failures: no reward, not in the statistics); "
            "agentkit run --resume runs them again",
            markup=True,
            highlight=False,
        )
    left_out = summary.get("unsupported_tasks") or []
    if left_out:
        count = len(left_out)
        ids = ", ".join(str(t.get("task_id")) for t in left_out[:5])
        more = f" and {count - 5} more" if count > 5 else ""
        reasons = {str(t.get("reason")) for t in left_out}
        why = f": {reasons.pop()}" if len(reasons) == 1 else "; the reasons are in summary.json"
        detail = f"({ids}{more}{why}); not in the statistics"
        console.print(
            f"[yellow]{count} task{'' if count == 1 else 's'} left out[/yellow]: the harness "
            f"cannot run {'it' if count == 1 else 'them'} " + detail.replace("[", "\\["),
            markup=True,
            highlight=False,
        )
    cb = summary.get("trace_callback") or {}
    if cb.get("error"):
        console.print(f"trace_callback failed: {cb['error']}", highlight=False, markup=False)


def plural(count: int, word: str) -> str:
    """``1 rollout``, ``2 rollouts``."""
    return f"{count} {word}" if count == 1 else f"{count} {word}s"


def planned_rollouts(plan: dict[str, Any], tasks: int) -> str:
    """A ``--dry-run`` plan's rollouts after their count (a run's, or a job cell's):
    ``(3 tasks × 4), 12 to run``, with those already finished and to run again."""
    text = f"({plural(tasks, 'task')} × {plan['rollouts_per_task']}), {plan['to_run']} to run"
    if plan["already_finished"]:
        text += f", {plan['already_finished']} already finished"
    if plan["rerun"]:
        text += f", {plan['rerun']} to run again"
    return text


def start_notes(info: dict[str, Any], *, as_json: bool) -> list[str]:
    """The warnings and notes of a run's ``on_start`` plan, one line each (for stderr):
    tasks that could not be loaded, a repaired torn line and the pricing (not with
    ``--json``), the sandbox's warning, tasks left out, the preflight's warnings and
    what changed on resume."""
    lines = []
    problems = info.get("taskset_problems") or []
    if problems:
        listing = "".join(f"\n  - {p}" for p in problems)
        lines.append(f"Warning: {len(problems)} task(s) could not be loaded:{listing}")
    for note in ("repair_note", "pricing_note"):
        if info.get(note) and not as_json:
            lines.append(f"Note: {info[note]}")
    for key in ("sandbox_warning", "unsupported_warning"):
        if info.get(key):
            lines.append(f"Warning: {info[key]}")
    lines.extend(f"Warning: {w}" for w in info.get("preflight_warnings") or [])
    for path, (was, now) in (info.get("resume_changes") or {}).items():
        lines.append(f"Note: {path.split('.')[-1]} changed on resume: {was} -> {now}")
    return lines


def _fmt(value: float | None) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:.3f}"


def render_results_table(summary: dict[str, Any], *, title: str = "Results") -> Table:
    """A rich Table: per task rollouts, mean reward, pass@1, pass@n, errors; then overall."""
    ks: list[str] = []
    for t in summary.get("tasks", []):
        for k in t.get("pass_at_k", {}):
            if k not in ks:
                ks.append(k)
    largest = max(ks, key=int) if ks else None
    shown = [k for k in ks if k == "1"] + ([largest] if largest not in (None, "1") else [])
    table = Table(title=title)
    table.add_column("task", overflow="fold")
    table.add_column("rollouts", justify="right")
    table.add_column("mean reward", justify="right")
    for k in shown:
        table.add_column(f"pass@{k}", justify="right")
    table.add_column("errors", justify="right")
    for t in summary.get("tasks", []):
        row = [
            t["task_id"],
            f"{t['rollouts']}/{t['planned']}",
            _fmt(t.get("mean_reward")),
            *[_fmt(t.get("pass_at_k", {}).get(k)) for k in shown],
            str(t.get("errors", 0)),
        ]
        table.add_row(*row)
    table.add_section()
    overall = summary.get("pass_at_k", {})
    table.add_row(
        "[bold]overall",
        f"{summary.get('finished', 0)}/{summary.get('planned', 0)}",
        _fmt(summary.get("mean_reward")),
        *[_fmt(overall.get(k)) for k in shown],
        str(summary.get("errors", 0)),
    )
    return table
