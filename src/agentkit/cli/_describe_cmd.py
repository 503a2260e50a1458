"""``agentkit describe``: the rubric compiled for a taskset and a harness."""

from __future__ import annotations

import json

import click

from agentkit.cli._run_settings import build_env, parse_options, provider_of

__all__ = ["describe_cmd"]


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
    h_options = parse_options("harness", harness, harness_pairs, "-H")
    t_options = parse_options("taskset", provider_of(taskset_spec), taskset_pairs, "-T")
    env = build_env(taskset_spec, harness, h_options, t_options, "local")
    manifest = env.describe_rubric()
    if as_json:
        click.echo(json.dumps(manifest, indent=2))
        return
    from rich.console import Console
    from rich.table import Table

    console = Console(soft_wrap=False)
    console.print(f"Compiled rubric: {taskset_spec} × {harness}", highlight=False)
    table = Table()
    for col in ("#", "metric", "weight", "from", "function", "description"):
        table.add_column(col, overflow="fold")
    for i, m in enumerate(manifest["metrics"], start=1):
        table.add_row(
            str(i), m["name"], f"{m['weight']:g}", m["origin"], m["function"], m["description"]
        )
    console.print(table)
    if not manifest["metrics"]:
        console.print("No reward functions: every rollout would get reward 0.")
    console.print(f"Total reward: {manifest['total']}.", highlight=False)
