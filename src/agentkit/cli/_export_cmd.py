"""``agentkit export RUN_DIR [--format FORMAT] [--out FILE] [--require-token-ids]
[--strict] [--tokenizer PATH]``."""

from __future__ import annotations

from pathlib import Path

import click

from agentkit._outfile import STDOUT
from agentkit.cli._numbers import FINITE_FLOAT
from agentkit.training import EXPORT_FORMATS, export_run

__all__ = ["export_cmd"]


@click.command("export")
@click.argument("run_dir", type=click.Path(file_okay=False, path_type=Path))
@click.option(
    "--format",
    "fmt",
    type=click.Choice(EXPORT_FORMATS),
    default="jsonl",
    show_default=True,
    help="Output format: jsonl or parquet (one record per training sequence; parquet needs "
    "pip install 'agentkit[parquet]'), skyrl (SkyRL's GeneratorOutput as JSON), tinker "
    "(tinker.Datum per line), verifiers (a verifiers trace per rollout), sft-chat or "
    "sharegpt (the transcripts of the rollouts that passed).",
)
@click.option(
    "--out",
    "-o",
    type=click.Path(dir_okay=False, path_type=Path, allow_dash=True),
    help="File to write, or - for standard output. A regular file is replaced whole once "
    "everything is written; a FIFO or a device (/dev/null) is written in place; a "
    "symbolic link is followed. [default: RUN_DIR/train.<format>.jsonl, train.parquet or "
    "train.skyrl.json]",
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
    type=FINITE_FLOAT,
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
    help="With the overlong filter: a response is overlong when its completion token ids "
    "do not end with this id (SkyRL's DAPO rule) instead of when it stopped for length.",
)
@click.option(
    "--max-seq-len",
    type=click.IntRange(min=1),
    help="Truncate token ids to this length, keeping the prompt.",
)
@click.option("--drop-unscored", is_flag=True, help="Leave out rollouts without a reward.")
@click.option(
    "--require-token-ids",
    is_flag=True,
    help="Fail (write nothing) when a rollout's tokens are incomplete: a model call that "
    "returned no token ids, or none recorded at all; the error names the rollouts and calls.",
)
@click.option(
    "--strict",
    is_flag=True,
    help="Fail (write nothing) when a rollout's files cannot be read (a calls file that is "
    "damaged, cut short, missing or leads outside the run; a corrupt line of "
    "rollouts.jsonl) instead of leaving that rollout out with a warning.",
)
@click.option(
    "--tokenizer",
    type=click.Path(exists=True, path_type=Path),
    help="A local Hugging Face tokenizer (a directory) that gives token ids to the chat "
    "calls the server returned none for; their sequences are marked token_source "
    "'tokenizer'. Needs pip install 'agentkit[tokenizer]'. Without it nothing is "
    "re-tokenized.",
)
@click.option(
    "--group-by",
    type=click.Choice(["task", "branch_point"]),
    default="task",
    show_default=True,
    help="GRPO groups: every rollout of a task, or (a branching run) the children of "
    "one branch point (docs/branching.md).",
)
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
    require_token_ids: bool,
    strict: bool,
    tokenizer: Path | None,
    group_by: str,
) -> None:
    """Export a run directory's rollouts as training data, token for token.

    Each rollout's recorded model calls become training sequences (merged
    while each prompt extends the last; a prefix break or a branch starts a
    new one); nothing is re-tokenized unless --tokenizer is given. Rollouts
    whose tokens are incomplete are exported with what they have and marked,
    and listed on stderr. A rollout whose files cannot be read (damaged, or
    leading outside the run) is left out with one warning naming the file and
    why, and the rest is exported (exit status 0); --strict fails instead.
    """
    if out is None:
        out = run_dir / _default_name(fmt)
    if normalize and batch_normalize:
        raise click.UsageError("give --normalize or --batch-normalize, not both")
    summary = export_run(
        run_dir,
        out,
        format=fmt,  # type: ignore[arg-type]
        normalize="batch" if batch_normalize else normalize,
        eps=eps,
        filter_overlong=overlong_filter,
        eos_token_id=eos_token_id,
        max_seq_len=max_seq_len,
        drop_unscored=drop_unscored,
        require_token_ids=require_token_ids,
        tokenizer=tokenizer,
        strict=strict,
        group_by="branch_point" if group_by == "branch_point" else "task",
    )
    to_stdout = str(out) == STDOUT
    where = "standard output" if to_stdout else str(out)
    left = len(summary.left_out)
    also = f"; left out {left} rollout(s) that cannot be read" if left else ""
    click.echo(f"wrote {summary.written} {_unit(fmt)} to {where} ({fmt}){also}", err=to_stdout)
    if summary.left_out or summary.notes:
        click.echo(
            f"warning: left out {left} rollout(s) of {run_dir} whose files cannot be read "
            "(damaged, or leading outside the run; --strict fails instead):",
            err=True,
        )
        damage = [item.reason for item in summary.left_out] + summary.notes
        for reason in damage[:10]:
            click.echo(f"  {reason}", err=True)
        if len(damage) > 10:
            click.echo(f"  ... and {len(damage) - 10} more", err=True)
    if summary.incomplete:
        click.echo(
            f"{len(summary.incomplete)} of {summary.rollouts} rollouts have incomplete token ids "
            "(marked in the export; agentkit show RUN --rollout ID says which calls and why; "
            "--require-token-ids fails instead):",
            err=True,
        )
        for rollout_id, issues in list(summary.incomplete.items())[:10]:
            reasons = "; ".join(
                (f"call {i['call']}: " if i.get("call") is not None else "") + str(i["reason"])
                for i in issues
            )
            click.echo(f"  {rollout_id}: {reasons}", err=True)
        if len(summary.incomplete) > 10:
            click.echo(f"  ... and {len(summary.incomplete) - 10} more", err=True)


def _default_name(fmt: str) -> str:
    if fmt == "parquet":
        return "train.parquet"
    if fmt == "skyrl":
        return "train.skyrl.json"
    return "train.jsonl" if fmt == "jsonl" else f"train.{fmt}.jsonl"


def _unit(fmt: str) -> str:
    return {
        "skyrl": "rows (sequences)",
        "tinker": "datums",
        "verifiers": "traces",
        "sft-chat": "conversations",
        "sharegpt": "conversations",
    }.get(fmt, "training records")
