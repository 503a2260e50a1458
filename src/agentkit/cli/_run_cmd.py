"""``agentkit run``: settings from flags, a config file and the resumed run; then run."""

from __future__ import annotations

import functools
import json
import sys
from pathlib import Path
from typing import Any, TextIO

import click
from click.core import ParameterSource

from agentkit.cli._config import load_run_config
from agentkit.cli._numbers import FINITE_FLOAT, finite_range
from agentkit.cli._options import directory_options, output_options, pairs_option
from agentkit.cli._results import planned_rollouts, plural, print_results, start_notes
from agentkit.cli._run_settings import RunSettings, resolve_settings
from agentkit.cli._signals import run_resumable
from agentkit.cli._stdout import reserved_stdout

__all__ = ["run_cmd"]


def _echo_err(message: str) -> None:
    click.echo(message, err=True)


@click.command("run")
@click.argument("taskset_spec", required=False)
@click.argument("harness", required=False)
@click.option(
    "--config",
    type=click.Path(path_type=Path, exists=True, dir_okay=False),
    help="TOML file with any of these settings (flags override it). [default: "
    "[tool.agentkit] of the nearest pyproject.toml]",
)
@click.option(
    "-n",
    "--rollouts",
    "--epochs",
    "rollouts",
    type=int,
    help="Rollouts per task (a group); on --resume, more extends the run. [default: 1]",
)
@click.option(
    "-c",
    "--concurrency",
    type=int,
    default=8,
    show_default=True,
    help="Rollouts running at the same time (also sizes the model connection pool).",
)
@click.option(
    "--model",
    help="Model name passed to the harness; 'scripted:FILE' serves a JSON model script.",
)
@click.option("--base-url", default=None, help="OpenAI-compatible endpoint of the model.")
@click.option(
    "--api-key-env",
    metavar="VAR",
    help="Environment variable holding the API key (the key is never stored). "
    "[default: OPENAI_API_KEY]",
)
@click.option("--temperature", type=FINITE_FLOAT, default=None, help="Sampling temperature.")
@click.option("--top-p", type=FINITE_FLOAT, default=None, help="Nucleus sampling probability.")
@click.option("--seed", type=int, default=None, help="Sampling seed sent with every request.")
@click.option(
    "--max-tokens",
    type=click.IntRange(min=1),
    help="Output tokens per model call (max_tokens).",
)
@click.option(
    "--max-turns", type=click.IntRange(min=1), default=None, help="Model calls per rollout."
)
@pairs_option(
    "-M",
    "--model-arg",
    "model_pairs",
    metavar="KEY=VALUE",
    help="Any other request field (JSON value, else text), e.g. -M reasoning_effort=low.",
)
@pairs_option(
    "--header",
    "header_pairs",
    metavar="'NAME: VALUE'",
    help="HTTP header sent with every model request (secret-looking ones are never stored).",
)
@pairs_option(
    "-H",
    "harness_pairs",
    metavar="NAME=VALUE",
    help="Harness option, checked against the harness's option schema.",
)
@pairs_option(
    "-T",
    "taskset_pairs",
    metavar="NAME=VALUE",
    help="Taskset option, checked against the provider's option schema.",
)
@pairs_option(
    "-S",
    "sandbox_pairs",
    metavar="NAME=VALUE",
    help="Sandbox option, checked against the sandbox's option schema.",
)
@click.option("--limit", type=int, default=None, help="Only the first K tasks.")
@pairs_option("--task", "task_ids", metavar="ID", help="Only this task id (repeatable).")
@directory_options(
    "Run directory to create. [default: runs/<time>-<harness>]",
    "Continue the run in this directory: missing rollouts and those that could not run.",
)
@click.option(
    "--sandbox",
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
    type=FINITE_FLOAT,
    help="Seconds one rollout may take (then it is recorded as a timeout).",
)
@click.option("--token-limit", type=click.IntRange(min=1), help="Tokens (in + out) per rollout.")
@click.option("--cost-limit", type=finite_range(min=0, min_open=True), help="USD per rollout.")
@click.option(
    "--message-limit", type=click.IntRange(min=1), default=None, help="Messages per rollout."
)
@click.option(
    "--run-token-limit",
    type=click.IntRange(min=1),
    help="Tokens for the whole run: then no new rollout starts (resumable).",
)
@click.option(
    "--run-cost-limit",
    type=finite_range(min=0, min_open=True),
    help="USD for the whole run: then no new rollout starts (resumable).",
)
@click.option(
    "--price",
    metavar="input=USD,output=USD[,cached_input=USD]",
    help="Model prices per million tokens (a local model); else from genai-prices.",
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
    type=FINITE_FLOAT,
    help="A rollout passes (for pass@k) when its total reward is at least this. [default: 1.0]",
)
@click.option(
    "--normalize-advantages",
    is_flag=True,
    help="Divide GRPO advantages by the group's standard deviation (+1e-6).",
)
@click.option(
    "--preflight/--no-preflight",
    default=True,
    help="Check the endpoint, API key, harness and sandbox before the first rollout.",
)
@click.option(
    "--executor",
    type=click.Choice(["local", "ray"]),
    default="local",
    show_default=True,
    help="Where rollouts run: in this process, or as Ray tasks across a cluster "
    "(pip install 'agentkit[ray]').",
)
@click.option(
    "--ray-address",
    metavar="ADDR",
    help="The Ray cluster to join (--executor ray). [default: RAY_ADDRESS, else a cluster "
    "started with 'ray start' on this machine, else a new local one that ends with the run]",
)
@click.option(
    "--ray-cpus",
    type=finite_range(min=0),
    help="CPUs a rollout asks Ray for when its task gives none (--executor ray). [default: 1]",
)
@click.option(
    "--ray-artifacts-dir",
    type=click.Path(path_type=Path, file_okay=False),
    help="A directory every node sees at this path: rollouts keep their files there "
    "instead of sending them to the driver (--executor ray).",
)
@pairs_option(
    "--ray-init",
    "ray_init_pairs",
    metavar="KEY=VALUE",
    help="An argument for ray.init (JSON value, else text) when the run starts or joins Ray "
    "(--executor ray), e.g. --ray-init object_store_memory=200000000.",
)
@click.option(
    "--model-proxy/--no-model-proxy",
    "model_proxy",
    default=None,
    help="Pass every model call through agentkit's model proxy and record it in calls/. "
    "[default: on]",
)
@click.option(
    "--token-ids",
    is_flag=True,
    default=None,
    help="Ask the server for token ids and logprobs on the agent's behalf and record them "
    "(vLLM's return_token_ids; the agent's answers stay as it asked).",
)
@click.option(
    "--session-header",
    metavar="NAME",
    help="Header carrying each rollout's session id with every model call (a router keeps "
    "the rollout on one replica's prefix cache). [default: X-Session-ID]",
)
@click.option("--no-session-header", is_flag=True, default=None, help="Send no session header.")
@click.option(
    "--cache-salt",
    metavar="VALUE",
    help="vLLM's cache_salt, added to every chat, completions and Responses request "
    "(separates policy versions in the prefix cache).",
)
@click.option(
    "--translate-to-chat",
    is_flag=True,
    default=None,
    help="Serve the agent's Anthropic Messages and OpenAI Responses calls from the server's "
    "chat completions, which return token ids (with --token-ids: exact tokens for Claude "
    "Code and Codex against vLLM).",
)
@output_options(
    "Print the resolved plan and run nothing.",
    "Show the progress bar. [default: when stderr is a terminal]",
    "Print only the summary JSON.",
)
@click.pass_context
def run_cmd(ctx: click.Context, /, **params: Any) -> None:
    """Run TASKSET_SPEC (provider:argument) with HARNESS and score every rollout.

    Shows a progress bar while it runs, then a results table with tokens and
    cost. Settings may come from --config FILE (or [tool.agentkit] in
    pyproject.toml); flags override them. With --resume DIR, TASKSET_SPEC,
    HARNESS and the other settings default to those of the run in DIR.

    Only that output goes to stdout: whatever else prints while the command
    runs (Ray, plugins, harnesses, the programs they start) goes to stderr.
    """
    with reserved_stdout() as out:
        _run(ctx, params, out)


