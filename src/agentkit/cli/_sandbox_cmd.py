"""``agentkit sandbox prune``: remove what sandboxes left behind, and unused image roots."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from agentkit.cli._numbers import finite_range
from agentkit.images._imageroot import default_cache_dir, prune_image_roots
from agentkit.sandbox import SandboxUnavailableError
from agentkit.sandbox.docker._engine import prune
from agentkit.sandbox.local import prune_image_exports

__all__ = ["prune_cmd", "sandbox_group"]


@click.group("sandbox")
def sandbox_group() -> None:
    """Manage sandboxes: the docker sandbox's leftovers, the local sandbox's image roots."""


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
@click.option(
    "--image-roots",
    is_flag=True,
    help="Also remove the local sandbox's exported image roots that no sandbox runs on now; "
    "they are exported again when a task needs them.",
)
@click.option(
    "--unused-days",
    type=finite_range(min=0),
    default=0.0,
    show_default=True,
    help="With --image-roots: only the roots no sandbox has used for this many days.",
)
@click.option(
    "--image-cache",
    type=click.Path(file_okay=False, path_type=Path),
    help="With --image-roots: the image-root cache (default: ~/.cache/agentkit/image-roots, "
    "as -S image_cache).",
)
def prune_cmd(
    everything: bool,
    images: bool,
    image_roots: bool,
    unused_days: float,
    image_cache: Path | None,
) -> None:
    """Remove docker sandbox leftovers: containers, networks, compose projects, fork images.

    Everything the docker sandbox makes carries the label org.agentkit.sandbox
    and its owner process; without --all only leftovers of runs that are no
    longer running (killed with kill -9, say) are removed. Every run does the
    same before it starts. The Buildah working containers the local sandbox
    exports image roots through (named agentkit-export_<owner>_...) go the same
    way. With --image-roots, the local sandbox's exported image roots go too
    (those no sandbox runs on; with --unused-days, only those unused that
    long); without a Docker engine, only they and Buildah's are pruned.
    """
    import anyio

    failed = False
    exports = prune_image_exports(everything=everything)
    try:
        report = anyio.run(lambda: prune(everything=everything, images=images))
    except SandboxUnavailableError as exc:
        if not (image_roots or exports.looked):
            raise
        click.echo(f"docker: skipped ({exc})")
    else:
        failed = _echo_docker(report) or failed
    for name in exports.removed:
        click.echo(f"removed buildah container {name}")
    for error in exports.errors:
        click.echo(f"could not remove {error}", err=True)
    failed = failed or bool(exports.errors)
    if image_roots:
        failed = _prune_roots(image_cache, unused_days) or failed
    if failed:
        raise SystemExit(1)


def _echo_docker(report: Any) -> bool:
    """Print what the docker prune did; True when something could not be removed."""
    if report.empty:
        click.echo("docker: nothing to prune")
        return False
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
    return bool(report.errors)


def _prune_roots(cache: Path | None, unused_days: float) -> bool:
    """Prune exported image roots and print what happened; True on errors."""
    cache = cache or default_cache_dir()
    report = prune_image_roots(cache, unused_for_sec=unused_days * 86400)
    freed = sum(size for _, _, size in report.removed)
    for name, reference, size in report.removed:
        click.echo(f"removed image root {reference} ({size / 1e6:.1f} MB, {name})")
    for name, reference in report.in_use:
        click.echo(f"kept image root {reference} (a sandbox runs on it; {name})")
    for error in report.errors:
        click.echo(f"could not remove image root {error}", err=True)
    if not (report.removed or report.in_use or report.errors):
        click.echo(f"image roots: nothing to prune in {cache}")
    elif report.removed:
        click.echo(f"image roots: {freed / 1e6:.1f} MB freed in {cache}")
    return bool(report.errors)
