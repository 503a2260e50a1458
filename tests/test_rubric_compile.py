"""Rubric compilation: order, namespaces, collisions, weights, sync/async, scoring errors."""

from __future__ import annotations

import json
import types
from collections.abc import Iterator
from typing import Any

import pytest

import agentkit
from agentkit import HarnessResult, ListTaskset, Rubric, Task, registry, reward
from agentkit.env import AgentEnv, RubricCompileError

pytestmark = pytest.mark.anyio


class EchoHarness:
    """Answers with the task's target; contributes a harness.* metric."""

    def __init__(self, with_rubric: bool = True, answer: str | None = None) -> None:
        self.with_rubric = with_rubric
        self.answer = answer

    async def run(self, task: Task, context: Any = None, on_event: Any = None) -> HarnessResult:
        out = self.answer if self.answer is not None else str(task.target)
        return HarnessResult(
            status="completed", output=out, messages=[{"role": "assistant", "content": out}]
        )

    def compile_rubric(self, taskset: Any) -> Rubric | None:
        if not self.with_rubric:
            return None

        def turns(messages: list[dict[str, Any]]) -> float:
            return float(len(messages))

        return Rubric([reward(turns, weight=0.0)])


def exact(output: str | None, target: Any) -> float:
    return 1.0 if output == str(target) else 0.0


def make_taskset(n: int = 2, spec: Rubric | None = None) -> ListTaskset:
    return ListTaskset(
        "ts",
        [Task(task_id=f"ts:{i}", input=f"q{i}", target=str(i)) for i in range(n)],
        default_grading_spec=spec if spec is not None else Rubric([exact]),
    )


@pytest.fixture
def contributor_plugin() -> Iterator[None]:
    """A plugin registering a rubric contributor named 'style', loaded for real."""

    def length_penalty(output: str | None) -> float:
        return -0.01 * len(output or "")

    def contributor(taskset: Any, harness: Any) -> Rubric:
        return Rubric([reward(length_penalty, weight=0.5)])

    module = types.ModuleType("style_plugin")

    @agentkit.hookimpl
    def agentkit_register_rubrics(register: Any) -> None:
        register(contributor, name="style")

    module.agentkit_register_rubrics = agentkit_register_rubrics  # type: ignore[attr-defined]
    registry.reset([("style", module, "agentkit-style", "1.0")])
    yield
    registry.reset()


def test_compiled_order_and_namespaces(contributor_plugin: None) -> None:
    env = AgentEnv(make_taskset(), EchoHarness())

    def bonus() -> float:
        return 1.0

    env.add_rubric(Rubric([bonus], weights=[0.25], name="mine"))
    env.add_rubric(lambda output: 0.0)
    manifest = env.describe_rubric()
    names = [m["name"] for m in manifest["metrics"]]
    assert names == [
        "core.exact",
        "harness.turns",
        "style.length_penalty",
        "mine.bonus",
        "user.<lambda>",
    ]
    sources = [m["source"] for m in manifest["metrics"]]
    assert sources == ["taskset", "harness", "contributor", "user", "user"]
    assert manifest["metrics"][2]["origin"].startswith("rubric contributor 'style'")
    assert [m["weight"] for m in manifest["metrics"]] == [1.0, 0.0, 0.5, 0.25, 1.0]
    json.dumps(manifest)  # JSON-serializable as promised


def test_duplicate_names_are_rejected_naming_both_origins() -> None:
    env = AgentEnv(make_taskset(), EchoHarness())
    with pytest.raises(RubricCompileError) as err:
        env.add_rubric(Rubric([exact], name="core"))
    message = str(err.value)
    assert "core.exact" in message
    assert "default_grading_spec" in message and "env.add_rubric()" in message
    # the failed add left the rubric unchanged
    assert [m["name"] for m in env.describe_rubric()["metrics"]] == ["core.exact", "harness.turns"]


def test_contributor_collision_with_a_user_rubric_names_the_distribution(
    contributor_plugin: None,
) -> None:
    def length_penalty() -> float:
        return 0.0

    env = AgentEnv(make_taskset(), EchoHarness())
    with pytest.raises(RubricCompileError, match=r"agentkit-style.*env\.add_rubric"):
        env.add_rubric(Rubric([length_penalty], name="style"))


async def test_weighted_total_sync_and_async_and_extra_metrics() -> None:
    async def judged(output: str | None) -> float:
        return 0.5

    def detailed(output: str | None) -> dict[str, float]:
        return {"detailed": 1.0, "length": float(len(output or ""))}

    env = AgentEnv(make_taskset(1), EchoHarness(with_rubric=False))
    env.add_rubric(Rubric([judged, detailed], weights=[2.0, 0.5]))
    results = await env.evaluate()
    rec = results.rollouts[0]
    assert rec.rewards == {
        "core.exact": 1.0,
        "user.judged": 0.5,
        "user.detailed": 1.0,
        "user.length": 1.0,
    }
    # 1*1.0 + 2*0.5 + 0.5*1.0 ; the extra 'length' metric has weight 0
    assert rec.reward == pytest.approx(2.5)


async def test_a_raising_reward_function_is_a_scoring_error_not_a_zero() -> None:
    def broken(output: str | None) -> float:
        raise ZeroDivisionError("judge crashed")

    def not_a_number(output: str | None) -> Any:
        return "high"

    env = AgentEnv(make_taskset(2), EchoHarness(with_rubric=False))
    env.add_rubric(Rubric([broken, not_a_number], weights=[1.0, 0.0]))
    results = await env.evaluate(rollouts_per_task=2)
    for rec in results.rollouts:
        assert rec.status == "completed"
        assert rec.reward is None  # never a silent 0
        assert rec.rewards["core.exact"] == 1.0
        errors = {e["metric"]: e["error"] for e in rec.scoring_errors}
        assert errors["user.broken"] == "ZeroDivisionError: judge crashed"
        assert "expected a number" in errors["user.not_a_number"]
        assert rec.advantage is None
    assert results.summary["errors"] == 4
    assert results.summary["error_kinds"] == {"scoring_error": 4}
    assert results.summary["mean_reward"] is None


