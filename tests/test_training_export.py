"""Training records from a real run: AgentEnv + chat harness + scripted model server,
exported with the real ``agentkit export`` command to JSONL and parquet."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from agentkit import AgentkitError
from agentkit.env import AgentEnv, RolloutRecord
from agentkit.testing.model_server import ScriptedModelServer
from agentkit.training import export_run, from_groups, from_rollouts, from_run_dir, prepare

pytestmark = pytest.mark.anyio

SCRIPT = {
    "rules": [
        # one of the three "capital" rollouts answers right, two answer wrong
        {"match": {"last_user_contains": "France"}, "times": 1, "reply": {"content": "Paris"}},
        {"match": {"last_user_contains": "France"}, "reply": {"content": "Lyon"}},
        # every "sum" rollout runs out of tokens
        {
            "match": {"last_user_contains": "1+1"},
            "reply": {
                "content": "Let me think about this for a very long",
                "finish_reason": "length",
            },
        },
    ],
    "default": {"content": "ok"},
}


@pytest.fixture
def tasks_file(tmp_path: Path) -> Path:
    path = tmp_path / "qa.jsonl"
    rows = [
        {"id": "capital", "input": "Capital of France?", "target": "Paris"},
        {"id": "sum", "input": "1+1?", "target": "2"},
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


async def test_export_cli_writes_jsonl_and_parquet(
    tmp_path: Path, tasks_file: Path, model_server: ScriptedModelServer
) -> None:
    model_server.set_script(SCRIPT)
    env = AgentEnv.from_names(f"jsonl:{tasks_file}", "chat")
    run_dir = tmp_path / "run"
    await env.evaluate(
        rollouts_per_task=3, concurrency=3, model="m", base_url=model_server.base_url, out=run_dir
    )
    jsonl = tmp_path / "train.jsonl"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "agentkit",
            "export",
            str(run_dir),
            "--format",
            "jsonl",
            "--out",
            str(jsonl),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "wrote 6 training records" in done.stdout
    rows = [json.loads(line) for line in jsonl.read_text().splitlines()]
    capital = [r for r in rows if r["task_id"] == "qa:capital"]
    assert sorted(r["reward"] for r in capital) == [0.0, 0.0, 1.0]
    # GRPO: reward minus the group mean (1/3)
    assert sorted(round(r["advantage"], 6) for r in capital) == [-0.333333, -0.333333, 0.666667]
    assert all(r["loss_mask"] == 1.0 and not r["overlong"] for r in capital)
    assert all(r["prompt"] == [{"role": "user", "content": "Capital of France?"}] for r in capital)
    assert all(r["completion"][0]["role"] == "assistant" for r in capital)
    total = [r for r in rows if r["task_id"] == "qa:sum"]
    assert all(r["stop_reason"] == "length" for r in total)
    assert all(r["overlong"] and r["loss_mask"] == 0.0 for r in total)
    assert all(r["advantage"] == 0.0 for r in total)  # all wrong: no signal

    pq = pytest.importorskip("pyarrow.parquet")
    parquet = tmp_path / "train.parquet"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "agentkit",
            "export",
            str(run_dir),
            "--format",
            "parquet",
            "--out",
            str(parquet),
            "--normalize",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    table = pq.read_table(parquet).to_pylist()
    assert len(table) == 6
    by_task: dict[str, list[float]] = {}
    for row in table:
        by_task.setdefault(row["task_id"], []).append(row["advantage"])
        assert json.loads(row["prompt"])[0]["role"] == "user"
    assert math.fsum(by_task["qa:capital"]) == pytest.approx(0.0, abs=1e-9)
    # normalized: (1 - 1/3) / std, std = sqrt(2)/3
    assert max(by_task["qa:capital"]) == pytest.approx((2 / 3) / (math.sqrt(2) / 3 + 1e-6))


async def test_generate_groups_become_training_records(
    tasks_file: Path, model_server: ScriptedModelServer
) -> None:
    model_server.set_script(SCRIPT)
    env = AgentEnv.from_names(f"jsonl:{tasks_file}", "chat")
    groups = await env.generate(rollouts_per_task=2, model="m", base_url=model_server.base_url)
    records = prepare(from_groups(groups))
    assert {r.task_id for r in records} == {"qa:capital", "qa:sum"}
    for r in records:
        assert r.overlong == (r.task_id == "qa:sum")
    capital = sorted(r.advantage for r in records if r.task_id == "qa:capital")
    assert capital == [-0.5, 0.5]


def test_export_errors_name_what_is_wrong(tmp_path: Path) -> None:
    with pytest.raises(AgentkitError, match=r"rollouts\.jsonl: no such file"):
        from_run_dir(tmp_path)
    (tmp_path / "rollouts.jsonl").write_text("")
    with pytest.raises(AgentkitError, match="unknown export format 'csv'"):
        export_run(tmp_path, tmp_path / "x.csv", format="csv")  # type: ignore[arg-type]
    done = subprocess.run(
        [sys.executable, "-m", "agentkit", "export", str(tmp_path / "missing"), "--out", "x"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2 and "no such file" in done.stderr


@pytest.mark.parametrize(
    ("field", "value", "expected"),
    [
        ("completion_token_ids", [5, True], "a list of integers"),
        ("prompt_token_ids", [1.0, 2], "a list of integers"),
        ("completion_mask", "11", "a list of integers"),
        ("completion_logprobs", [-0.5, False], "a list of numbers"),
    ],
)
def test_a_harness_token_field_that_is_not_token_ids_is_refused_naming_it(
    field: str, value: object, expected: str
) -> None:
    raw = {"prompt_token_ids": [1, 2], "completion_token_ids": [5, 6], field: value}
    rollout = RolloutRecord(
        rollout_id="t-0-r0",
        task_id="t:0",
        example_id="0",
        rollout_index=0,
        group=0,
        status="completed",
        messages=[{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}],
        raw=raw,
    )
    with pytest.raises(AgentkitError, match=f"rollout 't-0-r0' raw.{field}.*{expected}"):
        from_rollouts([rollout])
    del raw[field]  # without it, the same rollout is a record
    expected_ids = None if field == "completion_token_ids" else [5, 6]
    assert from_rollouts([rollout])[0].completion_token_ids == expected_ids


def test_parquet_without_pyarrow_says_what_to_install(tmp_path: Path) -> None:
    # a real interpreter in which pyarrow cannot be imported
    code = (
        "import sys; sys.modules['pyarrow'] = None\n"
        "from agentkit.training import write_parquet\n"
        "try:\n    write_parquet([], sys.argv[1])\n"
        "except Exception as exc:\n    print(type(exc).__name__, exc)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "x.parquet")],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert "ExportError" in done.stdout
    assert "pip install 'agentkit[parquet]'" in done.stdout


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_an_unwritable_output_is_a_clear_error_and_leaves_nothing(tmp_path: Path, fmt: str) -> None:
    pytest.importorskip("pyarrow")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "rollouts.jsonl").write_text("")
    out = tmp_path / "no" / "such" / f"train.{fmt}"
    export = [sys.executable, "-m", "agentkit", "export", str(run_dir), "--format", fmt]
    done = subprocess.run(
        [*export, "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr and str(out) in done.stderr
    assert f".{out.name}.tmp" not in done.stderr
    # a directory given as the output: also an error naming it, no temp file left
    target = tmp_path / "a-directory"
    target.mkdir()
    with pytest.raises(AgentkitError, match="a-directory"):
        export_run(run_dir, target, format=fmt)  # type: ignore[arg-type]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-directory", "run"]
