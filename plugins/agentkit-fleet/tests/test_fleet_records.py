"""Fleet JSON records: aliases, unknown fields, reserved keys, malformed records."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from agentkit_fleet.records import FleetRecord, escape_reserved, record_of, unescape_reserved
from agentkit_fleet.sources import FleetSourceError
from agentkit_fleet.taskset import fleet_taskset

from agentkit import Task, registry


def write(path: Path, data: object) -> str:
    path.write_text(json.dumps(data))
    return str(path)


def test_aliases_found_in_the_wild_are_normalized(tmp_path: Path) -> None:
    src = write(
        tmp_path / "t.json",
        [
            {
                "key": "k1",
                "prompt": "p",
                "env_id": "outlook",
                "version": "v3",
                "data_id": "d",
                "data_version": "v1",
                "verifier_func": "def v(env): return 1",
                "task_modality": "tool_use",
            }
        ],
    )
    ts = fleet_taskset(src)
    (task,) = list(ts)
    assert task.task_id == "fleet:k1"
    assert task.input == "p"
    record = record_of(task)
    assert (record.task_key, record.env_key, record.env_version, record.data_key) == (
        "k1",
        "outlook",
        "v3",
        "d",
    )
    assert record.verifier_code == "def v(env): return 1"
    assert record.extra == {}
    # data_id: OpenEnv d23f08d7 task_env.py:123-125 reads only data_key (so an exported
    # record's data_id is dropped there); agentkit follows the Fleet SDK's Task.data_key
    # (data_id:data_version), documented in the parity table
    assert (record.data_key, record.data_version) == ("d", "v1")


def test_both_spellings_resolve_as_upstream_reads_them(tmp_path: Path) -> None:
    # SkyRL 55a822642 integrations/fleet/env.py:68 and prepare_dataset.py:173, 229:
    # key or task_key, so "key" wins
    rec = FleetRecord.from_json({"key": "from-key", "task_key": "from-task-key", "prompt": "p"})
    assert rec.task_key == "from-key"
    assert rec.extra == {"task_key": "from-task-key"}
    empty_key = FleetRecord.from_json({"key": "", "task_key": "tk", "prompt": "p"})
    assert empty_key.task_key == "tk" and empty_key.extra == {"key": ""}
    # env.py:244 and prepare_dataset.py:125: env_key or env_id; OpenEnv task_env.py:310:
    # verifier_code or verifier_func
    rec = FleetRecord.from_json(
        {
            "task_key": "t",
            "prompt": "p",
            "env_id": "alias-env",
            "env_key": "canon-env",
            "verifier_func": "def a(env): return 0",
            "verifier_code": "def b(env): return 1",
        }
    )
    assert (rec.env_key, rec.verifier_code) == ("canon-env", "def b(env): return 1")
    assert rec.extra == {"env_id": "alias-env", "verifier_func": "def a(env): return 0"}
    rec = FleetRecord.from_json({"task_key": "t", "prompt": "p", "env_id": "e", "env_key": None})
    assert rec.env_key == "e"


def test_unknown_and_reserved_fields_survive_in_legal_metadata(tmp_path: Path) -> None:
    src = write(
        tmp_path / "t.json",
        {
            "tasks": [
                {
                    "task_key": "k",
                    "prompt": "p",
                    "model": "gpt-x",
                    "difficulty": 3,
                    "env_variables": {"SEED": "42", "LOGGED_IN_USER": "7"},
                    "metadata": {"source": {"temperature": 0.2}, "x-tag": "t"},
                }
            ]
        },
    )
    task = fleet_taskset(src).get_task("fleet:k")
    # the task is valid agentkit data: reserved keys are escaped, not dropped
    Task.from_json(task.to_json())
    assert task.metadata["fleet_extra"] == {"x-model": "gpt-x", "difficulty": 3}
    assert task.metadata["env_variables"]["x-SEED"] == "42"
    record = record_of(task)
    assert record.extra == {"model": "gpt-x", "difficulty": 3}
    assert record.env_variables == {"SEED": "42", "LOGGED_IN_USER": "7"}
    assert record.metadata == {"source": {"temperature": 0.2}, "x-tag": "t"}


def test_escaping_is_an_exact_inverse() -> None:
    value = {"model": {"x-model": [{"Seed": 1}]}, "x-": 2, "plain": None}
    assert unescape_reserved(escape_reserved(value)) == value


def test_bad_records_are_reported_with_their_index_and_the_rest_load(tmp_path: Path) -> None:
    src = write(
        tmp_path / "t.json",
        {
            "tasks": [
                {"task_key": "good1", "prompt": "p"},
                {"prompt": "no key"},
                "not an object",
                {"task_key": "good2", "prompt": "p", "task_modality": "telepathy"},
                {"task_key": "good1", "prompt": "again"},
                {"task_key": 5, "prompt": "p"},
                {"task_key": "good3", "prompt": ""},
                {"task_key": "good4", "prompt": "p", "env_variables": ["A"]},
                {"task_key": "good5", "prompt": "p"},
            ]
        },
    )
    ts = fleet_taskset(src)
    assert [t.item_id for t in ts] == ["good1", "good5"]
    messages = [str(p) for p in ts.problems]
    assert len(messages) == 7
    assert "tasks[1]" in messages[0] and "task_key" in messages[0]
    assert "tasks[2]" in messages[1] and "object" in messages[1]
    assert "tasks[3]" in messages[2] and "task_modality" in messages[2]
    assert "tasks[4]" in messages[3] and "duplicate" in messages[3]
    assert "tasks[5]" in messages[4] and "string" in messages[4]
    assert "tasks[6]" in messages[5] and "prompt" in messages[5]
    assert "tasks[7]" in messages[6] and "env_variables" in messages[6]
    assert all(str(src) in m for m in messages)


def test_a_file_that_is_not_a_task_list_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(FleetSourceError, match="tasks"):
        fleet_taskset(write(tmp_path / "t.json", {"items": []}))
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(FleetSourceError, match="not valid JSON"):
        fleet_taskset(str(bad))
    with pytest.raises(FleetSourceError, match="no such file"):
        fleet_taskset(str(tmp_path / "missing.json"))


def test_a_directory_loads_every_file_and_a_versioned_layout_checks_the_version(
    tmp_path: Path,
) -> None:
    flat = tmp_path / "flat"
    flat.mkdir()
    write(flat / "a.json", [{"task_key": "a", "prompt": "p"}])
    write(flat / "b.json", {"tasks": [{"task_key": "b", "prompt": "p"}]})
    assert sorted(t.item_id for t in fleet_taskset(str(flat))) == ["a", "b"]

    versioned = tmp_path / "bucket"
    for version in ("v0.1", "v0.2"):
        (versioned / version / "openenv").mkdir(parents=True)
        write(
            versioned / version / "openenv" / "all_tool_use.json",
            [{"task_key": f"t-{version}", "prompt": "p"}],
        )
    ts = fleet_taskset(str(versioned), data_version="v0.2", modality="tool_use")
    assert [t.item_id for t in ts] == ["t-v0.2"]
    with pytest.raises(FleetSourceError, match=r"v9.*existing versions: v0\.1, v0\.2"):
        fleet_taskset(str(versioned), data_version="v9")


def test_the_example_taskset_loads_through_the_registry() -> None:
    from fleet_helpers import TASKS_JSON

    ts = registry.resolve_taskset(f"fleet:{TASKS_JSON}")
    assert len(ts) >= 10
    assert not ts.problems
    for task in ts:
        record = record_of(task)
        assert record.env_key == "bookings" and record.verifier_code
    train = registry.resolve_taskset(f"fleet:{TASKS_JSON}", split="train")
    evals = registry.resolve_taskset(f"fleet:{TASKS_JSON}", split="eval")
    assert len(train) + len(evals) == len(ts)