def _run(ctx: click.Context, params: dict[str, Any], out: TextIO) -> None:
    """``agentkit run``, its own output (a plan, a table, JSON) written to ``out``."""
    resume: Path | None = params["resume"]
    config = load_run_config(
        ctx.command, params["config"], use_pyproject=resume is None and params["config"] is None
    )
    for name, value in config.values.items():
        if ctx.get_parameter_source(name) in (ParameterSource.DEFAULT, None):
            params[name] = value
    settings: RunSettings = resolve_settings(params, config.tables, config.source, resume)
    env = settings.build_env()
    options = settings.options
    as_json: bool = params["as_json"]
    if params["dry_run"]:
        plan = env.plan(options)
        click.echo(json.dumps(plan, indent=2, default=str) if as_json else _plan(plan), file=out)
        return
    progress = params["progress"]
    show_progress = sys.stderr.isatty() if progress is None else progress
    if as_json and progress is None:
        show_progress = False

    def on_start(info: dict[str, Any]) -> None:
        for line in start_notes(info, as_json=as_json):
            _echo_err(line)
        if not as_json:
            what = (
                f"{plural(info['to_run'], 'rollout')} to run ({plural(info['tasks'], 'task')} "
                f"× {info['rollouts_per_task']})"
            )
            extra = []
            if info["already_finished"]:
                extra.append(f"{info['already_finished']} of {info['planned']} already finished")
            if info.get("rerun"):
                extra.append(f"{plural(info['rerun'], 'rollout')} to run again")
            _echo_err(what + (f"; {', '.join(extra)}" if extra else ""))

    results = run_resumable(
        functools.partial(env.evaluate, options, progress=show_progress, on_start=on_start),
        resume or options.out,
        "agentkit run",
    )
    summary = results.summary
    if as_json:
        click.echo(json.dumps(summary, indent=2, default=str), file=out)
        return
    print_results(summary, title=f"{settings.taskset_spec} × {settings.harness}", file=out)
    click.echo(f"Run directory: {results.run_dir}", file=out)
    if summary.get("stopped"):
        _echo_err(
            f"Stopped: {summary['stopped']}. Continue with a higher limit: "
            f"agentkit run --resume {results.run_dir} ..."
        )
    elif summary.get("errors") and results.run_dir is not None:
        _echo_err(f"See why: agentkit show {results.run_dir} --failed")


