"""``agentkit export RUN_DIR [--format jsonl|parquet] [--out FILE]``."""

from __future__ import annotations

from pathlib import Path

import click

from agentkit.training import export_run

__all__ = ["export_cmd"]


@click.command("export")
@click.argument("run_dir", type=click.Path(file_okay=False, path_type=Path))
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["jsonl", "parquet"]),
    default="jsonl",
    show_default=True,
    help="Output format (parquet needs: pip install 'agentkit[parquet]').",
)
@click.option(
    "--out",
    "-o",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="File to write. [default: RUN_DIR/train.jsonl or RUN_DIR/train.parquet]",
)
@click.option(
    "--normalize/--no-normalize",
    default=False,
    show_default=True,
    help="Divide GRPO advantages by the group's standard deviation (+ --eps).",
)
@click.option(
    "--batch-normalize",
    is_flag=True,
    help="Centre GRPO advantages per group, then normalise them across all records "
    "(the Tinker loop's); instead of --normalize.",
)
@click.option(
    "--eps",
    type=float,
    default=None,
    help="Added to the standard deviation when normalizing "
    "(default 1e-6 per group, 1e-8 with --batch-normalize).",
)
@click.option(
    "--overlong-filter/--no-overlong-filter",
    default=True,
    show_default=True,
    help="Zero the loss mask of responses that stopped for length (DAPO).",
)
@click.option(
    "--eos-token-id",
    type=click.IntRange(min=0),
    default=None,
    help="With the overlong filter: a response is overlong when its completion token ids "
    "do not end with this id (SkyRL's DAPO rule) instead of when it stopped for length.",
)
@click.option(
    "--max-seq-len",
    type=click.IntRange(min=1),
    default=None,
    help="Truncate token ids to this length, keeping the prompt.",
)
@click.option("--drop-unscored", is_flag=True, help="Leave out rollouts without a reward.")
def export_cmd(
    run_dir: Path,
    fmt: str,
    out: Path | None,
    normalize: bool,
    batch_normalize: bool,
    eps: float | None,
    overlong_filter: bool,
    eos_token_id: int | None,
    max_seq_len: int | None,
    drop_unscored: bool,
) -> None:
    """Export a run directory's rollouts as training records (JSONL or parquet)."""
    if out is None:
        out = run_dir / f"train.{fmt}"
    if normalize and batch_normalize:
        raise click.UsageError("give --normalize or --batch-normalize, not both")
    count = export_run(
        run_dir,
        out,
        format=fmt,  # type: ignore[arg-type]
        normalize="batch" if batch_normalize else normalize,
        eps=eps,
        filter_overlong=overlong_filter,
        eos_token_id=eos_token_id,
        max_seq_len=max_seq_len,
        drop_unscored=drop_unscored,
    )
    click.echo(f"wrote {count} training records to {out} ({fmt})")
