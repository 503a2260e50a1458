"""``agentkit show`` (a run, one rollout, the failed ones) and ``agentkit runs`` (a folder)."""

from __future__ import annotations

import datetime
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import click

import agentkit.runs
from agentkit._convert import unstructure
from agentkit._errors import SpecError
from agentkit.cli._compare_cmd import leaderboard_command
from agentkit.cli._options import leaderboard_out_option
from agentkit.cli._results import money, print_results
from agentkit.stats import LEADERBOARD_FORMATS
from agentkit.training import token_fidelity

__all__ = ["runs_cmd", "show_cmd"]


def _open(run_dir: Path) -> Any:
    return agentkit.runs.open(run_dir)


@click.command("show")
@click.argument("run_dir", type=click.Path(path_type=Path, exists=True, file_okay=False))
@click.option(
    "--rollout",
    "rollout_id",
    metavar="ID",
    help="Print one rollout (an id, its prefix, or a task id): task, transcript, verifier, tokens.",
)
@click.option("--failed", is_flag=True, help="List the rollouts that did not pass, with why.")
@click.option(
    "--calls",
    is_flag=True,
    help="With --rollout: list its model calls (protocol, status, timing, usage, token ids).",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead.")
def show_cmd(
    run_dir: Path, rollout_id: str | None, failed: bool, calls: bool, as_json: bool
) -> None:
    """Summarize a finished or partial run directory (nothing is modified).

    With --rollout ID (or a unique prefix of it) prints that rollout in full,
    and with --calls its model calls as the model proxy recorded them; with
    --failed lists the rollouts that errored, hit a limit, could not run or
    scored below the pass threshold.
    """
    run = _open(run_dir)
    if calls and rollout_id is None:
        raise click.UsageError("--calls lists one rollout's model calls: give --rollout ID")
    if rollout_id is not None:
        if calls:
            _show_calls(run, _find_rollout(run, rollout_id), as_json)
        else:
            _show_rollout(run, rollout_id, as_json)
        return
    if failed:
        _show_failed(run, as_json)
        return
    summary = run.summary()
    summary["summary_written"] = run.stored_summary() is not None
    if as_json:
        click.echo(json.dumps(summary, indent=2, default=str))
        return
    info = run.info
    state = "complete" if summary["complete"] else "partial (resume with agentkit run --resume)"
    click.echo(f"Run: {run_dir}  [{state}]")
    click.echo(f"Taskset: {info.taskset}  Harness: {info.harness}  Model: {info.model}")
    settings = {**info.sampling_args, **{k: v for k, v in info.limits.items() if v is not None}}
    if settings:
        click.echo(f"Settings: {json.dumps(settings)}")
    if summary.get("repair_note"):
        click.echo(f"Note: {summary['repair_note']} (it would be dropped on resume)")
    if info.manifest.get("sandbox_warning"):
        click.echo(f"Warning: {info.manifest['sandbox_warning']}")
    print_results(summary, title=str(run_dir))
    if summary.get("stopped"):
        click.echo(f"Stopped: {summary['stopped']}")


def _echo_fields(records: Iterable[Any], fields: str) -> None:
    """``--json``: a list of each record's ``fields`` (names apart by spaces; a path as
    text)."""
    names = fields.split()
    click.echo(
        json.dumps([{name: _plain(getattr(r, name)) for name in names} for r in records], indent=2)
    )


def _plain(value: Any) -> Any:
    return str(value) if isinstance(value, Path) else value


def _show_failed(run: Any, as_json: bool) -> None:
    rows = list(run.iter_rollouts(failed=True))
    if as_json:
        _echo_fields(
            rows,
            "rollout_id task_id status error_kind reward infrastructure reason",
        )
        return
    if not rows:
        click.echo(f"No failed rollouts in {run.path} ({len(run)} finished).")
        return
    width = max(len(r.rollout_id) for r in rows)
    for r in rows:
        tag = " [could not run]" if r.infrastructure else ""
        click.echo(f"{r.rollout_id:<{width}}  {r.reason}{tag}")
    click.echo(
        f"{len(rows)} of {len(run)} rollouts did not pass. Details: agentkit show {run.path} "
        "--rollout ID; run again: agentkit run --resume "
        f"{run.path} (could not run) [--retry-errors (errored)]"
    )


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, list):  # content parts
        return "".join(
            str(p.get("text", "")) if isinstance(p, dict) else str(p) for p in value
        ) or json.dumps(value, ensure_ascii=False)
    return json.dumps(value, ensure_ascii=False, indent=2)


