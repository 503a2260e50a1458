"""``agentkit view [DIR]``: the runs in DIR in a local web page, live while they are written."""

from __future__ import annotations

from pathlib import Path

import click

from agentkit._errors import SpecError
from agentkit.view import Catalog, is_loopback, main, require_web_stack

__all__ = ["view_cmd"]


@click.command("view")
@click.argument(
    "directory", required=False, default="runs", type=click.Path(path_type=Path, file_okay=False)
)
@click.option(
    "--host",
    default="127.0.0.1",
    show_default=True,
    help="Address to listen on; anything but loopback lets others on the network read the runs.",
)
@click.option(
    "--port",
    default=0,
    type=click.IntRange(0, 65535),
    help="Port to listen on. [default: a free port]",
)
@click.option("--no-open", is_flag=True, help="Print the URL without opening a browser.")
def view_cmd(directory: Path, host: str, port: int, no_open: bool) -> None:
    """Browse runs in the browser: a run directory, a job directory or a folder of
    them (default: runs).

    Serves a local page (the URL is printed; the browser opens unless
    --no-open) listing the runs and jobs, each run's rollouts and charts,
    each rollout's transcript, events, rewards, verifier output and files,
    each job's leaderboard, tasks × cells heat map and charts, and runs
    compared; runs that are still being written update live. It only reads.
    Needs the view extra: pip install 'agentkit[view]'.
    """
    require_web_stack()
    if not directory.is_dir():
        raise SpecError(f"{directory}: no such directory; give a run directory or a folder of runs")
    catalog = Catalog(directory)
    names = list(catalog.run_dirs())
    jobs = list(catalog.job_dirs())
    if not is_loopback(host):
        click.echo(
            f"Warning: listening on {host}: anyone who can reach this address can read these runs.",
            err=True,
        )

    def ready(url: str) -> None:
        plural = "" if len(names) == 1 else "s"
        what = f"run {names[0]}" if catalog.single else f"{len(names)} run{plural} in {directory}"
        if catalog.single_job:
            what = f"job {jobs[0]} ({len(names)} cell{plural} started)"
        elif jobs:
            what += f", {len(jobs)} of them job{'' if len(jobs) == 1 else 's'}"
        if not names and not jobs:
            what = f"{directory} (no runs yet; they appear as they start)"
        click.echo(f"agentkit view: {what}")
        click.echo(f"  {url}")
        if catalog.single:
            click.echo(f"  {url}run/{names[0]}")
        if catalog.single_job:
            click.echo(f"  {url}job/{jobs[0]}")
        click.echo("Ctrl-C stops.", err=True)

    try:
        main(directory, host=host, port=port, open_browser=not no_open, on_ready=ready)
    except OSError as exc:
        raise SpecError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    except KeyboardInterrupt:
        click.echo("Stopped.", err=True)
