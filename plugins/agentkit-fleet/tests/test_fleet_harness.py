"""The fleet-tool-call harness end to end: real MCP servers, the scripted model, real sandboxes."""

from __future__ import annotations

import asyncio
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest
from agentkit_fleet.episode import FleetToolCallEpisode
from agentkit_fleet.harness import FleetToolCallHarness
from agentkit_fleet.prompt import FORMAT_REMINDER
from agentkit_fleet.taskset import fleet_taskset
from fleet_helpers import SOLUTIONS, TASKS_JSON, HttpBookings, script_for

from agentkit import Event, Limits, RunContext, registry
from agentkit.testing.conformance import harness_conformance_test

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")

TASKS = fleet_taskset(str(TASKS_JSON))

test_conformance = harness_conformance_test(
    "fleet-tool-call",
    task=TASKS.get_task("fleet:book-ada-double-anniversary"),
    script=script_for(SOLUTIONS["book-ada-double-anniversary"]),
)


def context(server: Any, **kw: Any) -> RunContext:
    return RunContext(model="scripted", base_url=server.base_url, api_key="sk-test-secret", **kw)


def run(harness: Any, task_key: str, ctx: RunContext, on_event: Any = None) -> Any:
    return asyncio.run(harness.run(TASKS.get_task(f"fleet:{task_key}"), ctx, on_event))


def test_a_correct_policy_gets_reward_1(model_server: Any) -> None:
    model_server.set_script(script_for(SOLUTIONS["book-ada-double-anniversary"]))
    harness = registry.resolve_harness("fleet-tool-call")
    result = run(harness, "book-ada-double-anniversary", context(model_server))
    assert result.status == "completed", result.error
    assert result.raw["reward"] == 1.0
    assert result.raw["done_reason"] == "agent_done"
    assert (result.raw["turns"], result.raw["tool_calls"], result.raw["tool_errors"]) == (2, 1, 0)
    assert result.messages[0]["role"] == "system" and result.messages[1]["role"] == "user"
    assert result.messages[3]["content"].startswith("Tool result:\n")
    types = [e.type for e in result.events]
    for expected in (
        "model.request",
        "model.response",
        "tool.call",
        "tool.result",
        "fleet.verifier.end",
        "fleet.env.closed",
    ):
        assert expected in types
    assert types.count("model.request") == 2
    # the model saw the system prompt with the tools, and the key never leaked
    first = model_server.chat_requests[0].body
    assert "create_booking" in first["messages"][0]["content"]
    assert "sk-test-secret" not in repr(result.to_json())


def test_a_wrong_policy_gets_reward_0_and_errors_are_observed(model_server: Any) -> None:
    actions = [
        "Let me think about it.",
        '<tool_call>{"name": "create_booking", "arguments": {broken}}</tool_call>',
        '<tool_call>{"name": "cancel_booking", "arguments": {"booking_id": 99}}</tool_call>',
        '<tool_call>{"name": "cancel_booking", "arguments": {"booking_id": 1}}</tool_call>',
        "Cancelled. <done>",
    ]
    model_server.set_script(script_for(actions))
    result = run(FleetToolCallHarness(), "cancel-grace-march", context(model_server))
    assert result.status == "completed", result.error
    assert result.raw["reward"] == 0.0
    observations = [m["content"] for m in result.messages if m["role"] == "user"][1:]
    # as Fleet's environment: unreadable calls get the reminder, a tool's own error is a result
    assert observations[:2] == [FORMAT_REMINDER, FORMAT_REMINDER]
    assert observations[2].startswith('Tool result:\n{\n  "error": ')
    assert "no booking with id 99" in observations[2]
    assert observations[3].startswith("Tool result:")
    assert observations[4] == "Task marked as complete."
    assert result.raw["tool_errors"] == 1 and result.raw["tool_calls"] == 2
    assert result.raw["parse_errors"] == 1
    rubric = FleetToolCallHarness().compile_rubric(TASKS)
    assert [f.name for f in rubric] == ["reward", "turns", "tool_calls", "tool_errors"]


def test_max_turns_ends_the_rollout(model_server: Any) -> None:
    loop = '<tool_call>{"name": "list_rooms", "arguments": {}}</tool_call>'
    model_server.set_script({"default": {"content": loop}})
    events: list[Event] = []
    result = run(
        FleetToolCallHarness(max_turns=10),
        "count-rooms-out-of-service",
        context(model_server, limits=Limits(max_turns=3)),
        events.append,
    )
    assert result.status == "completed"
    assert result.raw["done_reason"] == "max_turns" and result.raw["turns"] == 3
    # a call every turn: the verifier ran (and found no final answer)
    assert result.raw["verifier"] is not None and result.raw["reward"] == 0.0
    assert [e.seq for e in events] == list(range(len(events)))


