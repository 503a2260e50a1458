"""Meta-test: every option of every built-in command is documented in docs/cli.md."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import click
import pytest

from agentkit.cli import COMMANDS, cli

DOC = (Path(__file__).resolve().parents[1] / "docs" / "cli.md").read_text()


def _load(target: str) -> click.Command:
    module, attr = target.split(":")
    command: click.Command = getattr(importlib.import_module(module), attr)
    return command


def section(name: str) -> str:
    """The text of docs/cli.md's ``## agentkit NAME`` section (up to the next ``## ``)."""
    match = re.search(rf"^## agentkit {re.escape(name)}\b.*?(?=^## |\Z)", DOC, re.M | re.S)
    assert match, f"docs/cli.md has no section for 'agentkit {name}'"
    return match.group(0)


def mentions(text: str, option: str) -> bool:
    """``option`` appears whole: ``--out`` does not match ``--output`` or ``--out-dir``."""
    return re.search(rf"(?<![\w-]){re.escape(option)}(?![\w-])", text) is not None


def test_option_matching_is_exact() -> None:
    assert mentions("| `--out DIR` |", "--out")
    assert not mentions("| `--output DIR` |", "--out")
    assert not mentions("| `--out-dir DIR` |", "--out")
    assert not mentions("`--no-out`", "--out")


def commands(name: str, command: click.Command) -> list[tuple[str, click.Command]]:
    """The command and, for a group (``agentkit job``), each of its subcommands."""
    out = [(name, command)]
    if isinstance(command, click.Group):
        for sub_name, sub in sorted(command.commands.items()):
            out.append((f"{name} {sub_name}", sub))
    return out


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_command_and_options_are_documented(name: str) -> None:
    text = section(name)
    for full_name, command in commands(name, _load(COMMANDS[name])):
        if full_name != name:
            assert f"agentkit {full_name}" in text, f"agentkit {full_name} is not documented"
        for param in command.params:
            if not isinstance(param, click.Option) or param.hidden:
                continue
            for option in param.opts + param.secondary_opts:
                if option in ("--help", "-h"):
                    continue
                assert mentions(text, option), (
                    f"agentkit {full_name}: option {option} is not documented in its "
                    "docs/cli.md section"
                )


def test_global_options_are_documented() -> None:
    for param in cli.params:
        if isinstance(param, click.Option):
            for option in param.opts:
                assert mentions(DOC, option), option