def _find_rollout(run: Any, rollout_id: str) -> Any:
    """The rollout ``rollout_id`` names (an id, a unique prefix, or a task id: its first)."""
    try:
        r = run.rollout(rollout_id)
    except KeyError as exc:
        # an item or task id names its task's rollouts: show the first, say so
        ids = run.rollout_ids()
        matches = [
            rid
            for rid in ids
            if rid.startswith(rollout_id) or run.rollout(rid).task_id == rollout_id
        ]
        tasks = {run.rollout(rid).task_id for rid in matches}
        if len(tasks) != 1:
            raise SpecError(str(exc.args[0])) from None
        matches.sort(key=lambda rid: run.rollout(rid).rollout_index)
        r = run.rollout(matches[0])
        click.echo(
            f"({len(matches)} rollouts of {r.task_id}; showing {r.rollout_id}; "
            f"the others: {', '.join(matches[1:])})",
            err=True,
        )
    return r


def _show_rollout(run: Any, rollout_id: str, as_json: bool) -> None:
    r = _find_rollout(run, rollout_id)
    task = run.tasks().get(r.task_id)
    if as_json:
        data = r.to_json()
        data["task"] = None if task is None else {"input": task.input, "target": task.target}
        data["token_fidelity"] = token_fidelity(run.path, r.rollout_id, r.raw)
        data["steps"] = [
            {"seq": s.seq, "type": s.type, "timestamp": s.timestamp, "data": s.data}
            for s in run.steps(r.rollout_id)
        ]
        click.echo(json.dumps(data, indent=2, default=str))
        return
    out: list[str] = []
    out.append(f"Rollout {r.rollout_id}  (task {r.task_id}, rollout {r.rollout_index})")
    verdict = "passed" if r.passed else "did not pass"
    reward = "none" if r.reward is None else f"{r.reward:g}"
    out.append(f"Status: {r.status}  reward: {reward}  ({verdict})")
    if r.error:
        out.append(f"Error ({r.error_kind}): {r.error}")
    if r.infrastructure:
        out.append("It could not run: agentkit run --resume runs it again.")
    if task is not None:
        out.append("")
        out.append("== Task ==")
        out.append(_text(task.input))
        if task.target is not None:
            out.append(f"Target: {_text(task.target)}")
    out.append("")
    out.append("== Transcript ==")
    for message in r.messages:
        role = message.get("role", "?")
        content = message.get("content")
        header = f"[{role}]"
        if message.get("tool_call_id"):
            header += f" (result of {message['tool_call_id']})"
        out.append(header + (f" {_text(content)}" if content not in (None, "") else ""))
        for call in message.get("tool_calls") or []:
            fn = call.get("function") or {}
            out.append(f"  -> tool call {fn.get('name')}({fn.get('arguments', '')})")
    if not r.messages:
        out.append(_text(r.output) if r.output else "(no messages: see the steps below)")
    out.append("")
    out.append("== Verifier ==")
    for name, value in sorted(r.rewards.items()):
        out.append(f"{name}: {value:g}" if isinstance(value, (int, float)) else f"{name}: {value}")
    for err in r.scoring_errors:
        out.append(f"{err.get('metric')} raised: {err.get('error')}")
    for label, verifier in _verifiers(r.raw):
        out.append(f"{label}: {json.dumps(verifier, ensure_ascii=False, default=str)[:2000]}")
    for key in ("reason", "verifier_output", "stdout", "stderr"):
        if isinstance(r.raw.get(key), str) and r.raw[key].strip():
            out.append(f"{key}: {r.raw[key].strip()[-2000:]}")
    out.append("")
    t = r.timings
    parts = [
        f"{name} {value:.2f}s"
        for name, value in (
            ("total", t.duration_s),
            ("harness", t.harness_s),
            ("scoring", t.scoring_s),
        )
        if isinstance(value, (int, float))
    ]
    if t.started_at:
        started = datetime.datetime.fromtimestamp(t.started_at).isoformat(timespec="seconds")
        parts.insert(0, f"started {started}")
    out.append(f"Timings: {', '.join(parts)}; attempts {r.attempts}")
    u = r.usage
    if u.requests or u.input_tokens or u.output_tokens:
        out.append(
            f"Tokens: {u.input_tokens} in ({u.cached_tokens} cached), {u.output_tokens} out "
            f"({u.reasoning_tokens} reasoning), {u.requests} requests; cost {money(r.cost)}"
        )
    else:
        out.append("Tokens: none (no model calls)")
    out += _calls_lines(run, r)
    out.append(f"Token ids: {token_fidelity(run.path, r.rollout_id, r.raw)}")
    for retry in r.retries:
        out.append(f"Retried after: {retry.get('error_kind')}: {retry.get('error')}")
    steps = run.steps(r.rollout_id)
    if steps:
        out.append(f"Steps: {len(steps)} events ({', '.join(_step_counts(steps))})")
        for step in steps:
            if step.type in ("sandbox.exec", "tool.call", "tool.result", "error", "log"):
                out.append(f"  [{step.seq}] {step.type}: {_brief(step.data)}")
    click.echo("\n".join(out))