def _plan(plan: dict[str, Any]) -> str:
    """``--dry-run``: the resolved plan for people."""
    ctx = plan["context"]
    harness = plan["harness"]
    lines = [
        "Dry run: nothing is run or written.",
        f"Run directory: {plan['run_dir'] or '-'}" + ("  (resume)" if plan["resume"] else ""),
        f"Taskset: {plan['taskset'].get('spec') or plan['taskset'].get('taskset_id')}"
        + (f"  options {plan['taskset']['options']}" if plan["taskset"].get("options") else ""),
        f"Harness: {harness.get('name') or harness.get('class')}"
        + (f"  options {harness['options']}" if harness.get("options") else ""),
        f"Model: {ctx.get('model') or '-'}  endpoint: {ctx.get('base_url') or '-'}  "
        f"API key variable: {ctx.get('api_key_env')}",
    ]
    if ctx.get("sampling_args"):
        lines.append(f"Sampling: {json.dumps(ctx['sampling_args'])}")
    if ctx.get("headers"):
        lines.append(f"Headers: {json.dumps(ctx['headers'])}")
    limits = {k: v for k, v in (ctx.get("limits") or {}).items() if v is not None}
    run_limits = {
        k: v
        for k, v in plan["options"].items()
        if k in ("timeout", "run_token_limit", "run_cost_limit") and v is not None
    }
    if limits or run_limits:
        lines.append(f"Limits: {json.dumps({**limits, **run_limits})}")
    sandbox = plan["sandbox"]
    lines.append(
        f"Sandbox: {sandbox['name']}  options {sandbox['options']}"
        if sandbox.get("used")
        else "Sandbox: none needed"
    )
    pricing = plan.get("pricing")
    lines.append(f"Prices: {json.dumps(pricing) if pricing else 'unknown'}")
    lines.append(f"Executor: {plan['options'].get('executor') or 'local'}")
    if plan.get("unsupported_warning"):
        lines.append(f"Left out: {plan['unsupported_warning']}")
    tasks = plan["tasks"]
    shown = ", ".join(tasks[:10]) + (f", ... ({len(tasks) - 10} more)" if len(tasks) > 10 else "")
    lines.append(f"Tasks ({len(tasks)}): {shown}")
    lines.append(f"Rollouts: {plan['planned']} planned {planned_rollouts(plan, len(tasks))}")
    for path, (was, now) in (plan.get("resume_changes") or {}).items():
        lines.append(f"Changes on resume: {path.split('.')[-1]}: {was} -> {now}")
    return "\n".join(lines)
