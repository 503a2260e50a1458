"""The strict converter: JSON round trips, no coercion, errors with their path."""

from __future__ import annotations

import json
from typing import Any

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentkit import (
    Event,
    ExecResult,
    ExecutionHints,
    HarnessResult,
    Limits,
    Task,
    TaskImage,
    Usage,
    ValidationError,
)
from agentkit._convert import structure, unstructure
from agentkit._task import RESERVED_AGENT_KEYS, is_reserved_key

# --- strategies -----------------------------------------------------------------

texts = st.text(max_size=12)
finite = st.floats(allow_nan=False, allow_infinity=False)
ints = st.integers(min_value=-(2**63), max_value=2**63)
safe_keys = texts.filter(lambda k: not is_reserved_key(k))
json_values = st.recursive(
    st.none() | st.booleans() | ints | finite | texts,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(safe_keys, inner, max_size=3),
    max_leaves=10,
)
json_objects = st.dictionaries(safe_keys, json_values, max_size=4)
messages = st.lists(
    st.fixed_dictionaries(
        {"role": st.sampled_from(["system", "user", "assistant"])}, optional={"content": texts}
    ),
    max_size=3,
)
task_ids = st.builds(
    lambda a, b: f"{a}:{b}",
    st.from_regex(r"[A-Za-z0-9_.-]{1,10}", fullmatch=True),
    st.from_regex(r"[A-Za-z0-9_.:/-]{1,12}", fullmatch=True),
)

usages = st.builds(
    Usage,
    input_tokens=ints,
    output_tokens=ints,
    cached_tokens=ints,
    reasoning_tokens=ints,
    cost=finite,
    requests=ints,
)
events = st.builds(
    Event,
    type=texts,
    rollout_id=texts,
    task_id=task_ids,
    seq=st.integers(min_value=0),
    timestamp=finite,
    data=json_objects,
)
tasks = st.builds(
    Task,
    task_id=task_ids,
    input=st.none() | texts | messages | json_objects,
    target=json_values,
    metadata=json_objects,
    grading_spec=st.none() | json_objects,
)
results = st.builds(
    HarnessResult,
    status=st.sampled_from(["completed", "failed", "timeout", "cancelled"]),
    output=st.none() | texts,
    messages=messages,
    error=st.none() | texts,
    error_kind=st.none() | texts,
    usage=usages,
    events=st.lists(events, max_size=3),
    raw=json_objects,
)
exec_results = st.builds(
    ExecResult, exit_code=ints, stdout=texts, stderr=texts, timed_out=st.booleans()
)
optional_float = st.none() | finite
optional_int = st.none() | ints
hints = st.builds(
    ExecutionHints,
    workdir=texts,
    paths=st.dictionaries(texts, texts, max_size=3),
    env=st.dictionaries(texts, texts, max_size=3),
    network=st.booleans(),
    cpus=optional_float,
    memory_mb=optional_int,
    storage_mb=optional_int,
    timeout_sec=optional_float,
    tools=st.lists(texts, max_size=3),
    docs=st.none() | texts,
    image=st.none()
    | st.builds(
        TaskImage,
        dockerfile=st.none() | texts,
        context=st.none() | texts,
        image=st.none() | texts,
        compose_file=st.none() | texts,
        main_service=texts,
        build_timeout_sec=optional_float,
    ),
    gpus=optional_int,
)
limits = st.builds(
    Limits, timeout_sec=optional_float, max_turns=optional_int, max_tokens=optional_int
)

ALL = [
    (Task, tasks),
    (HarnessResult, results),
    (Usage, usages),
    (Event, events),
    (ExecResult, exec_results),
    (ExecutionHints, hints),
    (Limits, limits),
]


@pytest.mark.parametrize(("cls", "strategy"), ALL, ids=[c.__name__ for c, _ in ALL])
def test_json_round_trip(cls: type[Any], strategy: st.SearchStrategy[Any]) -> None:
    @given(strategy)
    def round_trip(obj: Any) -> None:
        text = json.dumps(unstructure(obj))
        again = structure(json.loads(text), cls)
        assert again == obj
        assert json.dumps(unstructure(again)) == text

    round_trip()


def test_to_json_and_from_json_helpers() -> None:
    task = Task(task_id="ts:1", input="q", target="a", metadata={"k": [1, {"x": None}]})
    assert Task.from_json(json.loads(json.dumps(task.to_json()))) == task
    result = HarnessResult(status="failed", error="boom", error_kind="agent_error")
    assert HarnessResult.from_json(result.to_json()) == result


# --- reserved keys at any depth ----------------------------------------------------

wrappers = st.lists(
    st.tuples(st.sampled_from(["dict", "list"]), safe_keys, st.integers(0, 2)), max_size=5
)


@given(
    key=st.sampled_from(sorted(RESERVED_AGENT_KEYS)),
    case=st.sampled_from([str.lower, str.upper, str.title]),
    levels=wrappers,
    index=st.integers(0, 50),
)
def test_reserved_key_rejected_at_any_depth(
    key: str, case: Any, levels: list[tuple[str, str, int]], index: int
) -> None:
    written = case(key)
    value: Any = {written: "x"}
    path = f".{written}"
    for kind, name, position in levels:
        if kind == "dict":
            value = {name: value}
            path = f".{name}{path}"
        else:
            value = [None] * position + [value]
            path = f"[{position}]{path}"
    if isinstance(value, list):  # metadata itself is an object
        value = {"outer": value}
        path = f".outer{path}"
    data = {"tasks": [{"task_id": "ts:1", "input": "q", "metadata": value}]}
    with pytest.raises(ValidationError) as info:
        structure(data["tasks"][0], Task, source="tasks.json", path=f"tasks[{index}]")
    assert info.value.path == f"tasks[{index}].metadata{path}"
    assert info.value.source == "tasks.json"
    assert str(info.value).startswith(
        f"tasks.json: tasks[{index}].metadata{path}: reserved agent key"
    )


