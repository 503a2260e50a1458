"""Test helpers: the Harbor example tasks, scripts of tool calls, the examples' solutions."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from agentkit_harbor import HarborTaskset

from agentkit import ExecutionHints, Task

ROOT = Path(__file__).resolve().parents[3]
HARBOR = ROOT / "examples" / "harbor"
EXAMPLES = ROOT / "examples" / "terminal"
#: The text actions that solve each single-step example task (a command, then submit).
SOLUTIONS: dict[str, list[str]] = json.loads((EXAMPLES / "solutions.json").read_text())

needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")

#: The local sandbox on the host's userland: these tasks need only bash and coreutils.
HOST = {"image": "host"}


def harbor_taskset() -> HarborTaskset:
    return HarborTaskset(str(HARBOR))


def harbor_task(name: str = "hello-world") -> Task:
    return harbor_taskset().get_task(f"harbor:{name}")


def hints_of(task: Task) -> ExecutionHints:
    return harbor_taskset().execution_hints(task)


def shell(command: str, **arguments: Any) -> dict[str, Any]:
    """A native ``shell`` tool call for a script's reply."""
    return {"name": "shell", "arguments": {"command": command, **arguments}}


SUBMIT: dict[str, Any] = {"name": "submit", "arguments": {}}


def text_call(name: str, arguments: dict[str, Any]) -> str:
    """A call in the text format."""
    return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"


def script(*turns: Any, default: Any = None) -> dict[str, Any]:
    """The policy: turn ``i`` answers ``turns[i]`` (a list of native calls, or reply text)."""
    rules = []
    for i, turn in enumerate(turns):
        reply = {"content": turn} if isinstance(turn, str) else {"tool_calls": list(turn)}
        rules.append({"match": {"turn": i}, "reply": reply})
    fallback = {"tool_calls": [SUBMIT]} if default is None else default
    return {"rules": rules, "default": fallback}


#: The native calls that solve hello-world, and ones that do it wrong.
HELLO = [[shell("printf 'Hello, world!\\n' > /app/hello.txt")], [SUBMIT]]
HELLO_WRONG = [[shell("echo 'Hello' > /app/hello.txt")], [SUBMIT]]
