"""``agentkit sandbox prune``: remove what sandboxes left behind."""

from __future__ import annotations

import click

__all__ = ["prune_cmd", "sandbox_group"]


@click.group("sandbox")
def sandbox_group() -> None:
    """Manage sandboxes (the docker sandbox's containers, networks and images)."""


@sandbox_group.command("prune")
@click.option(
    "--all",
    "everything",
    is_flag=True,
    help="Also remove the sandboxes of runs still going (default: only those whose run is gone).",
)
@click.option(
    "--images",
    is_flag=True,
    help="Also remove the images agentkit built (agentkit/env:*); they are built again.",
)
def prune_cmd(everything: bool, images: bool) -> None:
    """Remove docker sandbox leftovers: containers, networks and compose projects.

    Everything the docker sandbox makes carries the label org.agentkit.sandbox
    and its owner process; without --all only leftovers of runs that are no
    longer running (killed with kill -9, say) are removed. Every run does the
    same before it starts.
    """
    import anyio

    from agentkit.sandbox._docker_engine import prune

    report = anyio.run(lambda: prune(everything=everything, images=images))
    if report.empty:
        click.echo("nothing to prune")
        return
    for kind, names in (
        ("container", report.containers),
        ("network", report.networks),
        ("compose project", report.projects),
        ("image", report.images),
    ):
        for name in names:
            click.echo(f"removed {kind} {name}")
    for error in report.errors:
        click.echo(f"could not remove {error}", err=True)
    if report.errors:
        raise SystemExit(1)