def _calls_lines(run: Any, r: Any) -> list[str]:
    """How many model calls the rollout made, and the command that lists them."""
    if not r.calls:
        return []
    return [f"Model calls: {r.calls} (agentkit show {run.path} --rollout {r.rollout_id} --calls)"]


def _show_calls(run: Any, r: Any, as_json: bool) -> None:
    """``--rollout ID --calls``: one line per model call, with what went wrong."""
    calls = run.calls(r.rollout_id)
    if as_json:
        click.echo(json.dumps([unstructure(c) for c in calls], indent=2, default=str))
        return
    if not calls:
        click.echo(
            f"Rollout {r.rollout_id} has no recorded model calls (a harness that calls no "
            "model, or a run without the model proxy)."
        )
        return
    click.echo(f"Model calls of {r.rollout_id} ({len(calls)}), in the order they started:")
    for c in calls:
        ttft = "-" if c.ttft_s is None else f"{c.ttft_s * 1000:.0f}ms"
        usage = (
            "" if c.usage is None else f" {c.usage.input_tokens} in, {c.usage.output_tokens} out"
        )
        served = f" (served from {c.upstream_protocol})" if c.upstream_protocol else ""
        kind = f"{c.protocol}{served}{' stream' if c.stream else ''}"
        status = c.status if c.status is not None else "no answer"
        finish = f" {c.finish_reason}" if c.finish_reason else ""
        click.echo(
            f"[{c.index}] {kind} {c.model or '-'}  {status}{finish}  ttft {ttft}, "
            f"total {c.duration_s * 1000:.0f}ms;{usage}"
        )
        if c.has_tokens:
            lp = "with logprobs" if c.completion_logprobs is not None else "no logprobs"
            click.echo(
                f"    token ids: {len(c.prompt_token_ids or [])} prompt, "
                f"{len(c.completion_token_ids or [])} completion ({lp})"
            )
        if c.token_note:
            click.echo(f"    tokens: {c.token_note}")
        if c.forwarded:
            click.echo(f"    the proxy added: {json.dumps(c.forwarded)}")
        if c.error:
            click.echo(f"    error: {c.error}")


