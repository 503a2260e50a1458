"""``agentkit run``, ``agentkit describe`` and ``agentkit show``."""

from __future__ import annotations

import contextlib
import json
import signal
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click

from agentkit._errors import SpecError

__all__ = ["describe_cmd", "run_cmd", "show_cmd"]


def _parse_options(kind: str, name: str, pairs: tuple[str, ...], flag: str) -> dict[str, Any]:
    from agentkit import registry

    if not pairs:
        return {}
    return registry.option_schema(kind, name).parse_cli(pairs, flag=flag)  # type: ignore[arg-type]


def _build_env(
    taskset_spec: str,
    harness: str,
    h_options: dict[str, Any],
    t_options: dict[str, Any],
    sandbox: str,
) -> Any:
    from agentkit.env import AgentEnv

    return AgentEnv.from_names(
        taskset_spec, harness, taskset_options=t_options, sandbox=sandbox, **h_options
    )


def _default_out(harness: str) -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    base = Path("runs") / f"{stamp}-{harness}"
    path, n = base, 1
    while path.exists():
        n += 1
        path = base.with_name(f"{base.name}-{n}")
    return path


def _echo_err(message: str) -> None:
    click.echo(message, err=True)


@click.command("run")
@click.argument("taskset_spec", required=False)
@click.argument("harness", required=False)
@click.option(
    "-n",
    "--rollouts",
    "rollouts",
    type=int,
    default=None,
    help="Rollouts per task (a group). [default: 1]",
)
@click.option(
    "-c",
    "--concurrency",
    type=int,
    default=8,
    show_default=True,
    help="Rollouts running at the same time.",
)
@click.option("--model", default=None, help="Model name passed to the harness.")
@click.option("--base-url", default=None, help="OpenAI-compatible endpoint of the model.")
@click.option(
    "--api-key-env",
    default=None,
    metavar="VAR",
    help="Environment variable holding the API key (the key is never stored). "
    "[default: OPENAI_API_KEY]",
)
@click.option(
    "-H",
    "harness_pairs",
    multiple=True,
    metavar="NAME=VALUE",
    help="Harness option, checked against the harness's option schema.",
)
@click.option(
    "-T",
    "taskset_pairs",
    multiple=True,
    metavar="NAME=VALUE",
    help="Taskset option, checked against the provider's option schema.",
)
@click.option(
    "-S",
    "sandbox_pairs",
    multiple=True,
    metavar="NAME=VALUE",
    help="Sandbox option, checked against the sandbox's option schema.",
)
@click.option("--limit", type=int, default=None, help="Only the first K tasks.")
@click.option(
    "--task", "task_ids", multiple=True, metavar="ID", help="Only this task id (repeatable)."
)
@click.option(
    "--out",
    type=click.Path(path_type=Path),
    default=None,
    help="Run directory to create. [default: runs/<time>-<harness>]",
)
@click.option(
    "--resume",
    type=click.Path(path_type=Path, exists=True, file_okay=False),
    default=None,
    help="Continue the run in this directory (only missing rollouts run).",
)
@click.option(
    "--sandbox",
    default=None,
    help="Sandbox for tasks that need one (local, host, ...). [default: local]",
)
@click.option(
    "--keep-sandboxes",
    is_flag=True,
    help="Keep every rollout's sandbox files (failed ones are always kept).",
)
@click.option(
    "--allow-network", is_flag=True, help="Let sandboxes of tasks that ask for network have it."
)
@click.option(
    "--timeout",
    type=float,
    default=None,
    help="Seconds one rollout may take (then it is recorded as a timeout).",
)
@click.option(
    "--max-retries",
    type=int,
    default=3,
    show_default=True,
    help="Retries of retryable failures (rate limits, 5xx, connection, sandbox start).",
)
@click.option(
    "--pass-threshold",
    type=float,
    default=None,
    help="A rollout passes (for pass@k) when its total reward is at least this. [default: 1.0]",
)
@click.option(
    "--normalize-advantages",
    is_flag=True,
    help="Divide GRPO advantages by the group's standard deviation (+1e-6).",
)
@click.option(
    "--progress/--no-progress",
    "progress",
    default=None,
    help="Show the progress bar. [default: when stderr is a terminal]",
)
@click.option("--json", "as_json", is_flag=True, help="Print only the summary JSON.")
def run_cmd(
    taskset_spec: str | None,
    harness: str | None,
    rollouts: int | None,
    concurrency: int,
    model: str | None,
    base_url: str | None,
    api_key_env: str | None,
    harness_pairs: tuple[str, ...],
    taskset_pairs: tuple[str, ...],
    sandbox_pairs: tuple[str, ...],
    limit: int | None,
    task_ids: tuple[str, ...],
    out: Path | None,
    resume: Path | None,
    sandbox: str | None,
    keep_sandboxes: bool,
    allow_network: bool,
    timeout: float | None,
    max_retries: int,
    pass_threshold: float | None,
    normalize_advantages: bool,
    progress: bool | None,
    as_json: bool,
) -> None:
    """Run TASKSET_SPEC (provider:argument) with HARNESS and score every rollout.

    Shows a progress bar while it runs, then a results table and the run
    directory. With --resume DIR, TASKSET_SPEC and HARNESS (and the other
    settings) default to those of the run in DIR.
    """
    stored: dict[str, Any] = {}
    if resume is not None:
        if out is not None:
            raise SpecError("give either --out (a new run) or --resume (an existing run)")
        from agentkit.env._store import RunStore

        stored = RunStore(resume).read_manifest()
    if taskset_spec is None or harness is None:
        if not stored:
            raise click.UsageError("TASKSET_SPEC and HARNESS are required (unless --resume DIR)")
        taskset_spec = taskset_spec or stored["taskset"].get("spec")
        harness = harness or stored["harness"].get("name")
        if not taskset_spec or not harness:
            raise SpecError(f"{resume} was not started from names; pass TASKSET_SPEC and HARNESS")
    h_options = _parse_options("harness", harness, harness_pairs, "-H")
    t_options = _parse_options("taskset", _provider(taskset_spec), taskset_pairs, "-T")
    sb_name = sandbox
    sb_options: dict[str, Any] = {}
    if stored:
        # the stored options are the defaults; -T/-H given again override them
        # one by one (and a real change is then refused by the identity check)
        if taskset_spec == stored["taskset"].get("spec"):
            t_options = {**(stored["taskset"].get("options") or {}), **t_options}
        if harness == stored["harness"].get("name"):
            h_options = {**(stored["harness"].get("options") or {}), **h_options}
        ctx = stored.get("context", {})
        model = model if model is not None else ctx.get("model")
        if base_url is None:
            base_url = ctx.get("base_url")
            if base_url and "***" in base_url:
                raise SpecError(
                    f"the base URL of {resume} ({base_url}) held credentials, which are not "
                    "stored; pass it again with --base-url"
                )
        if api_key_env is None and ctx.get("api_key_env") not in (None, "OPENAI_API_KEY"):
            api_key_env = ctx.get("api_key_env")
        run_options = stored.get("options") or {}
        if pass_threshold is None:
            pass_threshold = run_options.get("pass_threshold")
        normalize_advantages = normalize_advantages or bool(run_options.get("normalize_advantages"))
        plan = stored.get("plan", {})
        rollouts = rollouts if rollouts is not None else plan.get("rollouts_per_task")
        limit = limit if limit is not None else plan.get("limit")
        if not task_ids and plan.get("requested_task_ids"):
            task_ids = tuple(plan["requested_task_ids"])
        sb = stored.get("sandbox", {})
        if sb.get("used"):
            sb_name = sb_name or sb.get("name")
            if not sandbox_pairs:
                sb_options = {
                    k: v for k, v in (sb.get("options") or {}).items() if k != "allow_network"
                }
                allow_network = allow_network or bool(
                    (sb.get("options") or {}).get("allow_network")
                )
    if sandbox_pairs:
        sb_options = _parse_options("sandbox", sb_name or "local", sandbox_pairs, "-S")
    hidden = [k for k, v in {**h_options, **t_options, **sb_options}.items() if v == "***"]
    if hidden:
        raise SpecError(
            f"option(s) {', '.join(hidden)} of {resume} hold secrets that are not stored; "
            "pass them again with -H/-T/-S NAME=VALUE"
        )
    env = _build_env(taskset_spec, harness, h_options, t_options, sb_name or "local")
    run_dir = None if resume is not None else (out or _default_out(harness))
    show_progress = sys.stderr.isatty() if progress is None else progress
    if as_json and progress is None:
        show_progress = False

    def on_start(info: dict[str, Any]) -> None:
        problems = info.get("taskset_problems") or []
        if problems:
            listing = "".join(f"\n  - {p}" for p in problems)
            _echo_err(f"Warning: {len(problems)} task(s) could not be loaded:{listing}")
        if info.get("repair_note"):
            _echo_err(f"Note: {info['repair_note']}")
        if info.get("sandbox_warning"):
            _echo_err(f"Warning: {info['sandbox_warning']}")
        if not as_json:
            what = f"{info['to_run']} rollouts to run"
            if info["already_finished"]:
                what += f" ({info['already_finished']} of {info['planned']} already finished)"
            _echo_err(f"Run directory: {info['run_dir']}; {what}")

    stop_signal: list[int] = []
    try:
        with _terminate_as_interrupt(stop_signal):
            results = env.run(
                rollouts_per_task=1 if rollouts is None else rollouts,
                concurrency=concurrency,
                limit=limit,
                task_ids=list(task_ids) or None,
                timeout=timeout,
                max_retries=max_retries,
                out=run_dir,
                resume=resume,
                model=model,
                base_url=base_url,
                api_key_env=api_key_env,
                sandbox=sb_name,
                sandbox_options=sb_options,
                keep_sandboxes=keep_sandboxes,
                allow_network=allow_network,
                pass_threshold=1.0 if pass_threshold is None else pass_threshold,
                normalize_advantages=normalize_advantages,
                progress=show_progress,
                on_start=on_start,
            )
    except KeyboardInterrupt:
        where = resume or run_dir
        _echo_err(
            f"Interrupted. Finished rollouts are saved in {where}; continue with: "
            f"agentkit run --resume {where}"
        )
        sys.exit(128 + (stop_signal[0] if stop_signal else signal.SIGINT))
    summary = results.summary
    if as_json:
        click.echo(json.dumps(summary, indent=2, default=str))
        return
    _print_results(summary, title=f"{taskset_spec} × {harness}")
    click.echo(f"Run directory: {results.run_dir}")


