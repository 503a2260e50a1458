"""``agentkit serve``: a rollout service over a taskset and a harness, for a trainer in
another process, over HTTP.

It takes the settings ``agentkit run`` takes (flags, ``--config FILE`` or
``[tool.agentkit]``; ``-n`` is each group's size) and the service's own
(``--max-staleness``, ``--on-stale``, ``--restart-on-update``, ``--format``),
opens a :class:`~agentkit.service.RolloutService` behind a
:class:`~agentkit.service.ServiceFront` on loopback and serves until a stop
signal (Ctrl-C, SIGTERM) or an error that stops the service (its front then
answers the trainer's next request with that error, a 503, and serve exits 2
with it). When it is ready
it prints the front's URL and the file that holds its bearer token (mode
0600, written by this command, removed when it ends); the token itself is
never printed or written anywhere else.
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import secrets
import signal
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

import click
from click.core import ParameterSource

from agentkit._errors import SpecError
from agentkit.cli._config import load_run_config
from agentkit.cli._run_cmd import run_cmd
from agentkit.cli._run_settings import resolve_settings
from agentkit.cli._signals import run_stoppable
from agentkit.cli._stdout import reserved_stdout
from agentkit.service import RolloutService, ServiceFailed, ServiceFront

__all__ = ["serve_cmd"]

#: ``agentkit run``'s settings that do not apply to a service: it never resumes, has no
#: plan to print, no progress bar and no run-wide budget (the trainer decides how many
#: groups to ask for).
_RUN_ONLY = frozenset(
    {
        "resume",
        "retry_errors",
        "dry_run",
        "progress",
        "as_json",
        "run_token_limit",
        "run_cost_limit",
    }
)


def _run_params() -> list[click.Parameter]:
    """``agentkit run``'s arguments and options, those of a service (``-n`` reworded)."""
    params: list[click.Parameter] = []
    for param in run_cmd.params:
        if param.name in _RUN_ONLY:
            continue
        if param.name == "rollouts":
            param = copy.copy(param)
            assert isinstance(param, click.Option)
            param.help = "Rollouts of each group (the group's size). [default: 1]"
        elif param.name == "out":
            param = copy.copy(param)
            assert isinstance(param, click.Option)
            param.help = (
                "Run directory every finished rollout is written to. "
                "[default: runs/<time>-<harness>]"
            )
        params.append(param)
    return params


def _serve_params() -> list[click.Parameter]:
    """The service's own options."""
    return [
        click.Option(
            ["--max-staleness"],
            type=click.IntRange(min=0),
            default=None,
            help="Never hand over a group whose oldest model call is more than K policy "
            "versions behind the current one (0: on-policy). [default: no bound]",
            metavar="K",
        ),
        click.Option(
            ["--on-stale"],
            type=click.Choice(["drop", "rerun"]),
            default="drop",
            show_default=True,
            help="What happens to a group past the bound: drop it, or run its task again.",
        ),
        click.Option(
            ["--restart-on-update"],
            is_flag=True,
            help="A new policy restarts the rollouts running then (else they go on, each "
            "call going to the policy current when it starts).",
        ),
        click.Option(
            ["--format", "trainer_format"],
            type=click.Choice(["skyrl", "tinker", "verifiers", "jsonl"]),
            default="skyrl",
            show_default=True,
            help="The format of each group's data.",
        ),
        click.Option(
            ["--policy-version"],
            type=click.IntRange(min=0),
            default=0,
            show_default=True,
            help="The policy version served at the start.",
        ),
        click.Option(
            ["--host"],
            default="127.0.0.1",
            show_default=True,
            help="The address the HTTP front listens on.",
        ),
        click.Option(
            ["--port"],
            type=click.IntRange(min=0, max=65535),
            default=0,
            show_default=True,
            help="The front's port (0: one the system picks; the URL printed names it).",
        ),
        click.Option(
            ["--token-file"],
            type=click.Path(path_type=Path, dir_okay=False),
            default=None,
            help="Where the front's bearer token is written (mode 0600; it must not exist; "
            "removed when serve ends). [default: a new private temporary directory]",
        ),
        click.Option(
            ["--json", "as_json"],
            is_flag=True,
            help="Print the front's URL, token file and run directory as one JSON line "
            "(and the report at the end as another).",
        ),
    ]


@click.pass_context
def _serve(ctx: click.Context, /, **params: Any) -> None:
    """Serve rollouts of TASKSET_SPEC (provider:argument) with HARNESS to a trainer.

    Takes the settings 'agentkit run' takes (-n is each group's size). The
    trainer asks for groups over HTTP (POST /v1/groups, /v1/groups/next,
    /v1/policy; GET /v1/report) with the bearer token in the token file.
    Prints the URL and the token file's path (never the token) once the
    front is ready; serves until Ctrl-C or SIGTERM, then prints the report.
    Every finished rollout is in the run directory. See
    docs/training-live.md.
    """
    with reserved_stdout() as out:
        _run(ctx, params, out)


