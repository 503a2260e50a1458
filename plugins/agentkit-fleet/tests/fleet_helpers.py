"""Helpers for the Fleet plugin tests: example paths, scripted policies, an HTTP MCP server."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "fleet"
TASKS_JSON = EXAMPLES / "tasks.json"
SOLUTIONS = json.loads((EXAMPLES / "solutions.json").read_text())


def script_for(actions: list[str]) -> dict[str, Any]:
    """A model script answering the i-th policy turn with ``actions[i]``."""
    return {
        "rules": [
            {"match": {"turn": i}, "reply": {"content": text}} for i, text in enumerate(actions)
        ],
        "default": {"content": "<done>"},
    }


class HttpShapes:
    """``shapes_server.py`` (tools answering in every result shape) as a real subprocess."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(Path(__file__).with_name("shapes_server.py"))],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().strip()
        assert line.startswith("LISTENING "), line
        self.url = line.split(" ", 1)[1]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)


class HttpBookings:
    """The bookings MCP server running as a real subprocess over streamable HTTP."""

    def __init__(self, directory: Path) -> None:
        self.seed = directory / "seed.sqlite"
        self.current = directory / "current.sqlite"
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "agentkit_fleet.localenv.server",
                "--transport",
                "http",
                "--port",
                "0",
                "--db",
                str(self.current),
                "--seed",
                str(self.seed),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().strip()
        assert line.startswith("LISTENING "), line
        self.url = line.split(" ", 1)[1]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)
