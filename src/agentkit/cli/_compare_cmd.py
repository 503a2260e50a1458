"""``agentkit compare`` (two runs, paired on their shared tasks) and the leaderboard
that ``agentkit runs --compare`` prints (``agentkit job show`` and ``agentkit job
compare`` print a job's cells the same way)."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

import click
from rich.console import Console

from agentkit._errors import SpecError
from agentkit._outfile import STDOUT, output_file
from agentkit.cli._options import comparison_options
from agentkit.jobs import is_job_dir, open_job
from agentkit.runs import Run, open_run
from agentkit.stats import (
    RunStats,
    compare_runs,
    comparison_json,
    comparison_text,
    format_leaderboard,
    leaderboard_table,
    ranked,
    run_stats,
)

__all__ = [
    "compare_cmd",
    "leaderboard_command",
    "leaderboard_runs",
    "print_comparison",
    "print_leaderboard",
]


def leaderboard_runs(paths: Sequence[Path]) -> list[Run]:
    """The runs named: each path a run directory, a job directory (its started cells) or
    a folder whose runs are all taken."""
    runs: list[Run] = []
    for path in paths:
        if not path.is_dir():
            raise SpecError(f"{path}: no such run directory")
        if (path / "manifest.json").is_file():
            runs.append(open_run(path))
            continue
        if is_job_dir(path):
            runs.extend(c.open() for c in open_job(path).cells if c.started)
            continue
        # every run in the folder, oldest first; a broken one is an error, not left out
        found = [open_run(c) for c in sorted(path.iterdir()) if (c / "manifest.json").is_file()]
        if not found:
            raise SpecError(
                f"{path}: neither a run directory (no manifest.json) nor a folder of runs"
            )
        runs.extend(sorted(found, key=lambda r: r.info.created_at))
    return _once(runs)


def _once(runs: Sequence[Run]) -> list[Run]:
    """Each run directory once (a run given twice, or under two paths, is one row; a note
    on stderr says so)."""
    out: list[Run] = []
    for run in runs:
        twin = next((r for r in out if _same_directory(r.path, run.path)), None)
        if twin is not None:
            click.echo(f"Note: {run.path} is {twin.path} given again: listed once", err=True)
            continue
        out.append(run)
    return out


def _same_directory(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def print_leaderboard(
    rows: Sequence[RunStats],
    fmt: str,
    *,
    out: Path | None = None,
    title: str | None = None,
    file: TextIO | None = None,
) -> None:
    """Print ranked leaderboard rows in ``fmt`` on ``file`` (default stdout), or write
    them to ``out`` (``-``: standard output; as ``agentkit._outfile.output_file`` writes
    a file the user named)."""
    rows = ranked(rows)
    if out is not None:
        text = format_leaderboard(rows, fmt, title=title)
        with output_file(out, what="the leaderboard") as fh:
            fh.write(text.encode("utf-8"))
        where = "the leaderboard to standard output" if str(out) == STDOUT else str(out)
        plural = "" if len(rows) == 1 else "s"
        click.echo(f"Wrote {where} ({fmt}, {len(rows)} row{plural})", err=True)
        return
    if fmt != "table":
        click.echo(format_leaderboard(rows, fmt), nl=False, file=file)
        return
    console = Console(soft_wrap=False, file=file)
    if not console.is_terminal:  # piped: no need to fold paths at 80 columns
        console = Console(soft_wrap=False, width=200, file=file)
    console.print(leaderboard_table(rows, title=title))
    left_out = [r for r in rows if r.could_not_run or r.unscored]
    for r in left_out:
        console.print(
            f"{r.label}: {r.could_not_run} rollout{'' if r.could_not_run == 1 else 's'} could "
            f"not run, {r.unscored} ran without a total reward: left out of the statistics",
            highlight=False,
            markup=False,
        )
    if rows:
        level = f"{rows[0].reward.confidence * 100:g}%"
        console.print(
            f"{level} CI: mean ± t(tasks - 1) x SE, SE clustered by task; pass@k unbiased, "
            "averaged over tasks. See docs/statistics.md.",
            highlight=False,
            markup=False,
        )


def leaderboard_command(paths: Sequence[Path], fmt: str, out: Path | None) -> None:
    """``agentkit runs --compare``: the leaderboard of the runs under ``paths`` (each run
    once); a note on stderr names a run still being written (its row is partial)."""
    runs = leaderboard_runs(paths)
    if not runs:
        raise SpecError("no runs to compare: give run directories or folders of runs")
    names = [r.path.name for r in runs]
    labels = [r.path.name if names.count(r.path.name) == 1 else str(r.path) for r in runs]
    rows = [run_stats(run, label=label) for run, label in zip(runs, labels, strict=True)]
    print_leaderboard(rows, fmt, out=out)
    for run, label in zip(runs, labels, strict=True):
        if run.state() == "running":
            click.echo(
                f"Note: {label} is still being written ({len(run)} of {run.info.planned} "
                "rollouts finished): its row is partial and will change",
                err=True,
            )


@click.command("compare")
@click.argument("run_a", type=click.Path(path_type=Path, exists=True, file_okay=False))
@click.argument("run_b", type=click.Path(path_type=Path, exists=True, file_okay=False))
@comparison_options
def compare_cmd(run_a: Path, run_b: Path, as_json: bool, top: int) -> None:
    """Compare two runs on the tasks both scored: a paired comparison.

    Prints each run's mean reward on the shared tasks, the mean difference
    A - B with its 95% confidence interval and the p-value of a paired
    t-test on per-task mean rewards, how many tasks each does better on,
    and the tasks that differ most. Tasks only one run scored are counted
    and left out. The same run given twice is an error; a run still being
    written is compared on what it has finished, with a note that its
    figures are partial.
    """
    print_comparison(open_run(run_a), open_run(run_b), as_json=as_json, top=top)


def print_comparison(run_a: Run, run_b: Run, *, as_json: bool, top: int) -> None:
    """A paired comparison of two runs, as text or JSON, on stdout (``agentkit compare``,
    ``agentkit job compare``)."""
    comparison = compare_runs(run_a, run_b)
    if not comparison.shared:
        sample_a = ", ".join(comparison.only_a[:3])
        sample_b = ", ".join(comparison.only_b[:3])
        raise SpecError(
            f"{run_a.path} and {run_b.path} share no scored task, so there is nothing to "
            f"compare (A scored {comparison.a.tasks} tasks, e.g. {sample_a or 'none'}; "
            f"B scored {comparison.b.tasks}, e.g. {sample_b or 'none'})"
        )
    if as_json:
        click.echo(json.dumps(comparison_json(comparison, top=top), indent=2))
        return
    click.echo(comparison_text(comparison, top=top), nl=False)
