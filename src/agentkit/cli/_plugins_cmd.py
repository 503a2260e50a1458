"""``agentkit plugins`` and ``agentkit list``: what is installed, and from where."""

from __future__ import annotations

import json
from typing import Any

import click

from agentkit import registry
from agentkit._plugins import Kind

__all__ = ["list_cmd", "plugins_cmd"]

#: ``agentkit list`` words and the registry kind each one lists.
_LIST_KINDS: dict[str, Kind] = {
    "tasksets": "taskset",
    "harnesses": "harness",
    "rubrics": "rubric",
    "sandboxes": "sandbox",
}


def _plugins_json() -> dict[str, Any]:
    return {
        "plugins": [p.to_json() for p in registry.plugins()],
        "failed": [f.to_json() for f in registry.failures()],
    }


@click.command("plugins")
@click.option("--table", is_flag=True, help="A table for people instead of JSON.")
def plugins_cmd(table: bool) -> None:
    """Show installed plugins, their distribution and version, and what they register.

    Prints JSON ({"plugins": [...], "failed": [...]}) unless --table is given.
    Plugins that failed to load are listed under "failed" with the reason.
    """
    data = _plugins_json()
    if not table:
        click.echo(json.dumps(data, indent=2))
        return
    from rich.console import Console
    from rich.table import Table

    console = Console(soft_wrap=False)
    shown = Table(title="agentkit plugins", show_lines=True)
    for column in ("plugin", "distribution", "version", "registers"):
        shown.add_column(column, overflow="fold")
    for plugin in data["plugins"]:
        parts = [
            f"{kind}: {', '.join(plugin[kind])}"
            for kind in ("tasksets", "harnesses", "rubrics", "sandboxes")
            if plugin[kind]
        ]
        shown.add_row(
            plugin["name"], plugin["distribution"], plugin["version"], "\n".join(parts) or "-"
        )
    console.print(shown)
    if data["failed"]:
        failed = Table(title="failed to load", title_style="bold red")
        for column in ("plugin", "distribution", "error"):
            failed.add_column(column, overflow="fold")
        for failure in data["failed"]:
            failed.add_row(failure["name"], failure["distribution"], failure["error"])
        console.print(failed)


def _entry_json(kind: Kind, name: str) -> dict[str, Any]:
    r = registry.get(kind, name)
    try:
        options: list[dict[str, Any]] | str = registry.option_schema(kind, name).describe()
    except Exception as exc:  # a plugin's odd signature must not break the listing
        options = f"unavailable: {type(exc).__name__}: {exc}"
    return {
        "name": r.name,
        "description": r.description,
        "plugin": r.plugin,
        "distribution": r.distribution,
        "version": r.version,
        "options": options,
    }


@click.command("list")
@click.argument("kind", metavar="KIND", type=click.Choice(sorted(_LIST_KINDS)))
@click.option("--json", "as_json", is_flag=True, help="JSON with plugin, version and options.")
def list_cmd(kind: str, as_json: bool) -> None:
    """List the registered names of one KIND with a one-line description each.

    KIND is one of: harnesses, tasksets, rubrics, sandboxes.
    """
    registry_kind = _LIST_KINDS[kind]
    names = registry.names(registry_kind)
    if as_json:
        click.echo(json.dumps([_entry_json(registry_kind, n) for n in names], indent=2))
        return
    width = max((len(n) for n in names), default=0)
    for name in names:
        description = registry.get(registry_kind, name).description
        click.echo(f"{name:<{width}}  {description}".rstrip())
