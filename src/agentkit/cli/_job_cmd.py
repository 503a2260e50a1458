"""``agentkit job``: run a job (``run``), print its leaderboard (``show``), compare two of
its cells (``compare``). The job file and the job directory are in docs/jobs.md."""

from __future__ import annotations

import functools
import json
import tomllib
from pathlib import Path
from typing import Any, TextIO

import click

from agentkit._errors import AgentkitError, SpecError
from agentkit._run_options import file_option
from agentkit.cli._compare_cmd import print_comparison, print_leaderboard
from agentkit.cli._options import (
    comparison_options,
    directory_options,
    leaderboard_out_option,
    output_options,
    pairs_option,
)
from agentkit.cli._results import planned_rollouts, start_notes
from agentkit.cli._signals import run_resumable
from agentkit.cli._stdout import reserved_stdout
from agentkit.jobs import Job, JobResults, default_job_dir, open_job
from agentkit.jobs._spec import setting_key, with_changes
from agentkit.jobs._store import file_digest, read_job_json
from agentkit.stats import LEADERBOARD_FORMATS

__all__ = ["job_group"]


def _echo_err(message: str) -> None:
    click.echo(message, err=True)


@click.group("job")
def job_group() -> None:
    """Jobs: tasksets × harnesses × models × other settings, each cell an ordinary run.

    'agentkit job run job.toml' runs every cell under one job directory with one
    shared concurrency budget; 'agentkit job show JOBDIR' prints its leaderboard;
    'agentkit job compare JOBDIR CELL_A CELL_B' compares two cells.
    """


@job_group.command("run")
@click.argument(
    "job_file", required=False, type=click.Path(path_type=Path, exists=True, dir_okay=False)
)
@pairs_option(
    "--taskset",
    "tasksets",
    metavar="SPEC",
    help="A taskset (provider:argument), replacing the file's [[tasksets]] (repeatable).",
)
@pairs_option(
    "--harness",
    "harnesses",
    metavar="NAME",
    help="A harness, replacing the file's [[harnesses]] (repeatable).",
)
@pairs_option(
    "--model",
    "models",
    metavar="NAME",
    help="A model, replacing the file's [[models]] (repeatable); 'scripted:FILE' serves a "
    "JSON model script.",
)
@click.option("--base-url", default=None, help="The model endpoint of every cell.")
@click.option(
    "--api-key-env",
    metavar="VAR",
    help="Environment variable holding the API key of every cell (never stored).",
)
@click.option(
    "-n",
    "--rollouts",
    type=click.IntRange(min=1),
    help="Rollouts per task in every cell.",
)
@click.option(
    "-c",
    "--concurrency",
    type=click.IntRange(min=1),
    help="Rollouts running at once across all cells (the shared budget). [default: the "
    "file's, else 8]",
)
@click.option("--name", default=None, help="The job's name. [default: the file's name]")
@pairs_option(
    "--set",
    "set_pairs",
    metavar="KEY=VALUE",
    help="A setting of every cell (any run option, or TABLE.KEY such as "
    "sampling_args.temperature); VALUE is TOML, else text (repeatable).",
)
@pairs_option(
    "--matrix",
    "matrix_pairs",
    metavar="KEY=V1,V2,...",
    help="A matrix axis: one cell per value, as [matrix] KEY = [V1, V2, ...] (repeatable).",
)
@pairs_option(
    "-S",
    "sandbox_pairs",
    metavar="NAME=VALUE",
    help="A sandbox option of every cell (-S image=host).",
)
@directory_options(
    "The job directory to create. [default: jobs/<time>-<name>]",
    "Finish the job in JOBDIR: every cell's missing rollouts; cells never started.",
    metavar="JOBDIR",
)
@output_options(
    "Print the cells and their settings; run nothing.",
    "The job's progress display on stderr. [default: on; rows on a terminal, plain "
    "lines elsewhere; off with --json]",
    "Print only the job's final JSON.",
)
def job_run_cmd(**params: Any) -> None:
    """Run every cell of JOB_FILE (or of the job the flags give) under one job directory.

    The cells (tasksets × harnesses × models × matrix values, less [[exclude]],
    plus [[cells]]) run together, with at most --concurrency rollouts at once
    across all of them and one progress display; each cell is an ordinary run
    directory, JOBDIR/cells/<cell>. Flags replace the file's axes (--taskset,
    --harness, --model) or set what every cell gets (--set, -S, -n, ...).
    With --resume JOBDIR, the job's stored settings apply (JOB_FILE given too:
    its changes, refused when they change the cells).
    """
    with reserved_stdout() as out:
        _run(params, out)


