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


class Reversed:
    """Later tasks finish first: the file's order is not the plan's."""

    async def run(self, task: Task, context: Any = None, on_event: Any = None) -> HarnessResult:
        await anyio.sleep(0.02 * (5 - int(task.task_id.split(":")[1])))
        return HarnessResult(status="completed", output=str(task.target))


async def test_task_order_and_one_tasks_rollouts(tmp_path: Path) -> None:
    taskset = ListTaskset(
        "ts",
        [Task(task_id=f"ts:{i}", input="q", target=str(i)) for i in range(5)],
        default_grading_spec=Rubric([exact]),
    )
    await AgentEnv(taskset, Reversed()).evaluate(
        rollouts_per_task=2, out=tmp_path / "r", concurrency=10
    )
    run = agentkit.runs.open(tmp_path / "r")
    finished = run.rollout_ids()
    by_task = run.rollout_ids(order="task")
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
    AgentEnv(taskset, Reversed()).run(rollouts_per_task=2, out=tmp_path / "r")
    path = tmp_path / "r" / "rollouts.jsonl"
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    path.write_text("".join(json.dumps(dict(reversed(list(d.items())))) + "\n" for d in lines))
    run = agentkit.runs.open(tmp_path / "r")
    assert [run.rollout(r).rollout_index for r in run.rollout_ids(order="task")] == [0, 1]
