"""The generic step protocol (``agentkit.Episode``, ``StepOutput``,
``StepCapableHarness``): exported lazily, checkable at runtime, and a small
step-capable harness written against it runs both ways (stepped by the caller,
and by its own ``run`` against the scripted model server)."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import attrs
import pytest

import agentkit
from agentkit import (
    Episode,
    HarnessResult,
    RunContext,
    StepCapableHarness,
    StepOutput,
    Task,
    registry,
)
from agentkit._episode import is_step_capable
from agentkit._events import EventCallback, EventRecorder
from agentkit.testing.model_server import ScriptedModelServer


class GuessEpisode:
    """Say the task's target word; each wrong guess gets a hint, max_turns ends it."""

    def __init__(self, task: Task, max_turns: int, recorder: EventRecorder) -> None:
        self.task, self.max_turns, self.recorder = task, max_turns, recorder
        self.turns = 0
        self.closed = False

    async def init(self) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        await self.recorder.emit("harness.start", harness="guess")
        return [{"role": "user", "content": str(self.task.input)}], {"task_id": self.task.task_id}

    async def step(self, action: str) -> StepOutput:
        self.turns += 1
        right = str(self.task.target) in action
        done = right or self.turns >= self.max_turns
        observations = [] if done else [{"role": "user", "content": "No. Try again."}]
        return StepOutput(
            observations=observations, reward=float(right), done=done, metadata={"turn": self.turns}
        )

    async def close(self) -> None:
        self.closed = True


class GuessHarness:
    """A step-capable harness: ``run`` drives its own episode with the run's model."""

    name = "guess"

    def episode(
        self, task: Task, context: RunContext | None = None, on_event: EventCallback | None = None
    ) -> GuessEpisode:
        context = context or RunContext()
        recorder = EventRecorder(task.task_id, context.rollout_id, on_event)
        return GuessEpisode(task, context.limits.max_turns or 3, recorder)

    async def run(
        self, task: Task, context: RunContext | None = None, on_event: EventCallback | None = None
    ) -> HarnessResult:
        import openai

        context = context or RunContext()
        episode = self.episode(task, context, on_event)
        messages, _ = await episode.init()
        client = openai.AsyncOpenAI(base_url=context.base_url, api_key="unused", max_retries=0)
        try:
            while True:
                response = await client.chat.completions.create(
                    model=context.model or "m", messages=messages
                )
                action = response.choices[0].message.content or ""
                out = await episode.step(action)
                messages += [{"role": "assistant", "content": action}, *out.observations]
                if out.done:
                    break
        finally:
            await client.close()
            await episode.close()
        return HarnessResult(
            status="completed",
            messages=messages,
            raw={"reward": out.reward, "turns": episode.turns},
        )


TASK = Task(task_id="words:capital", input="Name the capital of France.", target="Paris")


def test_names_are_exported_lazily() -> None:
    code = (
        "import sys, agentkit; assert 'agentkit._episode' not in sys.modules; "
        "from agentkit import Episode, StepOutput, StepCapableHarness; "
        "assert StepOutput.__module__ == 'agentkit._episode'"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert {"Episode", "StepOutput", "StepCapableHarness"} <= set(agentkit.__all__)


def test_step_output_is_a_frozen_record_with_empty_metadata_by_default() -> None:
    out = StepOutput(observations=[], reward=1.0, done=True)
    assert out.metadata == {}
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        out.reward = 0.0  # type: ignore[misc]


def test_protocols_are_checkable_at_runtime() -> None:
    harness = GuessHarness()
    assert isinstance(harness, StepCapableHarness) and is_step_capable(harness)
    assert isinstance(harness.episode(TASK), Episode)
    assert not isinstance(object(), Episode)
    # a harness with only run() owns its model calls: not step-capable
    run_only = registry.resolve_harness("chat")
    assert not is_step_capable(run_only) and not isinstance(run_only, StepCapableHarness)


@pytest.mark.anyio
async def test_a_caller_steps_an_episode_to_its_reward() -> None:
    events: list[Any] = []
    episode = GuessHarness().episode(TASK, RunContext(rollout_id="r-9"), events.append)
    history, metadata = await episode.init()
    assert history == [{"role": "user", "content": "Name the capital of France."}]
    assert metadata == {"task_id": "words:capital"}
    first = await episode.step("Lyon")
    assert (first.done, first.reward, first.observations[0]["content"]) == (
        False,
        0.0,
        "No. Try again.",
    )
    last = await episode.step("It is Paris.")
    assert (last.done, last.reward, last.metadata) == (True, 1.0, {"turn": 2})
    await episode.close()
    assert episode.closed and [e.rollout_id for e in events] == ["r-9"]


@pytest.mark.anyio
async def test_run_drives_the_same_episode_with_a_model(
    model_server: ScriptedModelServer,
) -> None:
    model_server.set_script(
        {
            "rules": [{"match": {"turn": 0}, "reply": {"content": "Lyon"}}],
            "default": {"content": "Paris"},
        }
    )
    context = RunContext(model="m", base_url=model_server.base_url)
    result = await GuessHarness().run(TASK, context)
    assert result.raw == {"reward": 1.0, "turns": 2}
    assert [m["content"] for m in result.messages][1:] == ["Lyon", "No. Try again.", "Paris"]


class TasksetHarness(GuessHarness):
    """Takes the task's taskset as a keyword (as the terminal harness does)."""

    def __init__(self) -> None:
        self.tasksets: list[Any] = []

    def episode(  # type: ignore[override]
        self,
        task: Task,
        context: RunContext | None = None,
        on_event: EventCallback | None = None,
        *,
        taskset: Any = None,
    ) -> GuessEpisode:
        self.tasksets.append(taskset)
        return super().episode(task, context, on_event)


def test_open_episode_passes_the_taskset_only_to_a_harness_that_takes_it() -> None:
    taskset = agentkit.ListTaskset("words", [TASK])
    taker = TasksetHarness()
    episode = agentkit.open_episode(taker, TASK, RunContext(), taskset=taskset)
    assert isinstance(episode, GuessEpisode) and taker.tasksets == [taskset]
    agentkit.open_episode(taker, TASK)  # none given: the harness's default (None)
    assert taker.tasksets == [taskset, None]
    # a harness without the keyword is called as the protocol says, without it
    assert isinstance(agentkit.open_episode(GuessHarness(), TASK, taskset=taskset), GuessEpisode)
    with pytest.raises(agentkit.HarnessError, match="'chat' is not step-capable"):
        agentkit.open_episode(registry.resolve_harness("chat"), TASK, taskset=taskset)
