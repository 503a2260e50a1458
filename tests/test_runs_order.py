"""``Run.rollout_ids(order="task", task_id=...)``: task order from the index, no line parsed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest

import agentkit.runs
from agentkit import HarnessResult, ListTaskset, Rubric, Task
from agentkit.env import AgentEnv

pytestmark = pytest.mark.anyio


def exact(output: str | None, target: Any) -> float:
    return 1.0 if output == str(target) else 0.0


class HeldBack:
    """The first rollout of ``ts:0`` that starts is held until the second rollout of
    ``ts:4`` starts. With two workers the other worker runs every other rollout in plan
    order, and a worker writes its rollout before it starts the next: by then the lines
    of ts:0's other rollout and of ts:1 to ts:4's first are in the file, before the
    held one's. The file's order is not the plan's, whatever the machine's speed."""

    def __init__(self) -> None:
        self.started: dict[str, int] = {}
        self.last_started = anyio.Event()
        self.held: list[str] = []

    async def run(self, task: Task, context: Any = None, on_event: Any = None) -> HarnessResult:
        n = self.started[task.task_id] = self.started.get(task.task_id, 0) + 1
        if task.task_id == "ts:4" and n == 2:
            self.last_started.set()
        if task.task_id == "ts:0" and n == 1:
            self.held.append(context.rollout_id)
            with anyio.fail_after(60):  # a hang guard: the runner no longer works this way
                await self.last_started.wait()
        return HarnessResult(status="completed", output=str(task.target))


class Echo:
    async def run(self, task: Task, context: Any = None, on_event: Any = None) -> HarnessResult:
        return HarnessResult(status="completed", output=str(task.target))


async def test_task_order_and_one_tasks_rollouts(tmp_path: Path) -> None:
    taskset = ListTaskset(
        "ts",
        [Task(task_id=f"ts:{i}", input="q", target=str(i)) for i in range(5)],
        default_grading_spec=Rubric([exact]),
    )
    harness = HeldBack()
    await AgentEnv(taskset, harness).evaluate(
        rollouts_per_task=2, out=tmp_path / "r", concurrency=2
    )
    run = agentkit.runs.open(tmp_path / "r")
    finished = run.rollout_ids()
    by_task = run.rollout_ids(order="task")
    # the held rollout of ts:0 was written after the first of ts:4
    [held] = harness.held
    first_of_last = next(r for r in finished if run.rollout(r).task_id == "ts:4")
    assert finished.index(held) > finished.index(first_of_last)
    assert finished != by_task and sorted(finished) == sorted(by_task)
    places = [(run.rollout(r).group, run.rollout(r).rollout_index) for r in by_task]
    assert places == sorted(places) == [(g, i) for g in range(5) for i in range(2)]
    assert [run.rollout(r).rollout_index for r in run.rollout_ids(task_id="ts:3")] == [0, 1]
    assert {run.rollout(r).task_id for r in run.rollout_ids(task_id="ts:3")} == {"ts:3"}
    assert run.rollout_ids(task_id="ts:nope") == []
    with pytest.raises(ValueError, match="order must be"):
        run.rollout_ids(order="reward")


def test_lines_written_otherwise_are_still_placed(tmp_path: Path) -> None:
    """A line whose keys are in another order (written by hand) is parsed to place it."""
    taskset = ListTaskset(
        "ts", [Task(task_id="ts:0", input="q", target="0")], default_grading_spec=Rubric([exact])
    )
    AgentEnv(taskset, Echo()).run(rollouts_per_task=2, out=tmp_path / "r")
    path = tmp_path / "r" / "rollouts.jsonl"
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    path.write_text("".join(json.dumps(dict(reversed(list(d.items())))) + "\n" for d in lines))
    run = agentkit.runs.open(tmp_path / "r")
    assert [run.rollout(r).rollout_index for r in run.rollout_ids(order="task")] == [0, 1]
