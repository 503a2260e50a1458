"""Hostile or broken task files: each bad file (or line) is one clear problem naming it,
and every other task still loads. Deep nesting never raises RecursionError."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from agentkit import Task, ValidationError, registry
from agentkit.tasksets.jsonl import JsonlTaskset

EXAMPLES = Path(__file__).parent.parent.parent / "examples"

#: Far deeper than Python's recursion limit: the parsers used to die on it.
VERY_DEEP = 100_000
#: Parses, but code that walks it recursively later would not.
DEEP = 500


def nested_json(depth: int) -> str:
    return "[" * depth + "]" * depth


def need_plugin(name: str) -> None:
    try:
        registry.get("taskset", name)
    except Exception:
        pytest.skip(f"the {name} plugin is not installed")


def test_jsonl_bad_lines_are_each_one_problem_and_the_rest_load(tmp_path: Path) -> None:
    path = tmp_path / "tasks.jsonl"
    lines = [
        json.dumps({"id": "first", "input": "q", "target": "1"}),  # after a byte-order mark
        '{"id": "very-deep", "input": "q", "metadata": {"x": ' + nested_json(VERY_DEEP) + "}}",
        '{"id": "deep", "input": "q", "metadata": {"x": ' + nested_json(DEEP) + "}}",
        '{"id": "nan", "input": "q", "target": NaN}',
        '{"id": "inf", "input": "q", "target": -Infinity}',
        '{"id": "dup", "input": "q", "input": "r"}',
        json.dumps({"id": "last", "input": "q", "target": "2"}),
    ]
    path.write_bytes(b"\xef\xbb\xbf" + "\n".join(lines).encode() + b"\n")
    taskset = JsonlTaskset(path)
    assert [t.item_id for t in taskset] == ["first", "last"]
    assert [str(p) for p in taskset.problems] == [
        f"{path}:2: nested more than 100 levels deep",
        f"{path}:3: nested more than 100 levels deep",
        f"{path}:4: NaN is not a JSON number",
        f"{path}:5: -Infinity is not a JSON number",
        f"{path}:6: duplicate key 'input' in one object",
    ]


def test_tasks_built_in_python_are_checked_the_same_way() -> None:
    deep: list[object] = []
    for _ in range(DEEP):
        deep = [deep]
    with pytest.raises(ValidationError, match="metadata: nested more than 100 levels deep"):
        Task(task_id="t:1", input="q", metadata={"x": deep})
    with pytest.raises(ValidationError, match="input: nested more than 100 levels deep"):
        Task(task_id="t:1", input={"x": deep})
    with pytest.raises(ValidationError, match=r"target: expected a finite number, got nan"):
        Task(task_id="t:1", input="q", target=float("nan"))
    with pytest.raises(ValidationError, match=r"target\[1\]: expected a finite number, got inf"):
        Task(task_id="t:1", input="q", target=[1.0, float("inf")])


def test_the_cli_lists_every_problem(tmp_path: Path) -> None:
    path = tmp_path / "tasks.jsonl"
    path.write_text(
        '{"id": "a", "input": NaN}\n{"id": "b", "input": "q", "id": "c"}\n{"id": "d"}\n'
    )
    done = subprocess.run(
        [sys.executable, "-m", "agentkit", "run", f"jsonl:{path}", "chat", "--model", "m"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "3 failed to load" in done.stderr
    for number in (1, 2, 3):
        assert f"{path}:{number}: " in done.stderr
    assert "Traceback" not in done.stderr


def copy_harbor_task(root: Path, name: str) -> Path:
    task = root / name
    shutil.copytree(EXAMPLES / "harbor" / "hello-world", task)
    return task


@pytest.mark.parametrize(
    "toml",
    [
        "x = " + nested_json(VERY_DEEP),
        "x = " + "{a = " * VERY_DEEP + "1" + "}" * VERY_DEEP,
        "x = " + nested_json(DEEP),
    ],
    ids=["deep-array", "deep-inline-table", "deep-but-parseable"],
)
def test_a_deeply_nested_task_toml_is_one_problem(tmp_path: Path, toml: str) -> None:
    need_plugin("harbor")
    good = copy_harbor_task(tmp_path, "good")
    bad = copy_harbor_task(tmp_path, "bad")
    config = bad / "task.toml"
    config.write_text(config.read_text().replace("[task]", f"{toml}\n\n[task]", 1))
    taskset = registry.resolve_taskset(f"harbor:{tmp_path}")
    assert [t.item_id for t in taskset] == [good.name]
    assert [str(p) for p in taskset.problems] == [f"{config}: nested more than 100 levels deep"]


def test_a_bad_fleet_file_of_several_is_one_problem(tmp_path: Path) -> None:
    need_plugin("fleet")
    shutil.copy(EXAMPLES / "fleet" / "tasks.json", tmp_path / "a.json")
    (tmp_path / "b.json").write_text('{"tasks": ' + nested_json(VERY_DEEP) + "}")
    (tmp_path / "c.json").write_text('{"tasks": [], "tasks": []}')
    taskset = registry.resolve_taskset(f"fleet:{tmp_path}")
    expected = json.loads((tmp_path / "a.json").read_text())["tasks"]
    assert len(list(taskset)) == len(expected) > 0
    assert sorted(str(p) for p in taskset.problems) == [
        f"{tmp_path / 'b.json'}: not valid JSON (nested more than 100 levels deep)",
        f"{tmp_path / 'c.json'}: not valid JSON (duplicate key 'tasks' in one object)",
    ]