def _run(params: dict[str, Any], out: TextIO) -> None:
    job = _job(params)
    resume: Path | None = params["resume"]
    if params["retry_errors"] and resume is None:
        raise SpecError(
            "--retry-errors runs again rollouts of an existing job: give --resume JOBDIR"
        )
    if resume is not None and params["out"] is not None:
        raise SpecError("give either --out (a new job) or --resume (an existing job)")
    job_dir = resume or params["out"] or default_job_dir(job.name)
    as_json: bool = params["as_json"]
    if params["dry_run"]:
        plan = job.plan(
            None if resume else job_dir, resume=resume, retry_errors=params["retry_errors"]
        )
        click.echo(json.dumps(plan, indent=2, default=str) if as_json else _plan(plan), file=out)
        return
    progress = params["progress"]
    if progress is None:
        progress = not as_json

    def on_cell_start(name: str, info: dict[str, Any]) -> None:
        for line in start_notes(info, as_json=as_json):
            _echo_err(f"cell {name}: {line}")

    if job.source and resume is not None and params["job_file"] is None:
        _note_changed_source(job, resume)
    results: JobResults = run_resumable(
        functools.partial(
            job.run,
            None if resume else job_dir,
            resume=resume,
            retry_errors=params["retry_errors"],
            progress=progress,
            on_cell_start=on_cell_start,
        ),
        job_dir,
        "agentkit job run",
    )
    if as_json:
        click.echo(json.dumps(results.to_json(), indent=2, default=str), file=out)
    else:
        rows = open_job(results.job_dir).leaderboard()
        if rows:
            print_leaderboard(rows, "table", title=f"Job {results.name}", file=out)
        click.echo(f"Job directory: {results.job_dir}", file=out)
    failed = results.failed
    if failed:
        for cell in failed:
            _echo_err(f"cell {cell.name} failed: {cell.error}")
        others = "; the others ran" if len(failed) < len(results.cells) else ""
        raise AgentkitError(
            f"{len(failed)} of {len(results.cells)} cells failed{others}. Fix the cause, "
            f"then continue with: agentkit job run --resume {results.job_dir}"
        )
    if not results.complete:
        _echo_err(
            f"Some cells are not complete (rollouts that could not run, or a run limit); "
            f"see agentkit job show {results.job_dir}; continue with: agentkit job run "
            f"--resume {results.job_dir}"
        )


def _job(params: dict[str, Any]) -> Job:
    """The job of the file and flags (on --resume without a file: the stored job)."""
    replace: dict[str, Any] = {}
    override: dict[str, Any] = {}
    if params["tasksets"]:
        replace["tasksets"] = [{"spec": s} for s in params["tasksets"]]
    if params["harnesses"]:
        replace["harnesses"] = [{"name": h} for h in params["harnesses"]]
    if params["models"]:
        replace["models"] = [{"name": m} for m in params["models"]]
    if params["name"] is not None:
        replace["name"] = params["name"]
    if params["matrix_pairs"]:
        replace["matrix"] = dict(_matrix_axis(p) for p in params["matrix_pairs"])
    for pair in params["set_pairs"]:
        key, value = _pair(pair, "--set")
        table, dot, sub = key.partition(".")
        if dot:
            entry = override.setdefault(table, {})
            if not isinstance(entry, dict):
                raise SpecError(f"--set {key}: {table} is also given whole; give one of them")
            entry[sub] = value
        else:
            override[key] = file_option(key, value, path=f"--set {key}")
    for pair in params["sandbox_pairs"]:
        key, value = _pair(pair, "-S")
        override.setdefault("sandbox_options", {})[key] = value
    for flag, key in (("rollouts", "rollouts_per_task"), ("base_url", "base_url")):
        if params[flag] is not None:
            override[key] = params[flag]
    if params["api_key_env"] is not None:
        override["api_key_env"] = params["api_key_env"]
    if params["concurrency"] is not None:
        replace["concurrency"] = params["concurrency"]
    job_file: Path | None = params["job_file"]
    if job_file is not None:
        return Job.from_toml(job_file, replace=replace, override=override)
    if params["resume"] is not None:
        return Job.from_job_dir(params["resume"], replace=replace, override=override)
    if not (replace.get("tasksets") and replace.get("harnesses")):
        raise click.UsageError(
            "give a JOB_FILE, or at least --taskset and --harness (or --resume JOBDIR)"
        )
    return Job.from_mapping(with_changes({}, replace, override), source="the command line")


def _value(text: str) -> Any:
    """A flag's VALUE: a TOML value when it parses as one (``5``, ``0.7``, ``true``,
    ``"text"``, ``[1, 2]``, ``{a = 1}``), else the text itself."""
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text


def _pair(pair: str, flag: str) -> tuple[str, Any]:
    key, sep, text = pair.partition("=")
    key = setting_key(key.strip())  # a header's name as written: headers.X-Route-Tag
    if not sep or not key:
        raise SpecError(f"{flag} {pair!r}: expected KEY=VALUE")
    return key, _value(text)


