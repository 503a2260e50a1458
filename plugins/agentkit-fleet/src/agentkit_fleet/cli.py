"""``agentkit fleet ...``: commands added to the agentkit CLI by this plugin."""

from __future__ import annotations

import json
from typing import Any

import click

__all__ = ["fleet_group"]


@click.group("fleet")
def fleet_group() -> None:
    """Fleet tasksets: split for training, inspect."""


@fleet_group.command("split")
@click.argument("source")
@click.option(
    "--out",
    "out",
    required=True,
    type=click.Path(file_okay=False),
    help="Directory for train.parquet and validation.parquet.",
)
@click.option("--data-version", default=None, help="Data version (S3 or versioned directory).")
@click.option(
    "--modality",
    type=click.Choice(["tool_use", "computer_use", "browser_use", "all"]),
    default="tool_use",
    show_default=True,
    help="Split the tasks of this modality (all_<modality>.json); 'all': every task.",
)
@click.option("--eval-ratio", type=float, default=0.10, show_default=True)
@click.option("--max-eval-per-env", type=int, default=30, show_default=True)
@click.option("--min-eval-per-env", type=int, default=1, show_default=True)
@click.option(
    "--held-out",
    "held_out",
    multiple=True,
    metavar="MODALITY:ENV",
    help="Hold an env out when splitting MODALITY ('all' for --modality all; repeatable); "
    "default computer_use:instacart.",
)
def split_cmd(
    source: str,
    out: str,
    data_version: str | None,
    modality: str | None,
    eval_ratio: float,
    max_eval_per_env: int,
    min_eval_per_env: int,
    held_out: tuple[str, ...],
) -> None:
    """Split Fleet tasks (file, directory or s3:// URL) into train and validation parquet.

    The split is Fleet's (``prepare_dataset.py``): the tasks of ``--modality``
    are grouped by environment and each group is split by the hash of its
    task keys. A side without tasks gets no file.
    """
    # deferred: the records, split and export modules, which agentkit --help does not need
    from agentkit_fleet.export import write_split
    from agentkit_fleet.split import SplitConfig
    from agentkit_fleet.taskset import load_records

    if source.startswith("fleet:"):
        source = source[len("fleet:") :]
    held: dict[str, list[str]] = {"computer_use": ["instacart"]}
    if held_out:
        held = {}
        for item in held_out:
            mod, sep, env = item.partition(":")
            if not sep or not env:
                raise click.BadParameter(
                    f"{item!r}: expected MODALITY:ENV", param_hint="--held-out"
                )
            held.setdefault(mod, []).append(env)
    chosen = None if modality == "all" else modality
    loaded = load_records(source, data_version=data_version, modality=chosen)
    config = SplitConfig(
        eval_ratio=eval_ratio,
        max_eval_per_env=max_eval_per_env,
        min_eval_per_env=min_eval_per_env,
        held_out_envs=held,
    )
    train, evals = loaded.split(config, chosen)
    train_path, eval_path = write_split(train, evals, out)
    for problem in loaded.problems:
        click.echo(f"skipped {problem}", err=True)
    summary: dict[str, Any] = {
        "train": {"path": str(train_path) if train_path else None, "tasks": len(train)},
        "validation": {"path": str(eval_path) if eval_path else None, "tasks": len(evals)},
        "skipped": len(loaded.problems),
    }
    click.echo(json.dumps(summary, indent=2))


@fleet_group.command("summary")
@click.argument("run_dir", type=click.Path(exists=True, file_okay=False))
@click.option("--pass-threshold", type=float, default=1.0, show_default=True)
def summary_cmd(run_dir: str, pass_threshold: float) -> None:
    """Per-environment aggregates (reward, pass rate, turns, tool calls) of a run directory."""
    # deferred: not needed for agentkit --help
    from agentkit_fleet.summary import env_summary, read_rollouts

    click.echo(json.dumps(env_summary(read_rollouts(run_dir), pass_threshold), indent=2))
