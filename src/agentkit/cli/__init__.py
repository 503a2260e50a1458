"""The ``agentkit`` command line.

Subcommands live in small modules imported only when they run, so that
``agentkit --help`` stays fast. Plugins add commands through the
``agentkit_register_commands`` hook; those are looked up on demand.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

import click

from agentkit._errors import AgentkitError
from agentkit._plugins import add_plugin_commands
from agentkit._version import __version__

__all__ = ["cli", "main"]

#: Built-in subcommands: name -> "module:attribute", imported on use.
COMMANDS: dict[str, str] = {
    "plugins": "agentkit.cli._plugins_cmd:plugins_cmd",
    "list": "agentkit.cli._plugins_cmd:list_cmd",
    "run": "agentkit.cli._run_cmd:run_cmd",
    "serve": "agentkit.cli._serve_cmd:serve_cmd",
    "describe": "agentkit.cli._describe_cmd:describe_cmd",
    "show": "agentkit.cli._show_cmd:show_cmd",
    "runs": "agentkit.cli._show_cmd:runs_cmd",
    "compare": "agentkit.cli._compare_cmd:compare_cmd",
    "export": "agentkit.cli._export_cmd:export_cmd",
    "job": "agentkit.cli._job_cmd:job_group",
    "images": "agentkit.cli._images_cmd:images_group",
    "sandbox": "agentkit.cli._sandbox_cmd:sandbox_group",
    "view": "agentkit.cli._view_cmd:view_cmd",
}

_HELP = {
    "plugins": "Show installed plugins and what they register (JSON; --table for people).",
    "list": "List registered names of one kind: harnesses, tasksets, rubrics, sandboxes.",
    "run": "Run a taskset with a harness: progress, results table, run directory.",
    "serve": "Serve rollouts to a trainer in another process (HTTP): groups, policies, staleness.",
    "describe": "Print the rubric compiled for a taskset and a harness.",
    "show": "Summarize a run; --rollout ID shows one rollout, --failed the failed ones.",
    "runs": "List run directories; --compare RUN... prints a leaderboard with error bars.",
    "compare": "Compare two runs on their shared tasks: difference, 95% CI, paired p-value.",
    "export": "Export a run directory as training records (JSONL or parquet).",
    "images": "Task images: 'agentkit images import' makes image roots from an archive, no engine.",
    "job": "Run a job (tasksets × harnesses × models), show its leaderboard, compare cells.",
    "sandbox": "Manage sandboxes: 'agentkit sandbox prune' removes leftovers and image roots.",
    "view": "Browse runs in the browser, live while they run (needs agentkit[view]).",
}


class LazyGroup(click.Group):
    """A click group whose commands are imported only when used."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(super().list_commands(ctx)) | set(COMMANDS))

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        cmd = super().get_command(ctx, cmd_name)
        if cmd is not None:
            return cmd
        target = COMMANDS.get(cmd_name)
        if target is not None:
            module, attr = target.split(":")
            loaded: click.Command = getattr(importlib.import_module(module), attr)
            return loaded
        self._load_plugin_commands()
        return super().get_command(ctx, cmd_name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, _HELP.get(name, "")) for name in sorted(COMMANDS)]
        with formatter.section("Commands"):
            formatter.write_dl(rows)
        self._load_plugin_commands(light=True)
        added = [
            (name, cmd.get_short_help_str(limit=70))
            for name, cmd in sorted(self.commands.items())
            if name not in COMMANDS
        ]
        if added:
            with formatter.section("Commands added by plugins"):
                formatter.write_dl(added)

    _plugins_loaded = False

    def _load_plugin_commands(self, *, light: bool = False) -> None:
        """Let plugins add their commands; ``light`` (for --help) registers nothing else."""
        if self._plugins_loaded:
            return
        self._plugins_loaded = True
        if light:  # a broken plugin must not break --help: it is left out
            add_plugin_commands(self)
        else:
            # deferred: the registry and its option schemas are not needed for --help
            from agentkit.registry import get_registry

            get_registry().add_commands(self)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "-V", "--version", prog_name="agentkit")
@click.option("--debug", is_flag=True, help="Show full tracebacks for errors.")
@click.pass_context
def cli(ctx: click.Context, debug: bool) -> None:
    """agentkit: run any taskset with any harness, score it with a compiled rubric."""
    ctx.ensure_object(dict)
    ctx.obj["debug"] = debug


def main(argv: list[str] | None = None) -> Any:
    """Entry point: run the CLI; agentkit errors exit 2 with one message, no traceback."""
    args = sys.argv[1:] if argv is None else argv
    debug = "--debug" in args
    try:
        return cli.main(args=args, prog_name="agentkit", standalone_mode=False)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except click.exceptions.Abort:
        click.echo("Aborted.", err=True)
        sys.exit(130)
    except AgentkitError as exc:
        if debug:
            raise
        click.echo(f"Error: {exc}", err=True)
        sys.exit(2)
    except KeyboardInterrupt:
        click.echo("Interrupted.", err=True)
        sys.exit(130)
