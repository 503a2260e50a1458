"""Options that more than one command takes, each written once.

A comparison's (``agentkit compare``, ``agentkit job compare``); a run's or a
job's directory to create or to resume, its plan, progress display and JSON, and
its repeatable ``NAME=VALUE`` settings (``agentkit run``, ``agentkit job run``); a
leaderboard's file (``agentkit runs --compare``, ``agentkit job show``). The help
text stays each command's own where it says what the command makes of the
option.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

__all__ = [
    "comparison_options",
    "directory_options",
    "leaderboard_out_option",
    "output_options",
    "pairs_option",
]

F = TypeVar("F", bound=Callable[..., Any])


def comparison_options(command: F) -> F:
    """``--json`` and ``--top N`` of a paired comparison of two runs (or two cells)."""
    command = click.option(
        "--top",
        type=click.IntRange(min=0),
        default=10,
        show_default=True,
        metavar="N",
        help="How many of the tasks that differ most to list.",
    )(command)
    return click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead.")(
        command
    )


def leaderboard_out_option(help_prefix: str, *, metavar: str | None = None) -> Callable[[F], F]:
    """``--out FILE``: where a leaderboard goes instead of stdout (``help_prefix`` starts
    the help: ``Write``, ``With --compare: write``)."""
    return click.option(
        "--out",
        type=click.Path(path_type=Path, dir_okay=False, allow_dash=True),
        default=None,
        metavar=metavar,
        help=f"{help_prefix} the leaderboard to FILE instead of stdout (- is stdout; a FIFO or "
        "a device is written in place, a regular file replaced whole, a symbolic link "
        "followed).",
    )


def pairs_option(*decls: str, metavar: str, help: str) -> Callable[[F], F]:
    """A repeatable option (``-S NAME=VALUE``, ``--set KEY=VALUE``, ``--task ID``): its
    values in the order given, a tuple."""
    return click.option(*decls, multiple=True, metavar=metavar, help=help)


def directory_options(out: str, resume: str, *, metavar: str | None = None) -> Callable[[F], F]:
    """``--out DIR``, the run's or job's directory to create (``out``: its help);
    ``--resume DIR``, an existing one to finish (``resume``: its help, ``metavar``
    its DIR); ``--retry-errors``, with ``--resume``: the rollouts that errored run
    again."""

    def add(command: F) -> F:
        command = click.option(
            "--retry-errors",
            is_flag=True,
            help="With --resume, also run again the rollouts that errored.",
        )(command)
        command = click.option(
            "--resume",
            type=click.Path(path_type=Path, exists=True, file_okay=False),
            default=None,
            metavar=metavar,
            help=resume,
        )(command)
        return click.option("--out", type=click.Path(path_type=Path), default=None, help=out)(
            command
        )

    return add


def output_options(dry_run: str, progress: str, as_json: str) -> Callable[[F], F]:
    """``--dry-run`` (print the plan, run nothing), ``--progress/--no-progress`` (the
    progress display on stderr; None: the command's default) and ``--json`` (print
    only JSON: ``as_json``), each with the command's own help."""

    def add(command: F) -> F:
        command = click.option("--json", "as_json", is_flag=True, help=as_json)(command)
        command = click.option("--progress/--no-progress", "progress", default=None, help=progress)(
            command
        )
        return click.option("--dry-run", is_flag=True, help=dry_run)(command)

    return add
