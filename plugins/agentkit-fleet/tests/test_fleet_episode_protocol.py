"""The fleet-tool-call harness implements agentkit's generic step protocol:
``harness.episode(task, context, on_event)`` is the episode ``run`` drives."""

from __future__ import annotations

import asyncio
import shutil
from typing import Any

import agentkit_fleet.episode
import pytest
from agentkit_fleet.episode import FleetToolCallEpisode
from agentkit_fleet.harness import FleetToolCallHarness
from agentkit_fleet.taskset import fleet_taskset
from fleet_helpers import SOLUTIONS, TASKS_JSON, script_for

import agentkit
from agentkit import (
    Episode,
    HarnessError,
    Limits,
    RunContext,
    StepCapableHarness,
    StepOutput,
    Task,
    is_step_capable,
)
from agentkit.testing.conformance import episode_conformance_test

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")

TASKS = fleet_taskset(str(TASKS_JSON))
KEY = "room-202-back-in-service"

# the step protocol's checks, with the solution's actions: the verifier gives 1.0
test_episode_conformance = episode_conformance_test(
    "fleet-tool-call",
    task=TASKS.get_task(f"fleet:{KEY}"),
    actions=SOLUTIONS[KEY],
    expect_reward=1.0,
)


def test_the_harness_and_its_episode_satisfy_the_core_protocol() -> None:
    harness = agentkit.registry.resolve_harness("fleet-tool-call")
    assert isinstance(harness, StepCapableHarness) and is_step_capable(harness)
    episode = harness.episode(TASKS.get_task(f"fleet:{KEY}"))
    assert isinstance(episode, Episode) and isinstance(episode, FleetToolCallEpisode)
    asyncio.run(episode.close())  # never started: closing is still fine
    # the plugin's StepOutput is the core's, re-exported
    assert agentkit_fleet.episode.StepOutput is StepOutput


def test_episode_takes_max_turns_from_the_context_and_streams_events() -> None:
    harness = FleetToolCallHarness(max_turns=7)
    task = TASKS.get_task(f"fleet:{KEY}")
    events: list[Any] = []

    async def play(context: RunContext | None) -> tuple[Any, list[StepOutput]]:
        episode = harness.episode(task, context, events.append)
        await episode.init()
        outputs = []
        try:
            while not outputs or not outputs[-1].done:
                outputs.append(await episode.step("thinking, no tool call yet"))
        finally:
            await episode.close()
        return episode, outputs

    _, outputs = asyncio.run(play(RunContext(rollout_id="r-1", limits=Limits(max_turns=2))))
    assert len(outputs) == 2 and outputs[-1].metadata["done_reason"] == "max_turns"
    assert outputs[0].observations[0]["role"] == "user" and outputs[-1].reward == 0.0
    kinds = [e.type for e in events]
    assert kinds[0] == "fleet.env.ready" and kinds[-1] == "fleet.env.closed"
    # no response made a call: Fleet's environment never finished, so no verifier ran
    assert "fleet.verifier.end" not in kinds
    assert {e.rollout_id for e in events} == {"r-1"}
    # without a context, the harness option applies
    _, outputs = asyncio.run(play(None))
    assert len(outputs) == 7


def test_episode_errors_name_what_is_missing() -> None:
    harness = FleetToolCallHarness(provider="mcp")
    with pytest.raises(HarnessError, match="needs mcp_url or mcp_command"):
        harness.episode(TASKS.get_task(f"fleet:{KEY}"))
    other = Task(task_id="fleet:elsewhere", input="hi", metadata={"env_key": "nowhere"})
    with pytest.raises(HarnessError):
        FleetToolCallHarness().episode(other)


def test_run_drives_the_same_episode_and_records_finish_reasons(model_server: Any) -> None:
    model_server.set_script(script_for(SOLUTIONS[KEY]))
    events: list[Any] = []
    result = asyncio.run(
        FleetToolCallHarness().run(
            TASKS.get_task(f"fleet:{KEY}"),
            RunContext(model="scripted", base_url=model_server.base_url, rollout_id="r-2"),
            events.append,
        )
    )
    assert result.status == "completed", result.error
    assert result.raw["reward"] == 1.0
    assert result.raw["finish_reasons"] == ["stop", "stop"]
    assert result.raw["stop_reason"] == "stop"
    kinds = [e.type for e in events]
    # the harness's events and the episode's go through one recorder, in order
    assert kinds[0] == "harness.start"
    assert kinds.index("fleet.env.ready") < kinds.index("model.request")
    assert kinds.index("fleet.verifier.end") < kinds.index("fleet.env.closed")
    assert [e.seq for e in result.events] == sorted(e.seq for e in result.events)
    assert {e.rollout_id for e in events} == {"r-2"}