def _verifiers(raw: dict[str, Any]) -> list[tuple[str, Any]]:
    """A harness's verifier output, wherever it keeps it: ``raw["verifier"]``, one level
    down (``raw["harbor"]["verifier"]``), or per step (``raw[...]["steps"][i]["verifier"]``)."""
    found: list[tuple[str, Any]] = []
    if raw.get("verifier"):
        found.append(("verifier", raw["verifier"]))
    for name, inner in raw.items():
        if not isinstance(inner, dict):
            continue
        if inner.get("verifier"):
            found.append((f"{name} verifier", inner["verifier"]))
        for i, step in enumerate(inner.get("steps") or []):
            if isinstance(step, dict) and step.get("verifier"):
                found.append((f"step {step.get('name', i)} verifier", step["verifier"]))
    return found


def _brief(data: dict[str, Any]) -> str:
    text = json.dumps(data, ensure_ascii=False, default=str)
    return text if len(text) <= 300 else text[:297] + "..."


def _step_counts(steps: list[Any]) -> list[str]:
    counts: dict[str, int] = {}
    for s in steps:
        counts[s.type] = counts.get(s.type, 0) + 1
    return [f"{k} {v}" for k, v in counts.items()]


@click.command("runs")
@click.argument("paths", nargs=-1, type=click.Path(path_type=Path, file_okay=False))
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@click.option(
    "--compare",
    is_flag=True,
    help="A leaderboard of the runs given (run directories or folders of runs): mean reward "
    "with its 95% CI clustered by task, pass@k, tokens, cost and time.",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(LEADERBOARD_FORMATS),
    help="With --compare: table (default), csv, markdown or json.",
)
@leaderboard_out_option("With --compare: write", metavar="FILE")
def runs_cmd(
    paths: tuple[Path, ...], as_json: bool, compare: bool, fmt: str | None, out: Path | None
) -> None:
    """List the run directories under FOLDER (default: runs), newest first.

    With --compare, print a leaderboard of the runs given instead: each
    argument a run directory or a folder of runs (default: runs).
    """
    if compare:
        if as_json and fmt not in (None, "json"):
            raise click.UsageError("--json is --format json: give one of them")
        chosen = "json" if as_json else fmt or "table"
        leaderboard_command(paths or (Path("runs"),), chosen, out)
        return
    if fmt is not None or out is not None:
        raise click.UsageError("--format and --out go with --compare")
    if len(paths) > 1:
        raise click.UsageError("give one FOLDER of runs (or --compare RUN...)")
    folder = paths[0] if paths else Path("runs")
    listings = agentkit.runs.list_runs(folder)
    if as_json:
        _echo_fields(
            listings,
            "path created_at taskset harness model planned finished errors mean_reward cost "
            "complete error",
        )
        return
    if not listings:
        click.echo(f"No runs in {folder}.")
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"Runs in {folder}")
    for column in ("run", "date", "taskset", "harness", "model", "rollouts", "errors", "reward"):
        table.add_column(
            column, overflow="fold", justify="right" if column in ("rollouts", "errors") else "left"
        )
    for r in listings:
        date = datetime.datetime.fromtimestamp(r.created_at).strftime("%Y-%m-%d %H:%M")
        table.add_row(
            r.path.name,
            date,
            r.taskset or "-",
            r.harness or "-",
            r.model or "-",
            "?" if r.error else f"{r.finished}/{r.planned}",
            "?" if r.error else str(r.errors),
            "-" if r.mean_reward is None else f"{r.mean_reward:.3f}",
        )
    console = Console(soft_wrap=False)
    if not console.is_terminal:  # piped: no need to fold paths at 80 columns
        console = Console(soft_wrap=False, width=200)
    console.print(table)
    for r in listings:
        if r.error:  # listed from its manifest alone: why its rollouts are not counted
            console.print(
                f"{r.path.name}: cannot read it: {r.error}", highlight=False, markup=False
            )