def test_error_path_example_from_the_issue() -> None:
    with pytest.raises(ValidationError) as info:
        structure({"task_id": "ts:3", "metadata": {"model": "gpt"}}, Task, path="tasks[3]")
    assert str(info.value).startswith("tasks[3].metadata.model: reserved agent key")


# --- no coercion ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cls", "data", "path", "reason"),
    [
        (ExecResult, {"exit_code": "10"}, "exit_code", "expected an integer, got str '10'"),
        (ExecResult, {"exit_code": True}, "exit_code", "expected an integer, got bool True"),
        (ExecResult, {"exit_code": 10.0}, "exit_code", "expected an integer, got float 10.0"),
        (
            ExecResult,
            {"exit_code": 0, "timed_out": "true"},
            "timed_out",
            "expected a boolean, got str 'true'",
        ),
        (
            ExecResult,
            {"exit_code": 0, "timed_out": 1},
            "timed_out",
            "expected a boolean, got int 1",
        ),
        (ExecResult, {"exit_code": 0, "stdout": 5}, "stdout", "expected a string, got int 5"),
        (Usage, {"cost": "0.5"}, "cost", "expected a number, got str '0.5'"),
        (Usage, {"cost": False}, "cost", "expected a number, got bool False"),
        (Limits, {"max_turns": "10"}, "max_turns", "expected int | None, got str '10'"),
        (Limits, {"timeout_sec": "3"}, "timeout_sec", "expected float | None, got str '3'"),
        (ExecutionHints, {"network": "false"}, "network", "expected a boolean, got str 'false'"),
        (ExecutionHints, {"env": {"A": 1}}, "env.A", "expected a string, got int 1"),
        (ExecutionHints, {"tools": "bash"}, "tools", "expected a list, got str 'bash'"),
        (HarnessResult, {"status": "done"}, "status", "expected one of"),
        (
            HarnessResult,
            {"status": "completed", "messages": {}},
            "messages",
            "expected a list, got dict {}",
        ),
        (
            HarnessResult,
            {"status": "completed", "messages": [3]},
            "messages[0]",
            "expected an object, got int 3",
        ),
        (
            HarnessResult,
            {"status": "completed", "usage": 5},
            "usage",
            "expected an object, got int 5",
        ),
        (
            HarnessResult,
            {"status": "completed", "usage": {"input_tokens": "7"}},
            "usage.input_tokens",
            "expected an integer",
        ),
        (
            HarnessResult,
            {"status": "completed", "usage": {"tokens": 7}},
            "usage.tokens",
            "unknown key",
        ),
        (
            HarnessResult,
            {
                "status": "completed",
                "events": [
                    {
                        "type": "log",
                        "rollout_id": "r",
                        "task_id": "t:1",
                        "seq": 0,
                        "timestamp": 1.0,
                    },
                    {
                        "type": "log",
                        "rollout_id": "r",
                        "task_id": "t:1",
                        "seq": "1",
                        "timestamp": 1.0,
                    },
                ],
            },
            "events[1].seq",
            "expected an integer, got str '1'",
        ),
        (Task, {"task_id": "ts:1", "bogus": 1}, "bogus", "unknown key"),
        (Task, {"input": "q"}, "task_id", "required key is missing"),
        (Task, {"task_id": 5}, "task_id", "expected a string, got int 5"),
        (Task, {"task_id": "ts:1", "metadata": []}, "metadata", "expected an object, got list []"),
        (Task, {"task_id": "ts:1", "input": 3}, "input", "expected"),
        (Task, ["ts:1"], "", "expected an object, got list ['ts:1']"),
    ],
)
def test_no_coercion_and_paths(cls: type[Any], data: Any, path: str, reason: str) -> None:
    with pytest.raises(ValidationError) as info:
        structure(data, cls)
    assert info.value.path == path
    assert reason in info.value.reason


def test_valid_numbers_are_kept_and_ints_widen_to_float() -> None:
    usage = structure({"input_tokens": 10, "cost": 1}, Usage)
    assert usage.input_tokens == 10 and usage.cost == 1.0 and type(usage.cost) is float
    assert structure({"timeout_sec": 3}, Limits).timeout_sec == 3.0


def test_source_and_prefix_are_rendered() -> None:
    err = ValidationError("metadata.model", "reserved agent key", "tasks.jsonl:3")
    assert str(err) == "tasks.jsonl:3: metadata.model: reserved agent key"
    assert err.with_prefix("tasks[2]").path == "tasks[2].metadata.model"
    assert ValidationError("[1].x", "bad").with_prefix("items").path == "items[1].x"
    assert attrs.has(Task)


def test_usage_to_json_matches_the_converter() -> None:
    from agentkit import Usage
    from agentkit._convert import unstructure

    usage = Usage(input_tokens=3, output_tokens=4, cached_tokens=1, reasoning_tokens=2, cost=0.5)
    assert usage.to_json() == unstructure(usage)
