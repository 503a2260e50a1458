"""A real ``agentkit job run`` killed with SIGKILL, then resumed: no rollout lost or repeated.

The chat harness against the scripted model server (three cells, one per
model): the server answers the first K model requests and leaves every
later one hanging. With a budget of 4, the (K + 4)th request can only be
sent once the first K rollouts have finished (each holds its token of the
budget until its line is durable), so at that moment exactly K rollouts are
recorded and 4 are in flight. The job is killed then, and resumed with the
server answering everything.
"""

from __future__ import annotations

import collections
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

import agentkit.jobs
from agentkit.testing.model_server import ScriptedModelServer

pytestmark = pytest.mark.anyio

TASKS = 6
ROLLOUTS = 2
CELLS = ("m1", "m2", "m3")
PLANNED = TASKS * ROLLOUTS * len(CELLS)
BUDGET = 4


def write_job(tmp_path: Path, server: ScriptedModelServer) -> Path:
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(
        "".join(
            json.dumps({"id": f"t{i}", "input": f"Say {i}.", "target": "ok"}) + "\n"
            for i in range(TASKS)
        )
    )
    models = "".join(f'[[models]]\nname = "{m}"\nbase_url = "{server.base_url}"\n\n' for m in CELLS)
    job = tmp_path / "job.toml"
    job.write_text(
        f'[job]\nname = "killed"\nconcurrency = {BUDGET}\nrollouts_per_task = {ROLLOUTS}\n\n'
        f'[[tasksets]]\nspec = "jsonl:{tasks}"\n\n[[harnesses]]\nname = "chat"\n\n{models}'
    )
    return job


def cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "agentkit", *args]


def rollout_lines(job_dir: Path) -> dict[str, list[dict[str, Any]]]:
    """Every line of every cell's rollouts.jsonl (a torn last line left out)."""
    out: dict[str, list[dict[str, Any]]] = {}
    for cell in sorted((job_dir / "cells").iterdir()):
        path = cell / "rollouts.jsonl"
        records = []
        if path.exists():
            for line in path.read_bytes().split(b"\n"):
                try:
                    records.append(json.loads(line))
                except ValueError:
                    continue
        out[cell.name] = records
    return out


@pytest.mark.parametrize("answered", [0, 10])
async def test_a_job_killed_with_sigkill_resumes_losing_and_repeating_nothing(
    model_server: ScriptedModelServer, tmp_path: Path, answered: int
) -> None:
    rules = [{"times": answered, "reply": {"content": "ok"}}] if answered else []
    model_server.set_script({"rules": rules, "default": {"fail": "hang"}})
    job = write_job(tmp_path, model_server)
    job_dir = tmp_path / "job"
    proc = subprocess.Popen(
        cli("job", "run", str(job), "--out", str(job_dir), "--no-progress"),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        with anyio.fail_after(60):  # a hang guard, not a measurement
            await model_server.wait_for_requests(answered + BUDGET)
        running = agentkit.jobs.open(job_dir).state()  # its process holds the lock
        # a second process cannot run the same job at once: one clear line, nothing written
        second = subprocess.run(
            cli("job", "run", "--resume", str(job_dir)), capture_output=True, text=True, timeout=60
        )
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(30)
        assert proc.stderr is not None
        proc.stderr.close()
    assert running == "running"
    assert second.returncode != 0 and "Traceback" not in second.stderr
    assert f"{job_dir}: another agentkit job run is running this job" in second.stderr
    assert proc.returncode == -signal.SIGKILL
    assert agentkit.jobs.open(job_dir).state() == "incomplete"
    before = rollout_lines(job_dir)
    finished_before = {(c, r["rollout_id"]) for c, rs in before.items() for r in rs}
    assert len(finished_before) == answered
    # the killed job reads as a job: its cells are ordinary (interrupted) run directories
    shown = subprocess.run(
        cli("job", "show", str(job_dir), "--format", "json"), capture_output=True, text=True
    )
    if answered:
        assert shown.returncode == 0, shown.stderr
        assert sum(row["rollouts"] for row in json.loads(shown.stdout)) == answered

    model_server.set_script({"default": {"content": "ok"}})
    model_server.clear_requests()
    resumed = subprocess.run(
        cli("job", "run", "--resume", str(job_dir), "--json"),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert resumed.returncode == 0, resumed.stderr
    report = json.loads(resumed.stdout)
    assert report["complete"] is True and report["failed"] == []
    assert agentkit.jobs.open(job_dir).state() == "complete"
    after = rollout_lines(job_dir)
    assert sorted(after) == sorted(f"tasks.chat.{m}" for m in CELLS)
    for cell, records in after.items():
        ids = collections.Counter(r["rollout_id"] for r in records)
        assert len(ids) == TASKS * ROLLOUTS, (cell, ids)  # nothing lost
        assert set(ids.values()) == {1}, (cell, ids)  # nothing repeated
        keys = {(r["task_id"], r["rollout_index"]) for r in records}
        assert len(keys) == TASKS * ROLLOUTS
        assert all(r["reward"] == 1.0 for r in records)
    # the rollouts recorded before the kill were not run again: one model call each of
    # the others, and none more
    assert len(model_server.model_requests) == PLANNED - answered
    for cell in report["cells"]:
        assert cell["summary"]["complete"] is True
        assert cell["summary"]["this_session"]["ran"] == TASKS * ROLLOUTS - len(
            before[cell["name"]]
        )
