"""``agentkit fleet split``: train and validation parquet with the training columns."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pq = pytest.importorskip("pyarrow.parquet")

SPLIT = [sys.executable, "-m", "agentkit", "fleet", "split"]


def test_split_writes_train_and_validation_parquet(tmp_path: Path) -> None:
    records = [
        {
            "task_key": f"a-{i}",
            "prompt": f"do {i}",
            "env_key": "alpha",
            "env_version": "v2",
            "data_key": "d",
            "data_version": "v1",
            "verifier_code": "def v(env): return 1",
            "env_variables": {"CURRENT_DATE": "2026-01-01"},
        }
        for i in range(60)
    ] + [{"task_key": f"b-{i}", "prompt": "p", "env_key": "beta"} for i in range(5)]
    records.append({"prompt": "no key"})
    src = tmp_path / "all_tool_use.json"
    src.write_text(json.dumps({"tasks": records}))
    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, "-m", "agentkit", "fleet", "split", f"fleet:{src}", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    assert "tasks[65]" in proc.stderr and summary["skipped"] == 1
    train = pq.read_table(out / "train.parquet").to_pylist()
    evals = pq.read_table(out / "validation.parquet").to_pylist()
    assert summary["train"]["tasks"] == len(train) and summary["validation"]["tasks"] == len(evals)
    assert len(train) + len(evals) == 65
    # alpha (60 tasks: target 6) has eval tasks; beta (5: target 0) has none
    assert evals and all(r["data_source"] == "alpha" for r in evals)
    # rows as Fleet's prepare_dataset.py orders them: environments sorted, input order
    assert [r["task_key"] for r in train][-5:] == [f"b-{i}" for i in range(5)]
    row = (
        next(r for r in train if r["task_key"] == "a-0")
        if any(r["task_key"] == "a-0" for r in train)
        else next(r for r in evals if r["task_key"] == "a-0")
    )
    assert row["prompt"] == [{"role": "user", "content": "do 0"}]
    assert row["env_class"] == "fleet_task"
    assert (row["env_key"], row["env_version"], row["data_key"], row["data_version"]) == (
        "alpha",
        "v2",
        "d",
        "v1",
    )
    assert json.loads(row["env_variables"]) == {"CURRENT_DATE": "2026-01-01"}
    assert row["task_modality"] == "tool_use"


def test_split_reports_a_missing_source_without_a_traceback(tmp_path: Path) -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "agentkit",
            "fleet",
            "split",
            str(tmp_path / "nope.json"),
            "--out",
            str(tmp_path / "o"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    assert "no such file" in proc.stderr and "Traceback" not in proc.stderr


def test_split_with_modality_agrees_with_the_taskset_split(tmp_path: Path) -> None:
    """``fleet split --modality`` and ``-T split=... -T modality=...`` give the same sides.

    One env with tasks of two modalities in one file: both paths keep the
    modality's tasks first and split those (as Fleet's prepare_dataset.py), so
    no task is in validation.parquet and in the taskset's train side.
    """
    from agentkit import registry

    records = [
        {"task_key": f"g-{m}-{i}", "prompt": "p", "env_key": "github", "task_modality": m}
        for m in ("tool_use", "computer_use")
        for i in range(300)
    ]
    src = tmp_path / "mixed.json"
    src.write_text(json.dumps(records))
    out = tmp_path / "out"
    proc = subprocess.run(
        [*SPLIT, f"fleet:{src}", "--modality", "tool_use", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    cli_eval = {r["task_key"] for r in pq.read_table(out / "validation.parquet").to_pylist()}
    cli_train = {r["task_key"] for r in pq.read_table(out / "train.parquet").to_pylist()}
    ts_eval = registry.resolve_taskset(f"fleet:{src}", split="eval", modality="tool_use")
    ts_train = registry.resolve_taskset(f"fleet:{src}", split="train", modality="tool_use")
    assert cli_eval == {t.item_id for t in ts_eval} and cli_eval
    assert cli_train == {t.item_id for t in ts_train}
    assert all(k.startswith("g-tool_use-") for k in cli_eval | cli_train)


def test_bad_split_options_are_clear_errors_without_a_traceback(tmp_path: Path) -> None:
    src = tmp_path / "tasks.json"
    src.write_text(json.dumps([{"task_key": "a", "prompt": "p", "env_key": "e"}]))
    split = [*SPLIT, f"fleet:{src}"]
    for bad in (["--eval-ratio", "2"], ["--max-eval-per-env", "-1"]):
        proc = subprocess.run(
            [*split, "--out", str(tmp_path / "o"), *bad],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert proc.returncode == 2, proc.stderr
        assert "Traceback" not in proc.stderr and "must" in proc.stderr
    run = [sys.executable, "-m", "agentkit", "run", f"fleet:{src}", "fleet-tool-call"]
    proc = subprocess.run(
        [*run, "-T", "split=eval", "-T", "eval_ratio=1.5", "--model", "m"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr and "eval_ratio must be between 0 and 1" in proc.stderr


def test_summary_of_a_directory_that_is_not_a_run_is_a_clear_error(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "agentkit", "fleet", "summary", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr and "rollouts.jsonl" in proc.stderr