async def test_a_weight_zero_failure_keeps_the_total() -> None:
    def telemetry(result: HarnessResult) -> float:
        raise KeyError("missing")

    env = AgentEnv(make_taskset(1), EchoHarness(with_rubric=False))
    env.add_rubric(Rubric([telemetry], weights=[0.0]))
    rec = (await env.evaluate()).rollouts[0]
    assert rec.reward == 1.0
    assert rec.scoring_errors and rec.scoring_errors[0]["metric"] == "user.telemetry"
    assert not rec.ok


async def test_reward_functions_receive_what_they_declare() -> None:
    seen: dict[str, Any] = {}

    def inspect_all(
        task: Task,
        result: HarnessResult,
        target: Any,
        messages: Any,
        grading_spec: Any,
        state: dict[str, Any],
        context: Any,
        sandbox: Any,
    ) -> float:
        seen.update(
            task=task,
            result=result,
            target=target,
            messages=messages,
            grading_spec=grading_spec,
            state=state,
            context=context,
            sandbox=sandbox,
        )
        return 1.0

    taskset = ListTaskset(
        "ts", [Task(task_id="ts:a", input="q", target="a", grading_spec={"match": "exact"})]
    )
    env = AgentEnv(taskset, EchoHarness(with_rubric=False), contributors=())
    env.add_rubric(inspect_all)
    await env.evaluate(model="some-model")
    assert seen["task"].task_id == "ts:a"
    assert seen["result"].output == "a"
    assert seen["target"] == "a"
    assert seen["grading_spec"] == {"match": "exact"}
    assert seen["state"]["completion"] == [{"role": "assistant", "content": "a"}]
    assert seen["state"]["task_id"] == "ts:a" and seen["state"]["example_id"] == "a"
    assert seen["context"].model == "some-model"
    assert seen["context"].rollout_id
    assert seen["sandbox"] is None  # this task needs no sandbox


def test_explicit_rubric_replaces_the_compiled_one() -> None:
    def always() -> float:
        return 1.0

    env = AgentEnv(make_taskset(), EchoHarness(), rubric=Rubric([always]))
    assert [m["name"] for m in env.describe_rubric()["metrics"]] == ["core.always"]


def test_a_broken_harness_compile_rubric_is_a_clear_error() -> None:
    class Broken(EchoHarness):
        def compile_rubric(self, taskset: Any) -> Rubric | None:
            raise RuntimeError("no grading config")

    with pytest.raises(RubricCompileError, match=r"Broken.compile_rubric\(\) failed.*no grading"):
        AgentEnv(make_taskset(), Broken())


def test_a_reward_function_asking_for_an_unknown_argument_is_refused_at_construction() -> None:
    """Otherwise every rollout gets the same TypeError as a scoring error, found only after."""

    def graded(output: str | None, answer: str) -> float:  # "answer" is never provided
        return 1.0

    def fine(output: str | None, extra: int = 0, *args: Any, **kwargs: Any) -> float:
        return 1.0

    with pytest.raises(RubricCompileError) as info:
        AgentEnv(make_taskset(), EchoHarness(), rubric=Rubric([graded]))
    message = str(info.value)
    assert "reward function 'graded'" in message and "AgentEnv(rubric=...)" in message
    assert "requires argument 'answer'" in message and "output, target" in message
    env = AgentEnv(make_taskset(), EchoHarness())
    with pytest.raises(RubricCompileError, match=r"env\.add_rubric.*requires argument 'answer'"):
        env.add_rubric(graded)
    assert [m["name"] for m in env.describe_rubric()["metrics"]] == ["core.exact", "harness.turns"]
    env.add_rubric(fine)  # optional and variadic parameters are fine


async def test_score_rollout_gives_each_function_what_it_declares_outside_a_run() -> None:
    from agentkit import RunContext
    from agentkit.env import compile_rubric

    seen: dict[str, Any] = {}

    def exact(output: str, target: str) -> float:
        return float(output == target)

    def looks(state: dict[str, Any], sandbox: Any, context: Any, grading_spec: Any) -> float:
        seen.update(state=state, sandbox=sandbox, context=context, spec=grading_spec)
        return 0.0

    task = Task(task_id="t:one", input="2+2?", target="4", grading_spec={"tolerance": 0})
    taskset = ListTaskset(
        "t", [task], default_grading_spec=Rubric([exact, reward(looks, weight=0)])
    )
    rubric = compile_rubric(taskset, EchoHarness())
    result = HarnessResult(
        status="completed", output="4", messages=[{"role": "assistant", "content": "4"}]
    )
    box = object()
    scored = await rubric.score_rollout(
        task, result, sandbox=box, context=RunContext(rollout_id="r-7")
    )
    assert scored.rewards == {"core.exact": 1.0, "core.looks": 0.0, "harness.turns": 1.0}
    assert scored.total == 1.0 and scored.errors == []
    assert seen["sandbox"] is box and seen["context"].rollout_id == "r-7"
    assert seen["spec"] == {"tolerance": 0}
    state = seen["state"]
    assert (state["task_id"], state["example_id"], state["rollout_id"]) == ("t:one", "one", "r-7")
    assert (state["prompt"], state["answer"]) == ("2+2?", "4")
    assert state["completion"] == [{"role": "assistant", "content": "4"}]
