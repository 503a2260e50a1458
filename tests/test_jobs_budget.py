"""One concurrency budget for all of a job's cells: never more rollouts at once than it.

The chat harness against the scripted model server, in this process: the
server holds every answer back, so rollouts that started stay in flight;
once the job's event loop has nothing left to do (every task waits for an
answer or for the budget), the rollouts running across the cells are counted
by their live files, each made when a rollout starts.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest

from agentkit import Job
from agentkit.jobs import JobResults
from agentkit.rundir import LIVE_DIR, ROLLOUTS
from agentkit.testing.model_server import ScriptedModelServer

pytestmark = pytest.mark.anyio


def write_tasks(path: Path, n: int) -> Path:
    rows = [{"id": f"t{i}", "input": f"Say {i}.", "target": str(i)} for i in range(n)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def budget_job(tasks: Path, server: ScriptedModelServer, concurrency: int) -> Job:
    """Three cells (one per model) of the chat harness, each as wide as the budget."""
    return Job.from_mapping(
        {
            "job": {"name": "budget", "concurrency": concurrency, "preflight": False},
            "tasksets": [{"spec": f"jsonl:{tasks}"}],
            "harnesses": [{"name": "chat"}],
            "models": [{"name": name, "base_url": server.base_url} for name in ("m1", "m2", "m3")],
        }
    )


def running(job_dir: Path) -> dict[str, int]:
    """Rollouts running now, per cell (their live files)."""
    out = {}
    for cell in sorted((job_dir / "cells").iterdir()):
        live = cell / LIVE_DIR
        out[cell.name] = len(list(live.iterdir())) if live.is_dir() else 0
    return out


def lines(cell: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in (cell / ROLLOUTS).read_text().splitlines()]


def most_at_once(records: list[dict[str, Any]]) -> int:
    """The most rollouts whose [started_at, finished_at] overlap at one moment."""
    edges = []
    for r in records:
        edges.append((r["timings"]["started_at"], 1))
        edges.append((r["timings"]["finished_at"], -1))
    now = peak = 0
    for _, step in sorted(edges, key=lambda e: (e[0], e[1])):
        now += step
        peak = max(peak, now)
    return peak


@pytest.mark.parametrize("concurrency", [1, 3])
async def test_rollouts_of_all_cells_share_one_budget(
    model_server: ScriptedModelServer, tmp_path: Path, concurrency: int
) -> None:
    tasks = write_tasks(tmp_path / "tasks.jsonl", 4)
    job = budget_job(tasks, model_server, concurrency)
    job_dir = tmp_path / "job"
    done: list[JobResults] = []

    async def run() -> None:
        done.append(await job.run(out=job_dir))

    model_server.hold()
    async with anyio.create_task_group() as tg:
        tg.start_soon(run)
        with anyio.fail_after(60):  # a hang guard, not a measurement
            await model_server.wait_for_requests(concurrency)
        # every task of the job now waits: for a held answer, or for the budget
        await anyio.wait_all_tasks_blocked()
        in_flight = running(job_dir)
        received = len(model_server.model_requests)
        model_server.release()
    assert sum(in_flight.values()) == concurrency, in_flight
    assert received == concurrency
    [results] = done
    assert results.complete
    records = []
    for cell in results.cells:
        cell_records = lines(cell.run_dir)
        assert len(cell_records) == 4
        records += cell_records
    assert len(model_server.model_requests) == 12
    # over the whole job, never more than the budget at once, and all of it used
    assert most_at_once(records) == concurrency


async def test_the_cells_progress_together(
    model_server: ScriptedModelServer, tmp_path: Path
) -> None:
    """Each cell waits its turn for the budget: no cell runs all its rollouts while
    another has not started (the budget's waiters are served first come, first served)."""
    tasks = write_tasks(tmp_path / "tasks.jsonl", 6)
    job = budget_job(tasks, model_server, 2)
    results = await job.run(out=tmp_path / "job")
    spans = []
    for cell in results.cells:
        records = lines(cell.run_dir)
        spans.append(
            (
                min(r["timings"]["started_at"] for r in records),
                max(r["timings"]["finished_at"] for r in records),
            )
        )
    last_start = max(start for start, _ in spans)
    first_end = min(end for _, end in spans)
    assert last_start < first_end, spans
