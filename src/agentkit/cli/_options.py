"""Options that more than one command takes, each written once.

A comparison's (``agentkit compare``, ``agentkit job compare``); a run's or a
job's directory to create or to resume (``agentkit run``, ``agentkit job
run``); a leaderboard's file (``agentkit runs --compare``, ``agentkit job
show``). The help text stays each command's own where it says what the
command makes of the option.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

__all__ = [
    "comparison_options",
    "leaderboard_out_option",
    "out_dir_option",
    "resume_option",
    "retry_errors_option",
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


def out_dir_option(help: str) -> Callable[[F], F]:
    """``--out DIR``: the run's or job's directory to create."""
    return click.option("--out", type=click.Path(path_type=Path), default=None, help=help)


def resume_option(help: str, *, metavar: str | None = None) -> Callable[[F], F]:
    """``--resume DIR``: an existing run's or job's directory to finish."""
    return click.option(
        "--resume",
        type=click.Path(path_type=Path, exists=True, file_okay=False),
        default=None,
        metavar=metavar,
        help=help,
    )


#: ``--retry-errors``: with ``--resume``, the rollouts that errored run again.
retry_errors_option: Callable[[Any], Any] = click.option(
    "--retry-errors",
    is_flag=True,
    help="With --resume, also run again the rollouts that errored.",
)
