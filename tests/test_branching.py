"""Branching runs' checks and groups: a BranchPlan out of range, a harness that cannot
branch, and GRPO groups per branch point in the training pipeline. (The runs
themselves, on real sandboxes and the real Fleet app, are in the terminal and Fleet
plugins' tests.)"""

from __future__ import annotations

import json
from pathlib import Path

import attrs
import pytest
from _calls_runs import call, write_calls

from agentkit import AgentEnv, BranchPlan, SpecError, ValidationError
from agentkit.env import PREFIX_STATUS, RolloutRecord
from agentkit.training import (
    TrainingRecord,
    assign_advantages,
    export_run,
    from_run_dir,
    prepare,
)

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


# -- the export of a branching run whose calls were recorded (calls/ files) -----------
#
# A branching run writes no calls files itself (its policy's calls do not pass the model
# proxy; docs/branching.md), but the export reads any run directory: here the prefix's
# calls file holds its 2 calls, each leaf's the prefix's calls then its own, one leaf's
# ending in a prefix break (a second sequence that starts after the branch point).

PREFIX_CALLS = [([1, 2], [10, 11]), ([1, 2, 10, 11, 3], [12])]


def stored(rollout_id: str, reward: float | None, **fields: object) -> str:
    record = RolloutRecord(  # type: ignore[misc]
        rollout_id=rollout_id,
        task_id="t",
        example_id="t",
        rollout_index=0,
        group=0,
        reward=reward,
        messages=[{"role": "user", "content": "q"}] + [{"role": "assistant", "content": "a"}] * 3,
        **({"status": "completed"} | fields),  # type: ignore[arg-type]
    )
    return json.dumps(record.to_json())


def branching_run_with_calls(run_dir: Path) -> Path:
    lines = [
        stored("t_0", None, status=PREFIX_STATUS, children=["t_0.b0", "t_0.b1"]),
        stored("t_0.b0", 1.0, parent_rollout_id="t_0", branch_step=2),
        stored("t_0.b1", 0.0, parent_rollout_id="t_0", branch_step=2),
        stored("t_1", 0.0),  # a rollout of the same task that was not forked
    ]
    (run_dir / "calls").mkdir(parents=True)
    (run_dir / "rollouts.jsonl").write_text("".join(x + "\n" for x in lines))
    prefix = [call("t_0", i, p, c, [-0.5] * len(c)) for i, (p, c) in enumerate(PREFIX_CALLS)]
    write_calls(run_dir, "t_0", prefix)
    for j in (0, 1):
        rid = f"t_0.b{j}"
        own = [call(rid, 2, [1, 2, 10, 11, 3, 12, 4], [20 + j], [-0.25])]
        if j == 1:
            own.append(call(rid, 3, [9, 9], [30], [-0.125]))  # a prefix break
        copied = [attrs.evolve(c, rollout_id=rid) for c in prefix]
        write_calls(run_dir, rid, copied + own)
    write_calls(run_dir, "t_1", [call("t_1", 0, [1, 2], [40], [-1.0])])
    return run_dir


def test_a_leaf_s_sequences_each_carry_the_prefix_fields_and_the_leaf_counts_once(
    tmp_path: Path,
) -> None:
    run_dir = branching_run_with_calls(tmp_path / "run")
    records = from_run_dir(run_dir)
    by = {(r.rollout_id, r.sequence): r for r in records}
    assert sorted(by) == [("t_0.b0", 0), ("t_0.b1", 0), ("t_0.b1", 1), ("t_1", 0)]
    for key in [("t_0.b0", 0), ("t_0.b1", 0), ("t_0.b1", 1)]:
        record = by[key]
        assert (record.prefix_id, record.branch_step, record.prefix_messages) == ("t_0", 2, 4)
    # the first sequence of each leaf is whole: the prefix's 2 calls, then its own
    first = by[("t_0.b1", 0)]
    assert first.prompt_token_ids == [1, 2]
    assert first.completion_token_ids == [10, 11, 3, 12, 4, 21]
    assert first.prefix_tokens == 4 == by[("t_0.b0", 0)].prefix_tokens
    assert by[("t_0.b1", 1)].prefix_tokens is None  # starts after the branch point
    assert by[("t_1", 0)].prefix_id is None and by[("t_1", 0)].prefix_tokens is None
    # per branch point: the 2 leaves (t_0.b1 once, not once per sequence); t_1 alone
    grouped = {
        (r.rollout_id, r.sequence): r.advantage for r in prepare(records, group_by="branch_point")
    }
    assert grouped == {
        ("t_0.b0", 0): 0.5,
        ("t_0.b1", 0): -0.5,
        ("t_0.b1", 1): -0.5,
        ("t_1", 0): 0.0,
    }
    # per task: the 3 rollouts of t, mean 1/3
    by_task = {(r.rollout_id, r.sequence): r.advantage for r in prepare(records)}
    assert by_task[("t_0.b0", 0)] == pytest.approx(2 / 3)
    assert by_task[("t_0.b1", 1)] == by_task[("t_1", 0)] == pytest.approx(-1 / 3)
    # truncation cuts prefix_tokens with the completion
    cut = prepare(records, max_seq_len=5)
    assert {(r.rollout_id, r.sequence): r.prefix_tokens for r in cut}[("t_0.b0", 0)] == 3


def test_every_export_format_that_takes_fields_carries_the_prefix_fields(
    tmp_path: Path,
) -> None:
    run_dir = branching_run_with_calls(tmp_path / "run")
    out = tmp_path / "out"
    out.mkdir()
    for fmt in ("jsonl", "parquet", "skyrl", "tinker", "verifiers"):
        export_run(run_dir, out / fmt, format=fmt, group_by="branch_point")  # type: ignore[arg-type]
    want = {("t_0.b0", 0): 4, ("t_0.b1", 0): 4, ("t_0.b1", 1): None, ("t_1", 0): None}

    def check(rows: list[dict[str, object]]) -> None:
        assert {(r["rollout_id"], r["sequence"]): r["prefix_tokens"] for r in rows} == want
        for r in rows:
            forked = r["rollout_id"] != "t_1"
            assert r["prefix_id"] == ("t_0" if forked else None)
            assert r["branch_step"] == (2 if forked else None)
            assert r["prefix_messages"] == (4 if forked else None)

    lines = (out / "jsonl").read_text().splitlines()
    check([json.loads(x) for x in lines])
    pq = pytest.importorskip("pyarrow.parquet")
    check(pq.read_table(out / "parquet").to_pylist())
    check(json.loads((out / "skyrl").read_text())["env_metrics"])
    check([json.loads(x)["agentkit"] for x in (out / "tinker").read_text().splitlines()])
    traces = {
        t["id"]: t["info"]["agentkit"]
        for t in map(json.loads, (out / "verifiers").read_text().splitlines())
    }
    check(
        [
            {
                **info,
                "rollout_id": rid,
                "sequence": s["sequence"],
                "prefix_tokens": s["prefix_tokens"],
            }
            for rid, info in traces.items()
            for s in info["sequences"]
        ]
    )
    # the advantages per branch point reach the trainer formats too
    skyrl = json.loads((out / "skyrl").read_text())["env_metrics"]
    assert [m["advantage"] for m in skyrl] == [0.5, -0.5, -0.5, 0.0]