def _matrix_axis(pair: str) -> tuple[str, list[Any]]:
    """``--matrix KEY=V1,V2`` (or ``KEY=[V1, V2]``): a matrix key and its values."""
    key, sep, text = pair.partition("=")
    key = setting_key(key.strip())
    if not sep or not key or not text.strip():
        raise SpecError(f"--matrix {pair!r}: expected KEY=V1,V2,...")
    if text.strip().startswith("["):
        values = _value(text)
        if not isinstance(values, list):
            raise SpecError(f"--matrix {key}: {text!r} is not a TOML array")
        return key, values
    return key, [_value(v.strip()) for v in text.split(",")]


def _note_changed_source(job: Job, resume: Path) -> None:
    """On ``--resume JOBDIR`` alone: say so when the job file it came from changed since."""
    stored = read_job_json(resume)
    digest = stored.get("source_sha256")
    source = stored.get("source")
    if source and digest and file_digest(source) not in (None, digest):
        _echo_err(
            f"Note: {source} changed since the job started; the job runs as stored. To apply "
            f"the changes: agentkit job run {source} --resume {resume}"
        )


def _plan(plan: dict[str, Any]) -> str:
    """``--dry-run``: the cells and their settings, for people."""
    lines = [
        "Dry run: nothing is run or written.",
        f"Job: {plan['name']}  directory: {plan['job_dir']}"
        + ("  (resume)" if plan["resume"] else ""),
        f"Concurrency: {plan['concurrency']} rollouts at once, shared by all cells",
        f"Cells ({len(plan['cells'])}):",
    ]
    for cell in plan["cells"]:
        model = cell["context"].get("model") or "-"
        lines.append(f"  {cell['name']}")
        lines.append(
            f"    taskset {cell['taskset']['spec']}"
            + (f" {json.dumps(cell['taskset']['options'])}" if cell["taskset"]["options"] else "")
            + f"  harness {cell['harness']['name']}"
            + (f" {json.dumps(cell['harness']['options'])}" if cell["harness"]["options"] else "")
            + f"  model {model}"
        )
        settings = {k: v for k, v in cell["settings"].items() if k != "model"}
        if settings:
            lines.append(f"    settings {json.dumps(settings, default=str)}")
        rollouts = planned_rollouts(cell, cell["tasks"])
        lines.append(f"    {cell['planned']} rollouts {rollouts}  -> {cell['run_dir']}")
        if cell.get("unsupported_warning"):
            lines.append(f"    left out: {cell['unsupported_warning']}")
    lines.append(f"Total: {plan['planned']} rollouts planned, {plan['to_run']} to run")
    return "\n".join(lines)


@job_group.command("show")
@click.argument("job_dir", type=click.Path(path_type=Path, exists=True, file_okay=False))
@click.option(
    "--format",
    "fmt",
    type=click.Choice(LEADERBOARD_FORMATS),
    default="table",
    show_default=True,
    help="table, csv, markdown or json (one record per cell).",
)
@leaderboard_out_option("Write")
def job_show_cmd(job_dir: Path, fmt: str, out: Path | None) -> None:
    """Print the leaderboard of JOB_DIR's cells: mean reward with its 95% interval,
    pass@k, tokens, cost and time per cell, highest mean reward first."""
    job = open_job(job_dir)
    rows = job.leaderboard()
    if not rows:
        raise SpecError(f"{job_dir}: no cell of job {job.name!r} has started yet")
    print_leaderboard(rows, fmt, out=out, title=f"Job {job.name}")
    if fmt == "table" and out is None:
        counts: dict[str, list[str]] = {}
        for cell in job.cells:
            counts.setdefault(cell.state(), []).append(cell.name)
        parts = [f"{len(v)} {k}" for k, v in counts.items()]
        click.echo(f"Cells: {len(job.cells)} ({', '.join(parts)}); job {job.state()}")
        for cell_state, names in counts.items():
            if cell_state != "complete":
                click.echo(f"  {cell_state}: {', '.join(names)}")


@job_group.command("compare")
@click.argument("job_dir", type=click.Path(path_type=Path, exists=True, file_okay=False))
@click.argument("cell_a")
@click.argument("cell_b")
@comparison_options
def job_compare_cmd(job_dir: Path, cell_a: str, cell_b: str, as_json: bool, top: int) -> None:
    """Compare two cells of JOB_DIR on the tasks both scored, as agentkit compare does:
    the difference A - B with its 95% interval and a paired t-test's p-value. A cell
    compared with itself is an error; a cell still running is compared on what it has
    finished, with a note that its figures are partial."""
    job = open_job(job_dir)
    a, b = job.cell(cell_a), job.cell(cell_b)
    if cell_a == cell_b:
        raise SpecError(
            f"{job_dir}: cell {cell_a!r} compared with itself agrees on every task; give two "
            "different cells"
        )
    print_comparison(a.open(), b.open(), as_json=as_json, top=top)
