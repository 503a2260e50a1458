"""Branching runs' checks and groups: a BranchPlan out of range, a harness that cannot
branch, and GRPO groups per branch point in the training pipeline. (The runs
themselves, on real sandboxes and the real Fleet app, are in the terminal and Fleet
plugins' tests.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from agentkit import AgentEnv, BranchPlan, SpecError, ValidationError
from agentkit.training import TrainingRecord, assign_advantages, prepare

ROOT = Path(__file__).resolve().parents[1]
TASKS = ROOT / "examples" / "jsonl" / "arithmetic.jsonl"


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"at": -1, "children": 2}, "BranchPlan.at must be an integer of at least 0, got -1"),
        ({"at": 1, "children": 0}, "BranchPlan.children must be an integer of at least 1"),
        ({"at": True, "children": 2}, "BranchPlan.at must be an integer"),
    ],
)
def test_a_plan_out_of_range_is_refused_naming_the_field(
    fields: dict[str, int], message: str
) -> None:
    with pytest.raises(SpecError, match=message):
        BranchPlan(**fields)


@pytest.mark.anyio
async def test_a_harness_without_episodes_is_refused_before_anything_is_written(
    tmp_path: Path,
) -> None:
    env = AgentEnv.from_names(f"jsonl:{TASKS}", "chat")
    with pytest.raises(SpecError, match="harness 'chat' is not step-capable"):
        await env.branch(
            BranchPlan(at=1, children=2),
            model="m",
            base_url="http://127.0.0.1:9",
            out=tmp_path / "run",
        )
    assert not (tmp_path / "run").exists()


def leaf(rollout_id: str, task: str, reward: float, prefix: str | None) -> TrainingRecord:
    return TrainingRecord(
        rollout_id=rollout_id,
        task_id=task,
        example_id=task,
        rollout_index=0,
        group=0,
        status="completed",
        reward=reward,
        prefix_id=prefix,
        branch_step=None if prefix is None else 2,
    )


def test_groups_per_branch_point_or_per_task() -> None:
    records = [
        leaf("a.b0", "t", 1.0, "a"),
        leaf("a.b1", "t", 1.0, "a"),
        leaf("b.b0", "t", 0.0, "b"),
        leaf("b.b1", "t", 1.0, "b"),
        leaf("c", "t", 0.0, None),  # not forked: grouped by its task
        leaf("d", "u", 0.0, None),
    ]
    by_point = assign_advantages(records, group_by="branch_point")
    assert [r.advantage for r in by_point] == [0.0, 0.0, -0.5, 0.5, 0.0, 0.0]
    assert by_point[0].branch_point == "a@2" and by_point[4].branch_point is None
    by_task = prepare(records)  # the default: every record of a task together
    assert [r.advantage for r in by_task][:5] == [0.4, 0.4, -0.6, 0.4, -0.6]
    with pytest.raises(ValidationError, match="group_by"):
        assign_advantages(records, group_by="tree")  # type: ignore[arg-type]
