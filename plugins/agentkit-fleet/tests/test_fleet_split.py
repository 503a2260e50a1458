"""The deterministic train/eval split, checked against sets worked out independently.

Two kinds of expectations, neither computed with split.py's formula:

- small cases worked out by hand from the md5 fractions written beside them;
- the output of Fleet's own ``prepare_dataset.py`` (NovaSky-AI/SkyRL 55a822642,
  ``skyrl-train/integrations/fleet/prepare_dataset.py``), run on
  ``data/fleet_split_input.json`` for ``--modality tool_use``, ``computer_use``
  and ``all``; its train and validation rows (task_key, data_source, in file
  order) are stored in ``data/fleet_split_upstream.json``.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from agentkit_fleet.records import FleetRecord
from agentkit_fleet.split import SplitConfig, assign_splits, split_records, task_hash_fraction
from agentkit_fleet.taskset import fleet_taskset
from hypothesis import given, settings
from hypothesis import strategies as st

pq = pytest.importorskip("pyarrow.parquet")

DATA = Path(__file__).with_name("data")
SPLIT = [sys.executable, "-m", "agentkit", "fleet", "split"]


def rec(key: str, env: str | None = "env", modality: str = "tool_use") -> FleetRecord:
    return FleetRecord(task_key=key, prompt="p", env_key=env, task_modality=modality)  # type: ignore[arg-type]


def split_cli(src: Path, out: Path, *args: str) -> dict[str, Any]:
    proc = subprocess.run(
        [*SPLIT, f"fleet:{src}", "--out", str(out), *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    summary: dict[str, Any] = json.loads(proc.stdout)
    return summary


def rows(path: Path) -> list[list[str]] | None:
    if not path.exists():
        return None
    return [[r["task_key"], r["data_source"]] for r in pq.read_table(path).to_pylist()]


def test_the_hash_of_a_known_key() -> None:
    # md5("a") = 0cc175b9c0f1b6a8 31c399e269772661: the first 8 bytes over 2**64
    assert task_hash_fraction("a") == 0x0CC175B9C0F1B6A8 / 2**64


# -- worked out by hand ---------------------------------------------------------------
#
# md5 fractions (first 8 bytes / 2**64), rounded:
#   t0..t9: t2 0.0606, t3 0.0450, t4 0.0637; every other t0..t9 is above 0.2
#   r0..r16: r13 0.0321, r15 0.0009; every other r0..r16 is above 0.1; r44 0.0777


def test_ten_tasks_put_those_below_one_tenth_in_eval() -> None:
    # n = 10: target int(10 * 0.1) = 1, threshold 1 / 10
    sides = assign_splits([rec(f"t{i}", "alpha") for i in range(10)])
    assert {k for k, s in sides.items() if s == "eval"} == {"t2", "t3", "t4"}


def test_nine_tasks_all_go_to_train() -> None:
    # n = 9: target int(0.9) = 0 < 1 (min_eval_per_env)
    assert set(assign_splits([rec(f"t{i}", "alpha") for i in range(9)]).values()) == {"train"}


def test_records_left_out_still_size_their_group(tmp_path: Path) -> None:
    # beta: 18 tasks with a prompt and 2 without. Fleet sizes the group by all 20
    # records: target int(20 * 0.1) = 2, threshold 2 / 20 = 0.1, so r44 (0.0777) is
    # eval; sized by the 18 usable ones it would be 1 / 18 = 0.0556 and r44 train.
    tasks = [
        {"task_key": k, "prompt": "p", "env_key": "beta", "task_modality": "tool_use"}
        for k in [f"r{i}" for i in range(17)] + ["r44"]
    ]
    tasks += [{"task_key": f"blank{i}", "prompt": "", "env_key": "beta"} for i in range(2)]
    src = tmp_path / "tasks.json"
    src.write_text(json.dumps(tasks))
    summary = split_cli(src, tmp_path / "out")
    assert summary["skipped"] == 2
    assert rows(tmp_path / "out" / "validation.parquet") == [
        ["r13", "beta"],
        ["r15", "beta"],
        ["r44", "beta"],
    ]
    ts = fleet_taskset(str(src), split="eval", modality="tool_use")
    assert [t.item_id for t in ts] == ["r13", "r15", "r44"]


def test_held_out_envs_follow_the_modality_argument(tmp_path: Path) -> None:
    # instacart is held out when splitting computer_use; three tool_use instacart tasks
    # are too few for eval; in all-modalities mode nothing is held out and the six
    # instacart tasks (n = 6, target 0) all go to train
    tasks = [
        {"task_key": f"cu{i}", "prompt": "p", "env_key": "instacart", "task_modality": m}
        for i, m in enumerate(["computer_use"] * 3)
    ] + [
        {"task_key": f"tu{i}", "prompt": "p", "env_key": "instacart", "task_modality": "tool_use"}
        for i in range(3)
    ]
    src = tmp_path / "tasks.json"
    src.write_text(json.dumps(tasks))
    cu = split_cli(src, tmp_path / "cu", "--modality", "computer_use")
    assert (cu["train"]["tasks"], cu["validation"]["tasks"]) == (0, 3)
    assert cu["train"]["path"] is None and not (tmp_path / "cu" / "train.parquet").exists()
    tu = split_cli(src, tmp_path / "tu", "--modality", "tool_use")
    assert (tu["train"]["tasks"], tu["validation"]["tasks"]) == (3, 0)
    every = split_cli(src, tmp_path / "all", "--modality", "all")
    assert (every["train"]["tasks"], every["validation"]["tasks"]) == (6, 0)
    # --held-out keys by the modality argument, "all" for --modality all
    held = split_cli(src, tmp_path / "held", "--modality", "all", "--held-out", "all:instacart")
    assert (held["train"]["tasks"], held["validation"]["tasks"]) == (0, 6)


def test_an_empty_side_gets_no_file_and_a_stale_one_is_removed(tmp_path: Path) -> None:
    src = tmp_path / "tasks.json"
    src.write_text(
        json.dumps([{"task_key": f"t{i}", "prompt": "p", "env_key": "a"} for i in range(9)])
    )
    out = tmp_path / "out"
    out.mkdir()
    (out / "validation.parquet").write_text("from an earlier split")
    summary = split_cli(src, out)
    assert summary["validation"] == {"path": None, "tasks": 0}
    assert not (out / "validation.parquet").exists()
    assert rows(out / "train.parquet") == [[f"t{i}", "a"] for i in range(9)]


def test_the_default_modality_is_tool_use(tmp_path: Path) -> None:
    tasks = [{"task_key": "t", "prompt": "p", "env_key": "a", "task_modality": "tool_use"}]
    tasks.append({"task_key": "c", "prompt": "p", "env_key": "a", "task_modality": "computer_use"})
    src = tmp_path / "tasks.json"
    src.write_text(json.dumps(tasks))
    summary = split_cli(src, tmp_path / "out")
    assert summary["train"]["tasks"] == 1


# -- Fleet's prepare_dataset.py on stored data ---------------------------------------


def dedupe(rows_: list[list[str]] | None) -> list[list[str]] | None:
    """Upstream writes a row for each record of a duplicated key; agentkit keeps the
    first and reports the others (docs/fleet.md, parity table)."""
    if rows_ is None:
        return None
    seen: set[str] = set()
    out = []
    for key, source in rows_:
        if key not in seen:
            seen.add(key)
            out.append([key, source])
    return out


@pytest.mark.parametrize("modality", ["tool_use", "computer_use", "all"])
def test_the_split_is_upstreams_on_real_shaped_data(tmp_path: Path, modality: str) -> None:
    expected = json.loads((DATA / "fleet_split_upstream.json").read_text())[modality]
    src = DATA / "fleet_split_input.json"
    out = tmp_path / "out"
    split_cli(src, out, "--modality", modality)
    assert rows(out / "train.parquet") == dedupe(expected["train"])
    assert rows(out / "validation.parquet") == dedupe(expected["eval"])
    # the taskset gives the same sides, in the same order
    chosen = None if modality == "all" else modality
    for side, name in (("train", "train"), ("eval", "eval")):
        ts = fleet_taskset(str(src), split=side, modality=chosen)  # type: ignore[arg-type]
        assert [t.item_id for t in ts] == [k for k, _ in dedupe(expected[name]) or []]


def test_the_stored_upstream_data_covers_the_hard_cases() -> None:
    """Guard the data file: the cases the comparison is meant to cover are in it."""
    data = json.loads((DATA / "fleet_split_upstream.json").read_text())
    tool_eval = {k for k, _ in data["tool_use"]["eval"]}
    assert sum(1 for _, env in data["tool_use"]["eval"] if env == "github") > 30  # capped target
    assert any(k.startswith("nowhere-") for k, _ in data["tool_use"]["train"])  # "unknown" group
    assert {env for _, env in data["computer_use"]["eval"]} >= {"instacart"}
    assert not any(env == "jira" for _, env in data["tool_use"]["train"])  # other modality
    keys = [k for k, _ in data["tool_use"]["train"] + data["tool_use"]["eval"]]
    assert len(keys) != len(set(keys))  # duplicated keys
    assert "both-key-0" in keys or "both-key-0" in tool_eval  # key wins over task_key


# -- properties -------------------------------------------------------------------------

keys = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-_", min_size=1, max_size=12)
envs = st.sampled_from(["alpha", "beta", "gamma", "instacart", None])
modalities = st.sampled_from(["tool_use", "computer_use", "browser_use"])


@st.composite
def record_lists(draw: st.DrawFn) -> list[FleetRecord]:
    task_keys = draw(st.lists(keys, unique=True, max_size=120))
    return [rec(k, draw(envs), draw(modalities)) for k in task_keys]


configs = st.builds(
    SplitConfig,
    eval_ratio=st.floats(0.0, 1.0),
    max_eval_per_env=st.integers(0, 40),
    min_eval_per_env=st.integers(0, 5),
)


@settings(max_examples=150, deadline=None)
@given(record_lists(), configs, st.randoms(use_true_random=False))
def test_train_and_eval_partition_the_input_whatever_the_order(
    records: list[FleetRecord], config: SplitConfig, rnd: random.Random
) -> None:
    train, evals = split_records(records, config)
    assert {r.task_key for r in train} | {r.task_key for r in evals} == {
        r.task_key for r in records
    }
    assert not {r.task_key for r in train} & {r.task_key for r in evals}
    shuffled = list(records)
    rnd.shuffle(shuffled)
    assert assign_splits(shuffled, config) == assign_splits(records, config)
