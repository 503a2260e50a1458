"""RunOptions: one typed, frozen, checked-once class of a run's settings.

``AgentEnv.run/evaluate/generate/plan`` take it, its fields as keywords, or
both; ``RunOptions.from_mapping`` builds it from a TOML table with the strict
converter. (``tests/typing/run_options.py``, checked by ``nox -s types``,
shows that mypy checks every caller's keywords.)
"""

from __future__ import annotations

import json
import math
import tomllib
import typing
from pathlib import Path
from typing import Any

import attrs
import pytest

from agentkit import (
    Event,
    EventRecorder,
    HarnessResult,
    ListTaskset,
    Price,
    Rubric,
    RunContext,
    RunOptions,
    SpecError,
    Task,
    ValidationError,
)
from agentkit.env import AgentEnv, RunOptionsKeywords

pytestmark = pytest.mark.anyio


def exact(output: str | None, target: Any) -> float:
    return 1.0 if output == str(target) else 0.0


def tasks(n: int) -> ListTaskset:
    return ListTaskset(
        "ts",
        [Task(task_id=f"ts:{i}", input=f"q{i}", target=str(i)) for i in range(n)],
        default_grading_spec=Rubric([exact]),
    )


class Echo:
    """Answers every task correctly and says so in one event."""

    async def run(self, task: Task, context: Any = None, on_event: Any = None) -> HarnessResult:
        recorder = EventRecorder(task.task_id, context.rollout_id, on_event)
        await recorder.emit("log", max_connections=context.max_connections)
        return HarnessResult(status="completed", output=str(task.target), events=recorder.events)


#: Every value the hand checks refuse, and the message each gives.
REFUSED: list[tuple[str, Any, str]] = [
    ("rollouts_per_task", 0, "rollouts_per_task must be at least 1, got 0"),
    ("concurrency", 0, "concurrency must be at least 1, got 0"),
    ("max_retries", -1, "max_retries must be 0 or more, got -1"),
    ("limit", -1, "limit must be 0 or more, got -1"),
    ("timeout", 0, "timeout must be a number of seconds above 0, got 0"),
    ("timeout", float("inf"), "timeout must be a number of seconds above 0, got inf"),
    ("timeout", float("nan"), "timeout must be a number of seconds above 0, got nan"),
    ("pass_threshold", float("nan"), "pass_threshold must be a finite number, got nan"),
    ("retry_base_delay", -1.0, "retry_base_delay must be a number of seconds (0 or more), got -1"),
    ("retry_max_delay", float("inf"), "retry_max_delay must be a number of seconds (0 or more)"),
    ("callback_drain_timeout", -0.5, "callback_drain_timeout must be a number of seconds"),
    ("max_tokens", 0, "max_tokens must be at least 1, got 0"),
    ("max_turns", 0, "max_turns must be at least 1, got 0"),
    ("token_limit", 0, "token_limit must be at least 1, got 0"),
    ("message_limit", 0, "message_limit must be at least 1, got 0"),
    ("run_token_limit", 0, "run_token_limit must be at least 1, got 0"),
    ("cost_limit", 0.0, "cost_limit must be more than 0 (USD), got 0"),
    ("run_cost_limit", -2.5, "run_cost_limit must be more than 0 (USD), got -2.5"),
    ("event_buffer", -1, "event_buffer must be 0 or more, got -1"),
    ("task_ids", "ts:0", "task_ids must be a list of task ids, got the string 'ts:0'"),
    # a NaN or infinite number anywhere in a table of settings (it would be sent upstream
    # and written into every file the run writes)
    (
        "sampling_args",
        {"temperature": float("nan")},
        "sampling_args.temperature must be a finite number, got nan",
    ),
    (
        "sampling_args",
        {"extra_body": {"weights": [1.0, float("-inf")]}},
        "sampling_args.extra_body.weights[1] must be a finite number, got -inf",
    ),
    (
        "sandbox_options",
        {"max_cpu_seconds": float("inf")},
        "sandbox_options.max_cpu_seconds must be a finite number, got inf",
    ),
    ("price", {"input": float("nan"), "output": 1.0}, "price input: expected USD per million"),
    (
        "context",
        None,  # filled in below: a RunContext cannot be built with a NaN temperature
        "sampling_args.temperature must be a finite number, got nan",
    ),
]