def _provider(spec: str) -> str:
    from agentkit import registry

    return registry.parse_taskset_spec(spec)[0]


def _print_results(summary: dict[str, Any], *, title: str) -> None:
    from rich.console import Console

    from agentkit.env._progress import render_results_table

    console = Console(soft_wrap=False)
    console.print(render_results_table(summary, title=title))
    kinds = summary.get("error_kinds") or {}
    firsts = summary.get("first_error_by_kind") or {}
    for kind, count in sorted(kinds.items()):
        console.print(
            f"[red]{count} rollout(s) with {kind}[/red]: {firsts.get(kind, '')}",
            markup=True,
            highlight=False,
        )
    cb = summary.get("trace_callback") or {}
    if cb.get("error"):
        console.print(f"trace_callback failed: {cb['error']}", highlight=False)


@click.command("describe")
@click.argument("taskset_spec")
@click.argument("harness")
@click.option("-H", "harness_pairs", multiple=True, metavar="NAME=VALUE", help="Harness option.")
@click.option("-T", "taskset_pairs", multiple=True, metavar="NAME=VALUE", help="Taskset option.")
@click.option("--json", "as_json", is_flag=True, help="Print the compiled rubric as JSON.")
def describe_cmd(
    taskset_spec: str,
    harness: str,
    harness_pairs: tuple[str, ...],
    taskset_pairs: tuple[str, ...],
    as_json: bool,
) -> None:
    """Print the rubric compiled for TASKSET_SPEC and HARNESS (in scoring order)."""
    h_options = _parse_options("harness", harness, harness_pairs, "-H")
    t_options = _parse_options("taskset", _provider(taskset_spec), taskset_pairs, "-T")
    env = _build_env(taskset_spec, harness, h_options, t_options, "local")
    manifest = env.describe_rubric()
    if as_json:
        click.echo(json.dumps(manifest, indent=2))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"Compiled rubric: {taskset_spec} × {harness}")
    for col in ("#", "metric", "weight", "from", "function", "description"):
        table.add_column(col)
    for i, m in enumerate(manifest["metrics"], start=1):
        table.add_row(
            str(i), m["name"], f"{m['weight']:g}", m["origin"], m["function"], m["description"]
        )
    console = Console(soft_wrap=False)
    console.print(table)
    if not manifest["metrics"]:
        console.print("No reward functions: every rollout would get reward 0.")
    console.print(f"Total reward: {manifest['total']}.", highlight=False)