@pytest.mark.parametrize("field", ["reasoning", "reasoning_content"])
def test_the_models_thinking_is_in_its_response_events(model_server: Any, field: str) -> None:
    """vLLM's ``reasoning`` (and the older ``reasoning_content``) reaches the
    ``model.response`` event, where the run's transcript shows it."""
    loop = '<tool_call>{"name": "list_rooms", "arguments": {}}</tool_call>'
    model_server.set_script(
        {"default": {"content": loop, "reasoning": "Rooms first.", "reasoning_field": field}}
    )
    result = run(
        FleetToolCallHarness(),
        "count-rooms-out-of-service",
        context(model_server, limits=Limits(max_turns=1)),
    )
    assert result.status == "completed", result.error
    (response,) = [e for e in result.events if e.type == "model.response"]
    assert response.data["reasoning"] == "Rooms first."


def test_max_turns_reached_on_a_correct_final_call_scores_that_state() -> None:
    """The verifier runs at max_turns against the databases as the last call left
    them, when every response made a call: cut off right after the right action
    still scores 1 (Fleet's environment reaches its own step limit then)."""
    task = TASKS.get_task("fleet:room-102-maintenance")

    async def play() -> Any:
        episode = FleetToolCallHarness().episode(task, RunContext(limits=Limits(max_turns=2)))
        await episode.init()
        try:
            first = await episode.step('<tool_call>{"name": "list_rooms"}</tool_call>')
            assert not first.done and first.observations[0]["content"].startswith("Tool result:")
            return await episode.step(SOLUTIONS["room-102-maintenance"][0])
        finally:
            await episode.close()

    last = asyncio.run(play())
    assert last.done and last.metadata["done_reason"] == "max_turns"
    assert last.observations == []
    assert last.reward == 1.0 and last.metadata["verifier"]["success"]


def test_the_tool_server_dying_mid_rollout_is_observed_and_the_rollout_completes(
    model_server: Any, http_bookings: HttpBookings
) -> None:
    actions = [
        '<tool_call>{"name": "cancel_booking", "arguments": {"booking_id": 3}}</tool_call>',
        '<tool_call>{"name": "list_rooms", "arguments": {}}</tool_call>',
        "<done>",
    ]
    model_server.set_script(script_for(actions))
    harness = FleetToolCallHarness(
        mcp_url=http_bookings.url,
        seed_db=str(http_bookings.seed),
        current_db=str(http_bookings.current),
        tool_timeout=10,
    )

    def kill_after_first_result(event: Event) -> None:
        if event.type == "tool.result":
            http_bookings.stop()

    result = run(harness, "cancel-grace-march", context(model_server), kill_after_first_result)
    # as Fleet's environment: an error observation, the episode goes on, the verifier
    # runs at done against the state the server left
    assert result.status == "completed", result.error
    assert result.raw["done_reason"] == "agent_done" and result.raw["reward"] == 1.0
    observations = [m["content"] for m in result.messages if m["role"] == "user"][1:]
    assert observations[1].startswith("Error: ") and http_bookings.url in observations[1]
    assert result.raw["tool_calls"] == 2 and result.raw["tool_errors"] == 1
    assert "fleet.env.closed" in [e.type for e in result.events]


def test_mcp_over_streamable_http_reaches_reward_1(
    model_server: Any, http_bookings: HttpBookings
) -> None:
    model_server.set_script(script_for(SOLUTIONS["room-102-maintenance"]))
    harness = registry.resolve_harness(
        "fleet-tool-call",
        mcp_url=http_bookings.url,
        seed_db=str(http_bookings.seed),
        current_db=str(http_bookings.current),
    )
    result = run(harness, "room-102-maintenance", context(model_server))
    assert result.status == "completed", result.error
    assert result.raw["reward"] == 1.0
    assert result.raw["environment"]["kind"] == "mcp"


def test_mcp_over_stdio_command_with_per_rollout_databases(
    model_server: Any, tmp_path: Path
) -> None:
    from agentkit_fleet.localenv.bookings import create_seed_db

    seed = create_seed_db(tmp_path / "seed.sqlite")
    model_server.set_script(script_for(SOLUTIONS["register-barbara"]))
    harness = FleetToolCallHarness(
        mcp_command=f"{sys.executable} -m agentkit_fleet.localenv.server "
        "--db {current_db} --seed {seed_db}",
        seed_db=str(seed),
    )
    result = run(harness, "register-barbara", context(model_server))
    assert result.status == "completed", result.error
    assert result.raw["reward"] == 1.0
    # the given seed database was copied, never changed
    import sqlite3

    with sqlite3.connect(seed) as con:
        assert con.execute("SELECT COUNT(*) FROM guests").fetchone()[0] == 4


def test_mcp_command_arguments_with_other_braces_are_passed_as_written(
    model_server: Any, tmp_path: Path
) -> None:
    """Only ``{seed_db}``, ``{current_db}`` and ``{workdir}`` are placeholders: a
    command may carry other braces (JSON, a shell snippet) untouched."""
    from agentkit_fleet.localenv.bookings import create_seed_db

    seed = create_seed_db(tmp_path / "seed.sqlite")
    model_server.set_script(script_for(SOLUTIONS["register-barbara"]))
    script = (
        'test "$3" = \'{"x": {}}\' || exit 3; '
        'exec "$0" -m agentkit_fleet.localenv.server --db "$1" --seed "$2"'
    )
    harness = FleetToolCallHarness(
        mcp_command=["sh", "-c", script, sys.executable, "{current_db}", "{seed_db}", '{"x": {}}'],
        seed_db=str(seed),
    )
    result = run(harness, "register-barbara", context(model_server))
    assert result.status == "completed", result.error
    assert result.raw["reward"] == 1.0


