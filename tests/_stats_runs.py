"""Real run directories for the statistics tests: ``agentkit run`` of the chat harness
against the scripted model server, as docs/statistics.md's worked example describes.

Five tasks ``example:t1`` ... ``example:t5``, two rollouts each. Model ``a`` (run A,
``--limit 4``) answers t1 and t4 right, t2 right once, t3 never; model ``b`` (run B)
answers t1 right once, t4 and t5 right, and its first call of t3 fails with a server
error (``--max-retries 0``: that rollout could not run). Run C is of another
taskset (no task in common with A or B).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from agentkit.testing.model_server import ScriptedModelServer

__all__ = ["EXAMPLE_SCRIPT", "PLANS", "make_example_run", "make_example_runs", "run_cli"]


def _right(model: str, task: int, times: int | None = None) -> dict[str, Any]:
    rule: dict[str, Any] = {
        "match": {"model": model, "last_user_contains": f"task {task}."},
        "reply": {"content": "right"},
    }
    if times is not None:
        rule["times"] = times
    return rule


EXAMPLE_SCRIPT: dict[str, Any] = {
    "models": ["a", "b", "c"],
    "rules": [
        _right("a", 1),
        _right("a", 2, times=1),
        _right("a", 4),
        _right("b", 1, times=1),
        {
            "match": {"model": "b", "last_user_contains": "task 3."},
            "times": 1,
            "reply": {"fail": "server_error"},
        },
        _right("b", 4),
        _right("b", 5),
        _right("c", 1),
    ],
    "default": {"content": "wrong"},
}


def run_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``agentkit ARGS...`` in a fresh process (the command as users run it)."""
    return subprocess.run(
        [sys.executable, "-m", "agentkit", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
    )


def _tasks(path: Path, count: int) -> None:
    rows = [
        {"id": f"t{i}", "input": f"This is task {i}. Say right.", "target": "right"}
        for i in range(1, count + 1)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


#: Each run: its tasks file, its model and its other options.
PLANS: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "A": ("example.jsonl", "a", ("--limit", "4")),
    "B": ("example.jsonl", "b", ()),
    "C": ("other.jsonl", "c", ()),
}


def make_example_run(folder: Path, name: str, server: ScriptedModelServer) -> Path:
    """Run ``name`` of :data:`PLANS` against ``server``, as ``folder/runs/NAME``."""
    if not (folder / "example.jsonl").exists():
        _tasks(folder / "example.jsonl", 5)
        _tasks(folder / "other.jsonl", 2)
    tasks, model, extra = PLANS[name]
    done = run_cli(
        "run",
        f"jsonl:{tasks}",
        "chat",
        "--model",
        model,
        "--base-url",
        server.base_url,
        "-n",
        "2",
        "--max-retries",
        "0",
        "--out",
        f"runs/{name}",
        "--no-progress",
        *extra,
        cwd=folder,
    )
    assert done.returncode == 0, done.stderr
    return folder / "runs" / name


def make_example_runs(folder: Path) -> dict[str, Path]:
    """Runs A, B and C under ``folder/runs`` (made in ``folder``, so their paths print
    as ``runs/A``...); returns their directories by name."""
    with ScriptedModelServer(EXAMPLE_SCRIPT) as server:
        return {name: make_example_run(folder, name, server) for name in PLANS}


#: The cells of :func:`make_example_job`: each model on the five tasks, two rollouts each.
JOB_CELLS = {f"example.chat.{m}": m for m in ("a", "b", "c")}


def make_example_job(folder: Path, name: str = "sweep") -> Path:
    """A job directory ``folder/jobs/NAME`` in the format of docs/jobs.md: its
    ``job.json`` and a cell per model of :data:`JOB_CELLS` run by ``agentkit run`` into
    ``cells/<cell>/`` (the five tasks, two rollouts each: model b's first call of t3
    fails, so that rollout could not run), and a fourth cell, ``example.chat.d``, not
    started."""
    if not (folder / "example.jsonl").exists():
        _tasks(folder / "example.jsonl", 5)
        _tasks(folder / "other.jsonl", 2)
    job = folder / "jobs" / name
    cells = {**JOB_CELLS, "example.chat.d": "d"}
    with ScriptedModelServer(EXAMPLE_SCRIPT) as server:
        for cell, model in JOB_CELLS.items():
            done = run_cli(
                *("run", "jsonl:example.jsonl", "chat", "--model", model),
                *("--base-url", server.base_url, "-n", "2", "--max-retries", "0"),
                *("--out", str(job / "cells" / cell), "--no-progress"),
                cwd=folder,
            )
            assert done.returncode == 0, done.stderr
    document = {
        "kind": "agentkit.job",
        "format_version": 1,
        "name": name,
        "created_at": time.time(),
        "concurrency": 4,
        "axes": {"taskset": ["example"], "harness": ["chat"], "model": list(cells.values())},
        "cells": [
            {
                "name": cell,
                "axes": {"taskset": "example", "harness": "chat", "model": model},
                "explicit": False,
                "taskset": {"spec": "jsonl:example.jsonl", "options": {}},
                "harness": {"name": "chat", "options": {}},
                "settings": {"model": model, "rollouts_per_task": 2},
                "run_dir": f"cells/{cell}",
            }
            for cell, model in cells.items()
        ],
        "spec": {},
        "resumes": [],
    }
    (job / "job.json").write_text(json.dumps(document, indent=2))
    return job