@click.command("show")
@click.argument("run_dir", type=click.Path(path_type=Path, exists=True, file_okay=False))
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
def show_cmd(run_dir: Path, as_json: bool) -> None:
    """Summarize a finished or partial run directory (nothing is modified)."""
    from agentkit.env._store import RunStore
    from agentkit.env._summary import summarize

    store = RunStore(run_dir)
    manifest = store.read_manifest()
    records, note = store.load_rollouts(repair=False)
    plan = manifest.get("plan", {})
    n = int(plan.get("rollouts_per_task") or 1)
    example = {r.task_id: r.example_id for r in records}
    planned = [(t, example.get(t, t.split(":", 1)[-1])) for t in plan.get("task_ids", [])]
    opts = manifest.get("options", {})
    summary = summarize(
        records,
        planned,
        n,
        threshold=float(opts.get("pass_threshold", 1.0)),
        complete=len(records) >= len(planned) * n,
        extra={"run_dir": str(run_dir), "repair_note": note},
    )
    stored_summary = store.summary_path.exists()
    summary["summary_written"] = stored_summary
    if as_json:
        click.echo(json.dumps(summary, indent=2, default=str))
        return
    ts = manifest.get("taskset", {})
    h = manifest.get("harness", {})
    ctx = manifest.get("context", {})
    state = "complete" if summary["complete"] else "partial (resume with agentkit run --resume)"
    click.echo(f"Run: {run_dir}  [{state}]")
    click.echo(
        f"Taskset: {ts.get('spec') or ts.get('taskset_id')}  Harness: "
        f"{h.get('name') or h.get('class')}  Model: {ctx.get('model')}"
    )
    if note:
        click.echo(f"Note: {note} (it would be dropped on resume)")
    if manifest.get("sandbox_warning"):
        click.echo(f"Warning: {manifest['sandbox_warning']}")
    _print_results(summary, title=str(run_dir))


@contextlib.contextmanager
def _terminate_as_interrupt(received: list[int]) -> Iterator[None]:
    """Treat SIGTERM like Ctrl-C: stop promptly, leave the run resumable, clean up.

    SIGTERM's number is appended to ``received`` so the exit status can say
    which signal stopped the run (130 for Ctrl-C, 143 for SIGTERM).
    """

    def handler(signum: int, _frame: object) -> None:
        received.append(signum)
        raise KeyboardInterrupt

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