@pytest.mark.parametrize(("field", "value", "message"), REFUSED)
async def test_each_bad_value_is_refused_once_with_its_message(
    field: str, value: Any, message: str, tmp_path: Path
) -> None:
    if field == "context":  # the context refuses it itself, before any run sees it
        with pytest.raises(SpecError, match=message):
            RunContext(sampling_args={"temperature": float("nan")})
        with pytest.raises(SpecError, match="timeout_sec must be a finite number, got inf"):
            RunContext().evolve(limits=attrs.evolve(RunContext().limits, timeout_sec=math.inf))
        return
    with pytest.raises(SpecError) as built:
        RunOptions(**{field: value})
    assert message in str(built.value)
    # the same message from evaluate's keywords, and from evolving good options;
    # nothing is created
    env = AgentEnv(tasks(1), Echo())
    with pytest.raises(SpecError) as through_env:
        await env.evaluate(out=tmp_path / "run", **{field: value})
    assert str(through_env.value) == str(built.value)
    with pytest.raises(SpecError) as evolved:
        attrs.evolve(RunOptions(), **{field: value})
    assert str(evolved.value) == str(built.value)
    assert not (tmp_path / "run").exists()


def test_the_keywords_are_the_fields_and_two_earlier_names() -> None:
    fields = {f.name for f in attrs.fields(RunOptions)}
    keywords = set(typing.get_type_hints(RunOptionsKeywords))
    assert keywords == fields | {"run_dir", "check_model_server"}


def test_options_are_frozen_and_evolve_changes_one_field() -> None:
    options = RunOptions(rollouts_per_task=4, task_ids=["a", "b"], out="runs/x")
    assert options.task_ids == ("a", "b") and options.out == Path("runs/x")
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        options.concurrency = 2  # type: ignore[misc]
    varied = attrs.evolve(options, concurrency=2)
    assert (varied.concurrency, varied.rollouts_per_task, options.concurrency) == (2, 4, 8)


def test_a_price_table_becomes_a_price_and_bad_prices_are_named() -> None:
    assert RunOptions(price={"input": 1, "output": 2}).price == Price(input=1.0, output=2.0)
    with pytest.raises(SpecError, match="unknown price 'inptu'"):
        RunOptions(price={"inptu": 1.0})


def test_the_repr_keeps_secret_headers_and_sandbox_option_values_out() -> None:
    secret = "sk-do-not-print-1234"
    options = RunOptions(
        headers={"Authorization": f"Bearer {secret}", "X-Team": "eval"},
        sandbox_options={"registry_token": secret},
    )
    text = repr(options)
    assert secret not in text
    assert "'X-Team': 'eval'" in text and "'registry_token': ..." in text


def test_resume_and_a_different_out_are_refused() -> None:
    with pytest.raises(SpecError, match=r"give either resume= .* or out= .*, not both"):
        RunOptions(resume="a", out="b")
    assert RunOptions(resume="a", out="a").resume == Path("a")


async def test_options_and_keywords_together_keywords_win(tmp_path: Path) -> None:
    env = AgentEnv(tasks(3), Echo())
    options = RunOptions(rollouts_per_task=2, limit=1, concurrency=5)
    plan = env.plan(options, limit=2, out=tmp_path / "r")
    assert plan["tasks"] == ["ts:0", "ts:1"] and plan["planned"] == 4
    assert plan["options"]["concurrency"] == 5 and plan["run_dir"] == str(tmp_path / "r")
    seen: list[Event] = []
    results = await env.evaluate(options, concurrency=3, trace_callback=seen.append)
    assert len(results.rollouts) == 2
    # the run's concurrency sizes the harness's connection pool
    assert [e.data["max_connections"] for e in seen] == [3, 3]
    groups = await env.generate(options, limit=3)
    assert [len(g.rollouts) for g in groups] == [2, 2, 2]
    assert options.limit == 1  # the caller's options are not changed


