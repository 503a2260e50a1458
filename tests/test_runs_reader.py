"""``agentkit.runs``: the public reader of run directories (lazy, paginated, typed)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import agentkit.runs
from agentkit import AgentEnv, HarnessResult, ListTaskset, Rubric, Task, Usage
from agentkit.env import RolloutRecord
from agentkit.rundir import RUN_SCHEMA_VERSION

pytestmark = pytest.mark.anyio


def exact(output: str | None, target: Any) -> float:
    return 1.0 if output == str(target) else 0.0


class Echo:
    """Answers with the target for even items, else 'wrong'."""

    async def run(self, task: Task, context: Any = None, on_event: Any = None) -> HarnessResult:
        from agentkit import EventRecorder

        recorder = EventRecorder(task.task_id, context.rollout_id if context else "", on_event)
        await recorder.emit("model.request", turn=0)
        answer = str(task.target) if int(task.item_id) % 2 == 0 else "wrong"
        await recorder.emit("model.response", turn=0, message={"content": answer})
        return HarnessResult(
            status="completed",
            output=answer,
            messages=[
                {"role": "user", "content": str(task.input)},
                {"role": "assistant", "content": answer},
            ],
            usage=Usage(input_tokens=10, output_tokens=2, requests=1),
            events=list(recorder.events),
        )


async def make_run(tmp_path: Path, n: int = 2) -> Path:
    tasks = [Task(task_id=f"ts:{i}", input=f"say {i}", target=str(i)) for i in range(4)]
    env = AgentEnv(ListTaskset("ts", tasks, default_grading_spec=Rubric([exact])), Echo())
    run = tmp_path / "run"
    await env.evaluate(rollouts_per_task=n, out=run, model="m")
    return run


async def test_a_run_reads_as_typed_records(tmp_path: Path) -> None:
    run_dir = await make_run(tmp_path)
    run = agentkit.runs.open(run_dir)
    info = run.info
    assert (info.model, info.rollouts_per_task, info.planned) == ("m", 2, 8)
    assert info.schema_version == RUN_SCHEMA_VERSION and info.harness
    assert len(run) == 8
    page = run.rollouts(2, 3)
    assert [r.rollout_id for r in page] == run.rollout_ids()[2:5]
    first = run.rollout(run.rollout_ids(task_id="ts:0")[0])  # (any order of finishing)
    assert first.ok and first.reward == 1.0 and first.usage.input_tokens == 10
    assert first.messages[-1] == {"role": "assistant", "content": "0"}
    assert [s.type for s in run.steps(first.rollout_id)] == ["model.request", "model.response"]
    failed = run.rollouts(failed=True)
    assert {r.task_id for r in failed} == {"ts:1", "ts:3"}
    assert all(r.reason == "scored 0" for r in failed)
    tasks = run.tasks()
    assert tasks["ts:2"].input == "say 2" and tasks["ts:2"].target == "2"
    (metric,) = run.metrics()
    assert metric.name == "core.exact" and metric.mean == 0.5 and metric.count == 8
    summary = run.summary()
    stored = run.stored_summary()
    assert stored is not None
    for key in ("finished", "planned", "errors", "mean_reward", "pass_at_k", "usage"):
        assert summary[key] == stored[key], key
    assert summary["usage_mean"]["input_tokens"] == 10
    assert set(run.groups()) == {"ts:0", "ts:1", "ts:2", "ts:3"}
    (listing,) = agentkit.runs.list_runs(tmp_path)
    assert listing.finished == 8 and listing.mean_reward == 0.5 and listing.complete


async def test_a_run_being_written_is_followed_with_refresh(tmp_path: Path) -> None:
    run_dir = await make_run(tmp_path, n=1)
    run = agentkit.runs.open(run_dir)
    assert len(run) == 4
    path = run_dir / "rollouts.jsonl"
    again = json.loads(path.read_text().splitlines()[1])
    again["reward"] = 0.25
    with open(path, "a") as fh:
        fh.write(json.dumps(again) + "\n" + '{"type": "rollout", "rollout_id": "half')
    assert run.refresh() == 1
    assert len(run) == 4  # the same rollout again: its last line wins
    assert run.rollout(again["rollout_id"]).reward == 0.25
    assert run.torn_tail and "half-written" in run.torn_tail


def record(i: int) -> RolloutRecord:
    return RolloutRecord(
        rollout_id=f"item{i:05d}-r0",
        task_id=f"big:{i}",
        example_id=str(i),
        rollout_index=0,
        group=i,
        status="completed" if i % 10 else "failed",
        output="x" * 200,
        messages=[{"role": "user", "content": "y" * 2000}],
        usage={"input_tokens": 100, "output_tokens": 5, "cost": None},
        rewards={"core.ok": 1.0},
        reward=1.0 if i % 10 else 0.0,
        passed=bool(i % 10),
        error=None if i % 10 else "boom",
        error_kind=None if i % 10 else "harness_exception",
    )


def test_ten_thousand_rollouts_list_a_page_without_reading_the_rest(tmp_path: Path) -> None:
    run_dir = tmp_path / "big"
    run_dir.mkdir()
    m = {
        "kind": "agentkit.run",
        "schema_version": RUN_SCHEMA_VERSION,
        "created_at": 1.0,
        "plan": {"rollouts_per_task": 1, "task_ids": [f"big:{i}" for i in range(10_000)]},
        "context": {"model": "m"},
        "harness": {"name": "h"},
        "taskset": {"spec": "big:x"},
    }
    (run_dir / "manifest.json").write_text(json.dumps(m))
    with open(run_dir / "rollouts.jsonl", "w") as fh:
        for i in range(10_000):
            fh.write(json.dumps(record(i).to_json(), separators=(",", ":")) + "\n")
    run = agentkit.runs.open(run_dir)
    page = run.rollouts(5000, 50)
    assert [r.rollout_id for r in page] == [f"item{i:05d}-r0" for i in range(5000, 5050)]
    assert len(run._cache) == 50  # only the page was parsed
    assert not any(r._full for r in page)  # and only its small fields
    assert page[0].messages[0]["content"] == "y" * 2000  # read when used
    assert page[0]._full and not page[1]._full
    failed = run.rollouts(0, 5, failed=True)
    assert [r.task_id for r in failed] == ["big:0", "big:10", "big:20", "big:30", "big:40"]
    assert failed[0].reason == "harness_exception: boom"


def test_runs_written_in_schema_version_1_are_read(tmp_path: Path) -> None:
    run_dir = tmp_path / "old"
    run_dir.mkdir()
    m = {
        "kind": "agentkit.run",
        "schema_version": 1,
        "created_at": 1.0,
        "plan": {"rollouts_per_task": 1, "task_ids": ["old:0"]},
        "context": {"model": "m", "base_url": None, "api_key_env": "X", "sampling_args": {}},
    }
    (run_dir / "manifest.json").write_text(json.dumps(m))
    data = record(1).to_json()
    old_order = {k: data[k] for k in ("type", "rollout_id", "output", "messages")}
    old_order.update({k: v for k, v in data.items() if k not in old_order})
    (run_dir / "rollouts.jsonl").write_text(json.dumps(old_order) + "\n")
    run = agentkit.runs.open(run_dir)
    (only,) = run.rollouts()
    assert only.reward == 1.0 and only.output == "x" * 200
    assert run.info.headers == {} and run.tasks() == {}


def test_errors_name_the_run(tmp_path: Path) -> None:
    with pytest.raises(agentkit.env.RunDirError, match="not an agentkit run directory"):
        agentkit.runs.open(tmp_path)
    with pytest.raises(agentkit.env.RunDirError, match="no such folder of runs"):
        agentkit.runs.list_runs(tmp_path / "missing")


class DownForOdd:
    """Answers even items right; for odd items the model server is unreachable."""

    async def run(self, task: Task, context: Any = None, on_event: Any = None) -> HarnessResult:
        if int(task.item_id) % 2:
            return HarnessResult(
                status="failed",
                error="connection refused: 127.0.0.1:9",
                error_kind="model_connection",
            )
        return HarnessResult(status="completed", output=str(task.target))


async def test_rollouts_that_could_not_run_are_not_answers(tmp_path: Path) -> None:
    tasks = [Task(task_id=f"ts:{i}", input=f"say {i}", target=str(i)) for i in range(4)]
    env = AgentEnv(ListTaskset("ts", tasks, default_grading_spec=Rubric([exact])), DownForOdd())
    run_dir = tmp_path / "run"
    await env.evaluate(out=run_dir, model="m", max_retries=0)
    run = agentkit.runs.open(run_dir)
    down = [r for r in run.rollouts() if r.infrastructure]
    assert sorted(r.task_id for r in down) == ["ts:1", "ts:3"]
    assert all(r.reward is None and r.passed is None and not r.ok for r in down)
    assert all(r.reason.startswith("model_connection: connection refused") for r in down)
    # every planned rollout has its line, yet the run is not complete: resume runs these
    assert len(run) == run.info.planned and run.state() == "incomplete"
    assert run.infra_errors() == 2
    assert run.summary()["mean_reward"] == 1.0  # the two that ran, both right
    (listing,) = agentkit.runs.list_runs(tmp_path)
    assert (listing.infra_errors, listing.complete, listing.mean_reward) == (2, False, 1.0)
    # without summary.json (a run killed at its end) the lines alone tell the same
    (run_dir / "summary.json").unlink()
    again = agentkit.runs.open(run_dir)
    assert again.infra_errors() == 2 and again.state() == "incomplete"
    # the record's own marker decides: a line saying it ran is not counted
    lines = (run_dir / "rollouts.jsonl").read_text().splitlines()
    marked = [json.loads(line) for line in lines]
    for data in marked:
        if data["infra_error"]:
            data["infra_error"] = False
    (run_dir / "rollouts.jsonl").write_text("".join(json.dumps(d) + "\n" for d in marked))
    assert agentkit.runs.open(run_dir).state() == "complete"
