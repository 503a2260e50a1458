"""The bridge uses only agentkit's generic step protocol: a step-capable
harness that is not the Fleet one (registered by an in-process plugin through
the real loader) runs under ``skyrl_gym.make`` too."""

from __future__ import annotations

import json
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import skyrl_gym

import agentkit
from agentkit import EventCallback, HarnessResult, RunContext, StepOutput, Task, registry


class GuessEpisode:
    """Say the task's target word; a wrong guess gets a hint; max_turns ends it."""

    def __init__(self, task: Task, max_turns: int) -> None:
        self.task, self.max_turns, self.turns = task, max_turns, 0
        self.closed = False

    async def init(self) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        return [{"role": "user", "content": str(self.task.input)}], {"kind": "guess"}

    async def step(self, action: str) -> StepOutput:
        self.turns += 1
        right = str(self.task.target) in action
        done = right or self.turns >= self.max_turns
        reason = "guessed" if right else "max_turns" if done else None
        return StepOutput(
            observations=[] if done else [{"role": "user", "content": "No. Try again."}],
            reward=float(right),
            done=done,
            metadata={"done_reason": reason},
        )

    async def close(self) -> None:
        self.closed = True


class GuessHarness:
    """A step-capable harness (SkyRL only uses ``episode``)."""

    name = "skyrl-test-guess"
    max_turns = 4

    def episode(
        self, task: Task, context: RunContext | None = None, on_event: EventCallback | None = None
    ) -> GuessEpisode:
        context = context or RunContext()
        return GuessEpisode(task, context.limits.max_turns or self.max_turns)

    async def run(
        self, task: Task, context: RunContext | None = None, on_event: EventCallback | None = None
    ) -> HarnessResult:
        return HarnessResult(status="failed", error="this test harness is driven by episode()")


@pytest.fixture
def guess_registered() -> Iterator[None]:
    plugin = types.SimpleNamespace(
        agentkit_register_harnesses=agentkit.hookimpl(lambda register: register(GuessHarness))
    )
    registry.reset([("skyrl-test", plugin, "skyrl-test-dist", "0")])
    try:
        yield
    finally:
        registry.reset()


def test_any_step_capable_harness_runs_under_skyrl(guess_registered: None, tmp_path: Path) -> None:
    tasks = tmp_path / "words.jsonl"
    tasks.write_text(
        json.dumps({"id": "capital", "input": "Capital of France?", "target": "Paris"})
    )
    config = {"taskset": f"jsonl:{tasks}", "harness": GuessHarness.name}
    env = skyrl_gym.make("agentkit", env_config=config, extras={"task_id": "words:capital"})
    history, metadata = env.init([])
    assert history == [{"role": "user", "content": "Capital of France?"}]
    assert metadata == {"kind": "guess", "task_id": "words:capital"}
    first = env.step("Lyon")
    assert (first["done"], first["reward"]) == (False, 0.0)
    assert first["observations"] == [{"role": "user", "content": "No. Try again."}]
    last = env.step("Paris, of course")
    assert (last["done"], last["reward"]) == (True, 1.0)
    env.close()
    assert env.episode.closed
    metrics = env.get_metrics()
    assert metrics == {
        # the keys SkyRL's Fleet env reports, for any harness (env_key: none here)
        "task_key": "capital",
        "env_key": None,
        "turns": 2,
        "tool_calls": 0,
        "reward": 1.0,
        "success": 1.0,
        "done_reason": "guessed",
    }

    # the harness's max_turns applies when neither extras nor env_config give one;
    # env_config's wins over the harness's, extras' (SkyRL's generator) over both
    env = skyrl_gym.make("agentkit", env_config=config, extras={"task_id": "words:capital"})
    env.init([])
    outputs = [env.step("Lyon") for _ in range(4)]
    env.close()
    assert [o["done"] for o in outputs] == [False, False, False, True]
    assert env.get_metrics()["done_reason"] == "max_turns"
    env = skyrl_gym.make(
        "agentkit", env_config={**config, "max_turns": 1}, extras={"task_id": "words:capital"}
    )
    env.init([])
    assert env.step("Lyon")["done"]
    env.close()
    env = skyrl_gym.make(
        "agentkit",
        env_config={**config, "max_turns": 1},
        extras={"task_id": "words:capital", "max_turns": 2},
    )
    env.init([])
    assert [env.step("Lyon")["done"] for _ in range(2)] == [False, True]
    env.close()