async def test_the_earlier_names_run_dir_and_check_model_server(tmp_path: Path) -> None:
    env = AgentEnv(tasks(1), Echo())
    results = await env.evaluate(run_dir=tmp_path / "a", check_model_server=False)
    assert results.run_dir == tmp_path / "a"
    assert env.plan(run_dir="x", out="x")["run_dir"] == "x"
    with pytest.raises(SpecError, match="give either out= or run_dir=, not both"):
        env.plan(run_dir="x", out="y")


async def test_a_run_may_bring_its_own_trace_callback() -> None:
    env_events: list[Event] = []
    run_events: list[Event] = []
    env = AgentEnv(tasks(2), Echo(), trace_callback=env_events.append)
    await env.evaluate(trace_callback=run_events.append)
    assert sorted(e.task_id for e in run_events) == ["ts:0", "ts:1"] and env_events == []
    await env.evaluate()
    assert len(env_events) == 2


RUN_TOML = """
rollouts-per-task = 3
concurrency = 2
task_ids = ["ts:0", "ts:2"]
timeout = 30
out = "runs/from-toml"
model = "m"
sampling_args = { temperature = 0.2 }
headers = { X-Team = "eval" }
price = { input = 0.5, output = 1 }
executor = "local"
"""


def test_from_mapping_builds_the_same_class_from_a_toml_table() -> None:
    options = RunOptions.from_mapping(tomllib.loads(RUN_TOML), source="run.toml")
    assert options == RunOptions(
        rollouts_per_task=3,
        concurrency=2,
        task_ids=["ts:0", "ts:2"],
        timeout=30.0,
        out="runs/from-toml",
        model="m",
        sampling_args={"temperature": 0.2},
        headers={"X-Team": "eval"},
        price=Price(input=0.5, output=1.0),
    )
    # and to vary one field per cell
    cells = [attrs.evolve(options, concurrency=c) for c in (1, 4)]
    assert [c.concurrency for c in cells] == [1, 4] and cells[0].model == "m"


@pytest.mark.parametrize(
    ("table", "error", "message"),
    [
        ({"concurrency": "4"}, ValidationError, "concurrency: expected an integer, got str '4'"),
        ({"preflight": "no"}, ValidationError, "preflight: expected a boolean, got str 'no'"),
        ({"task_ids": "ts:0"}, ValidationError, "task_ids: expected list[str] | None"),
        ({"timeout": True}, ValidationError, "timeout: expected float | None, got bool True"),
        ({"concurency": 2}, ValidationError, "concurency: unknown run option; known: "),
        ({"context": {}}, ValidationError, "context: not a file setting; known: "),
        ({"on_start": "print"}, ValidationError, "on_start: not a file setting"),
        ({"concurrency": 0}, SpecError, "concurrency must be at least 1, got 0"),
        ({"price": {"input": -1}}, SpecError, "price input: expected USD per million"),
        # TOML has nan and inf; no setting may hold them, typed or in a table
        ({"timeout": math.nan}, ValidationError, "timeout: expected a finite number, got nan"),
        (
            {"sampling_args": {"temperature": math.nan}},
            ValidationError,
            "sampling_args.temperature: expected a finite number, got nan",
        ),
        (
            {"price": {"input": math.inf, "output": 1.0}},
            ValidationError,
            "price.input: expected a finite number, got inf",
        ),
    ],
)
def test_from_mapping_is_strict_and_names_the_file_and_the_key(
    table: dict[str, Any], error: type[Exception], message: str
) -> None:
    with pytest.raises(error) as raised:
        RunOptions.from_mapping(table, source="run.toml")
    assert f"run.toml: {message}" in str(raised.value)


async def test_the_context_starts_the_run_context(tmp_path: Path) -> None:
    env = AgentEnv(tasks(1), Echo())
    context = RunContext(model="from-context", sampling_args={"temperature": 0.7})
    plan = env.plan(RunOptions(context=context, max_turns=3))
    assert plan["context"]["model"] == "from-context"
    assert plan["context"]["sampling_args"] == {"temperature": 0.7}
    assert plan["context"]["limits"]["max_turns"] == 3
    assert json.dumps(plan, default=str)