serve_cmd = click.Command(
    "serve",
    callback=_serve,
    params=[*_run_params(), *_serve_params()],
    help=_serve.__doc__,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _run(ctx: click.Context, params: dict[str, Any], out: TextIO) -> None:
    config = load_run_config(ctx.command, params["config"], use_pyproject=params["config"] is None)
    for name, value in config.values.items():
        if ctx.get_parameter_source(name) in (ParameterSource.DEFAULT, None):
            params[name] = value
    fixed = {"resume": None, "retry_errors": False, "run_token_limit": None, "run_cost_limit": None}
    settings = resolve_settings({**params, **fixed}, config.tables, config.source, None)
    env = settings.build_env()
    options = settings.options
    as_json: bool = params["as_json"]

    ended: dict[str, Any] = {}

    async def serve() -> None:
        service = RolloutService(
            env,
            options,
            group_size=options.rollouts_per_task,
            max_staleness=params["max_staleness"],
            on_stale=params["on_stale"],
            restart_on_update=params["restart_on_update"],
            format=params["trainer_format"],
            policy_version=params["policy_version"],
        )
        token = secrets.token_urlsafe(32)
        with _token_file(params["token_file"], token) as token_file:
            try:
                async with (
                    service,
                    ServiceFront(
                        service, host=params["host"], port=params["port"], token=token
                    ) as front,
                ):
                    _announce(out, as_json, front.url, token_file, service.report().run_dir)
                    try:
                        await service.wait_stopped()
                    except ServiceFailed as exc:
                        # the front stays up until the trainer has heard why (or a signal)
                        click.echo(
                            f"agentkit serve: {exc}; the trainer's next request is told, "
                            "then serve ends",
                            err=True,
                        )
                        await front.wait_failure_told()
                        raise
            finally:
                ended["report"] = service.report().to_json()

    stop_signal: list[int] = []
    try:
        run_stoppable(serve, stop_signal)
    except KeyboardInterrupt:
        # the normal end: the rollouts in flight were stopped, every finished one is saved
        signum = stop_signal[0] if stop_signal else signal.SIGINT
        click.echo(f"agentkit serve: stopped by {signal.Signals(signum).name}", err=True)
    finally:  # also when an error stopped the service (then it is raised, one line)
        if "report" in ended:
            _print_end(out, as_json, ended["report"])


def _announce(out: TextIO, as_json: bool, url: str, token_file: Path, run_dir: str | None) -> None:
    """The front is ready: where it is and where its token is (never the token)."""
    if as_json:
        line = {"url": url, "token_file": str(token_file), "run_dir": run_dir, "pid": os.getpid()}
        click.echo(json.dumps(line), file=out)
    else:
        click.echo(f"Serving at {url}", file=out)
        click.echo(f"Token file: {token_file}", file=out)
        click.echo(f"Run directory: {run_dir or '-'}", file=out)
    out.flush()
    click.echo("agentkit serve: ready; Ctrl-C or SIGTERM stops it.", err=True)


def _print_end(out: TextIO, as_json: bool, report: dict[str, Any]) -> None:
    """What the service did (its report)."""
    if as_json:
        click.echo(json.dumps({"report": report}), file=out)
        return
    click.echo(
        f"Groups: {report['delivered']} delivered, {report['dropped_stale']} dropped and "
        f"{report['rerun_stale']} run again past the staleness bound "
        f"({report['doomed_groups']} stopped early); "
        f"{report['rollouts_finished']} rollouts finished",
        file=out,
    )


@contextlib.contextmanager
def _token_file(given: Path | None, token: str) -> Iterator[Path]:
    """The token written to a new file only its owner reads (``given``, else one in a new
    private directory); removed (with that directory) at the end."""
    made_dir: Path | None = None
    if given is None:
        made_dir = Path(tempfile.mkdtemp(prefix="agentkit-serve-"))
        path = made_dir / "token"
    else:
        path = given
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(path, flags, 0o600)
    except FileExistsError:
        raise SpecError(
            f"--token-file {path}: the file exists; give a path to a new file (serve writes "
            "a new token there)"
        ) from None
    except OSError as exc:
        raise SpecError(f"--token-file {path}: cannot create it: {exc.strerror}") from None
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(token + "\n")
        yield path
    finally:
        with contextlib.suppress(OSError):
            path.unlink()
        if made_dir is not None:
            with contextlib.suppress(OSError):
                made_dir.rmdir()