@pytest.mark.parametrize("task_key", sorted(SOLUTIONS))
def test_step_api_every_example_task_solution_scores_1_and_doing_nothing_scores_0(
    task_key: str,
) -> None:
    harness = FleetToolCallHarness()
    task = TASKS.get_task(f"fleet:{task_key}")

    async def play(actions: list[str]) -> tuple[float, list[Any]]:
        episode = harness.episode(task, RunContext(limits=Limits(max_turns=10)))
        history, metadata = await episode.init()
        assert [m["role"] for m in history] == ["system", "user"]
        assert metadata["task_key"] == task_key and metadata["env_key"] == "bookings"
        assert metadata["modality"] == "tool_use" and metadata["tools"]
        outputs = []
        try:
            for action in actions:
                out = await episode.step(action)
                outputs.append(out)
                if out.done:
                    break
        finally:
            await episode.close()
        return episode.reward, outputs

    reward, outputs = asyncio.run(play(SOLUTIONS[task_key]))
    assert reward == 1.0, outputs[-1].metadata
    assert outputs[-1].done and outputs[-1].reward == 1.0
    assert all(not o.done and o.reward == 0.0 for o in outputs[:-1])
    assert outputs[0].metadata["tool_call"] is not None
    assert outputs[0].observations[0]["content"].startswith("Tool result:")
    nothing, outputs = asyncio.run(play(["<done>"]))
    assert nothing == 0.0 and outputs[0].metadata["done_reason"] == "agent_done"


def test_a_call_with_done_runs_the_call_then_ends_the_episode() -> None:
    """Fleet's semantics: ``<done>`` ends the episode; a call beside it still runs first,
    and its result is the one observation."""
    harness = FleetToolCallHarness()
    task = TASKS.get_task("fleet:cancel-grace-march")
    call = SOLUTIONS["cancel-grace-march"][0]

    async def main() -> Any:
        episode = harness.episode(task, RunContext(limits=Limits(max_turns=10)))
        await episode.init()
        try:
            return await episode.step(f"{call}\nThat should do it. <done>"), episode
        finally:
            await episode.close()

    out, episode = asyncio.run(main())
    assert out.done and out.metadata["done_reason"] == "agent_done"
    assert out.metadata["tool_call"]["name"] == "cancel_booking"
    assert out.reward == 1.0  # the verifier saw the cancellation
    assert len(out.observations) == 1
    assert out.observations[0]["content"].startswith("Tool result:")
    assert episode.tool_calls == 1


def test_step_api_can_be_driven_from_different_tasks() -> None:
    """Training loops call init, step and close from whatever task they run in."""
    harness = FleetToolCallHarness()
    task = TASKS.get_task("fleet:room-202-back-in-service")
    actions = SOLUTIONS["room-202-back-in-service"]

    async def main() -> float:
        episode = FleetToolCallEpisode(task, harness.make_environment(task), max_turns=5)
        await asyncio.create_task(episode.init())
        for action in actions:
            out = await asyncio.create_task(episode.step(action))
        assert out.done
        await asyncio.create_task(episode.close())
        with pytest.raises(Exception, match="init"):
            await episode.step("<done>")
        return episode.reward

    assert asyncio.run(main()) == 1.0


def test_a_server_that_cannot_start_fails_the_rollout_with_its_stderr(model_server: Any) -> None:
    model_server.set_script({"default": {"content": "<done>"}})
    harness = FleetToolCallHarness(
        mcp_command=[sys.executable, "-c", "import sys; sys.exit('bookings db is corrupt')"],
        tool_timeout=10,
    )
    result = run(harness, "cancel-grace-march", context(model_server))
    assert result.status == "failed" and result.error_kind == "environment_start"
    assert "bookings db is corrupt" in (result.error or "")
    assert not model_server.chat_requests  # the model was never called


def test_partial_reward_from_the_verifiers_accumulators() -> None:
    task = TASKS.get_task("fleet:book-ada-double-anniversary")
    # right room and dates, but no note: 3 checks passed, 1 failed
    actions = [
        '<tool_call>{"name": "create_booking", "arguments": {"guest_id": 1, "room_id": 3, '
        '"check_in": "2026-04-10", "check_out": "2026-04-12"}}</tool_call>',
        "Booked. <done>",
    ]

    async def play(partial: bool) -> float:
        harness = FleetToolCallHarness(partial_reward=partial)
        episode = FleetToolCallEpisode(task, harness.make_environment(task), partial_reward=partial)
        await episode.init()
        try:
            for action in actions:
                await episode.step(action)
        finally:
            await episode.close()
        return episode.reward

    assert asyncio.run(play(False)) == 0.0
    # OpenEnv (cc5bf37c) task_env.py:617-626: a 0 score becomes successes / checks
    assert asyncio.run(play(True)) == 0.75
