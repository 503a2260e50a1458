"""Parity with Fleet's SkyRL environment, row by row of the table in docs/fleet.md.

Upstream is NovaSky-AI/SkyRL ``skyrl-train/integrations/fleet/env.py`` at
55a822642 (SkyRL's ``FleetTaskEnv``) over meta-pytorch/OpenEnv
``src/envs/fleet_env/`` at d23f08d7 (OpenEnv's ``FleetTaskEnv``,
``FleetMCPTools``, ``FleetMCPClient``). Every expected value below is what
that code showed for the same responses against the same MCP servers (the
bookings server and ``shapes_server.py``); each test drives agentkit's step
API with the scenario and asserts it, citing the upstream lines that decide
it. Where upstream crashes, or shows text that depends on its transport
library's version, the test asserts agentkit's documented behaviour instead.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from agentkit_fleet.episode import FleetToolCallEpisode
from agentkit_fleet.harness import FleetToolCallHarness
from agentkit_fleet.mcp_client import EMPTY_RESULT_TEXT
from agentkit_fleet.prompt import FORMAT_REMINDER, build_system_prompt, to_openai_tools
from agentkit_fleet.records import FleetRecord
from agentkit_fleet.taskset import fleet_taskset
from fleet_helpers import TASKS_JSON, HttpBookings, HttpShapes

from agentkit import Limits, RunContext, StepOutput

DATA = Path(__file__).with_name("data")
TASKS = fleet_taskset(str(TASKS_JSON))
needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")

DONE = "Task marked as complete."


def tc(name: Any, args: Any) -> str:
    return f"<tool_call>{json.dumps({'name': name, 'arguments': args})}</tool_call>"


CANCEL = tc("cancel_booking", {"booking_id": 3})
CANCELLED = 'Tool result:\n{\n  "id": 3,\n  "status": "cancelled"\n}'
ROOMS = [
    {"id": 1, "number": "101", "room_type": "single", "nightly_rate": 90, "status": "available"},
    {"id": 2, "number": "102", "room_type": "single", "nightly_rate": 90, "status": "available"},
    {"id": 3, "number": "201", "room_type": "double", "nightly_rate": 140, "status": "available"},
    {"id": 4, "number": "202", "room_type": "double", "nightly_rate": 140, "status": "maintenance"},
    {"id": 5, "number": "301", "room_type": "suite", "nightly_rate": 320, "status": "available"},
]


def play(
    harness: FleetToolCallHarness,
    task: Any,
    actions: list[Any],
    max_turns: int = 10,
    between: Any = None,
) -> tuple[FleetToolCallEpisode, list[StepOutput]]:
    """Init, then one step per action until done; ``between(i)`` runs before action i."""

    async def main() -> tuple[FleetToolCallEpisode, list[StepOutput]]:
        episode = harness.episode(task, RunContext(limits=Limits(max_turns=max_turns)))
        await episode.init()
        outputs: list[StepOutput] = []
        try:
            for i, action in enumerate(actions):
                if between is not None:
                    between(i)
                outputs.append(await episode.step(action))
                if outputs[-1].done:
                    break
        finally:
            await episode.close()
        return episode, outputs

    return asyncio.run(main())


def on_bookings(server: HttpBookings) -> FleetToolCallHarness:
    return FleetToolCallHarness(
        mcp_url=server.url, seed_db=str(server.seed), current_db=str(server.current)
    )


def cancel_task() -> Any:
    return TASKS.get_task("fleet:cancel-grace-march")


def obs(out: StepOutput) -> list[str]:
    return [o["content"] for o in out.observations]


def plain_metadata(out: StepOutput) -> dict[str, Any]:
    """The step metadata without the timings and agentkit's ``verifier`` addition."""
    skip = ("step_time", "mcp_time", "verifier")
    return {k: v for k, v in out.metadata.items() if k not in skip}


# -- the system prompt and the tools -------------------------------------------------


@needs_bwrap
def test_the_system_prompt_is_upstreams_text_for_the_same_tools(
    http_bookings: HttpBookings,
) -> None:
    # env.py:206-240: role, datetime.now() date, json.dumps(tools, indent=2), format,
    # error handling, response format; tools as OpenEnv models.py:32-83 converts them.
    # The file is upstream's system prompt for the bookings server on 2026-11-23.
    expected = (DATA / "upstream_system_prompt_bookings.txt").read_text()
    harness = on_bookings(http_bookings)
    episode = harness.episode(cancel_task())
    episode.now = dt.datetime(2026, 11, 23, 9, 30)

    async def main() -> tuple[list[dict[str, Any]], dict[str, Any]]:
        try:
            return await episode.init()
        finally:
            await episode.close()

    history, metadata = asyncio.run(main())
    assert history[0] == {"role": "system", "content": expected}
    assert history[1] == {"role": "user", "content": TASKS.records[0].prompt}
    # env.py:242-247
    assert set(metadata) == {"task_key", "env_key", "tools", "modality"}
    assert metadata["task_key"] == "cancel-grace-march" and metadata["modality"] == "tool_use"


def test_the_date_is_the_clock_not_task_data() -> None:
    # env.py:211-215: datetime.now(), whatever the task's env_variables say
    text = build_system_prompt([], now=dt.datetime(2027, 2, 3))
    assert "Today's date is 2027-02-03." in text and "current year (2027)" in text
    assert text.endswith(
        'NEVER respond with just a message. NEVER say "feel free to ask" or offer further help.\n'
        "If the task is complete, say <done>. Otherwise, make a tool call."
    )
    assert "Environment Context" not in text


def test_tool_schemas_are_simplified_as_openenv_does() -> None:
    # OpenEnv models.py:32-61 (normalize_schema) and 64-83 (convert_tool_format); the
    # expected JSON, key order included, is what convert_tool_format returned.
    schema = {
        "type": "object",
        "title": "Args",
        "additionalProperties": False,
        "properties": {
            "q": {"type": "string", "title": "Q", "default": "x", "description": "query"},
            "n": {
                "anyOf": [{"type": "null"}, {"type": "integer", "minimum": 1}],
                "default": None,
                "title": "N",
            },
            "only_null": {"anyOf": [{"type": "null"}], "title": "Only"},
            "pair": {
                "type": "array",
                "prefixItems": [{"type": "integer", "title": "A"}, {"type": "string"}],
                "title": "Pair",
            },
            "empty_tuple": {"type": "array", "prefixItems": []},
            "tags": {
                "type": "array",
                "items": {"anyOf": [{"type": "string", "title": "T"}, {"type": "null"}]},
            },
            "where": {
                "type": "object",
                "title": "Where",
                "properties": {"city": {"type": "string", "title": "City", "default": "Paris"}},
                "required": ["city"],
            },
            "ref": {"$ref": "#/$defs/Thing", "title": "Ref"},
        },
        "$defs": {"Thing": {"type": "object"}},
    }
    tools = to_openai_tools(
        [
            {"name": "search", "description": None, "inputSchema": schema},
            {"name": "bare", "description": "no schema", "inputSchema": {"type": "object"}},
        ]
    )
    assert json.dumps(tools) == (
        '[{"type": "function", "function": {"name": "search", "description": null, '
        '"parameters": {"type": "object", "properties": {"q": {"type": "string", '
        '"description": "query"}, "n": {"type": "integer", "minimum": 1}, "only_null": {}, '
        '"pair": {"type": "array", "items": {"type": "integer"}}, "empty_tuple": '
        '{"type": "array", "items": {"type": "string"}}, "tags": {"type": "array", '
        '"items": {"type": "string"}}, "where": {"type": "object", "properties": {"city": '
        '{"type": "string"}}, "required": ["city"]}, "ref": {"$ref": "#/$defs/Thing"}}, '
        '"required": []}}}, {"type": "function", "function": {"name": "bare", '
        '"description": "no schema", "parameters": {"type": "object", "properties": {}, '
        '"required": []}}}]'
    )


# -- parsing ----------------------------------------------------------------------------


@needs_bwrap
def test_a_solution_step_by_step(http_bookings: HttpBookings) -> None:
    # env.py:284-299 (call via OpenEnv), 330-332 (dict result re-dumped with indent=2),
    # 346-355 (metadata), 335-336 + OpenEnv task_env.py:280-284 (done: verifier reward)
    _, outs = play(on_bookings(http_bookings), cancel_task(), [CANCEL, "Done. <done>"])
    assert obs(outs[0]) == [CANCELLED] and (outs[0].reward, outs[0].done) == (0.0, False)
    assert plain_metadata(outs[0]) == {
        "task_key": "cancel-grace-march",
        "turn": 1,
        "tool_call": {"name": "cancel_booking", "arguments": {"booking_id": 3}},
        "tool_result": {"id": 3, "status": "cancelled"},
        "error": None,
        "done_reason": None,
    }
    for key in ("step_time", "mcp_time"):
        assert isinstance(outs[0].metadata[key], float) and outs[0].metadata[key] >= 0
    assert obs(outs[1]) == [DONE] and (outs[1].reward, outs[1].done) == (1.0, True)
    assert plain_metadata(outs[1]) == {
        "task_key": "cancel-grace-march",
        "turn": 2,
        "tool_call": None,
        "tool_result": None,
        "error": None,
        "done_reason": "agent_done",
    }


@needs_bwrap
@pytest.mark.parametrize(
    "action",
    [
        "I will think about it.",
        # env.py:85: lower-case tags only, closing tag required
        '<TOOL_CALL>{"name": "cancel_booking", "arguments": {"booking_id": 3}}</TOOL_CALL>',
        '<tool_call>{"name": "cancel_booking", "arguments": {"booking_id": 3}}',
        # env.py:88-95: JSON that does not parse (a code fence too) is no call
        '<tool_call>{"name": "cancel_booking", "arguments": {oops}}</tool_call>',
        '<tool_call>```json\n{"name": "cancel_booking", "arguments": {}}\n```</tool_call>',
        # env.py:85: only the first block of a tag is read
        "<tool_call>{bad}</tool_call> " + CANCEL,
        # env.py:90-93: no name, no call
        '<tool_call>{"arguments": {"booking_id": 3}}</tool_call>',
    ],
)
def test_responses_without_a_readable_call_get_the_reminder(
    http_bookings: HttpBookings, action: str
) -> None:
    # env.py:337-338
    episode, outs = play(on_bookings(http_bookings), cancel_task(), [action, "<done>"])
    assert obs(outs[0]) == [FORMAT_REMINDER]
    assert plain_metadata(outs[0])["tool_call"] is None
    assert episode.tool_calls == 0 and outs[-1].reward == 0.0  # nothing was cancelled


@needs_bwrap
def test_invalid_json_beside_done_ends_the_episode(http_bookings: HttpBookings) -> None:
    # env.py:273 + 304-313 + 335-336
    _, outs = play(
        on_bookings(http_bookings), cancel_task(), ['<tool_call>{"name" oops}</tool_call> <done>']
    )
    assert obs(outs[0]) == [DONE] and outs[0].done and outs[0].reward == 0.0


@needs_bwrap
@pytest.mark.parametrize(
    "action",
    [
        # env.py:90-91: "tool" and "params" stand for "name" and "arguments"
        '<tool_call>{"tool": "cancel_booking", "params": {"booking_id": 3}}</tool_call>',
        # env.py:91: empty "arguments" falls back to "params"
        '<tool_call>{"name": "cancel_booking", "arguments": {}, "params": {"booking_id": 3}}'
        "</tool_call>",
        # env.py:84: <function_call> when there is no <tool_call>
        '<function_call>{"name": "cancel_booking", "arguments": {"booking_id": 3}}</function_call>',
    ],
)
def test_call_spellings_upstream_accepts(http_bookings: HttpBookings, action: str) -> None:
    _, outs = play(on_bookings(http_bookings), cancel_task(), [action, "<done>"])
    assert obs(outs[0]) == [CANCELLED]
    assert plain_metadata(outs[0])["tool_call"] == {
        "name": "cancel_booking",
        "arguments": {"booking_id": 3},
    }
    assert outs[-1].reward == 1.0


@needs_bwrap
def test_a_list_result_is_shown_as_python_prints_it(http_bookings: HttpBookings) -> None:
    # fleet_mcp_client.py:76-81 (single text part parsed as JSON) + env.py:333-334
    _, outs = play(
        on_bookings(http_bookings),
        cancel_task(),
        ['<tool_call>{"tool": "list_rooms", "params": {"room_type": "suite"}}</tool_call>'],
        max_turns=3,
    )
    assert obs(outs[0]) == [f"Tool result:\n{[ROOMS[4]]}"]
    assert obs(outs[0])[0].startswith("Tool result:\n[{'id': 5, 'number': '301'")
    assert plain_metadata(outs[0])["tool_result"] == [ROOMS[4]]


@needs_bwrap
def test_done_signals_in_any_case(http_bookings: HttpBookings) -> None:
    # env.py:273
    _, outs = play(on_bookings(http_bookings), cancel_task(), ["finished [DONE]"])
    assert obs(outs[0]) == [DONE] and outs[0].done
    assert outs[0].metadata["done_reason"] == "agent_done"


@needs_bwrap
def test_a_call_and_done_in_one_response_is_one_observation(
    http_bookings: HttpBookings,
) -> None:
    # env.py:287-291 (done passed with the call), 328-336 (the result wins over
    # "Task marked as complete."), OpenEnv task_env.py:264-284 (call, then verifier)
    episode, outs = play(on_bookings(http_bookings), cancel_task(), [CANCEL + " All done. <done>"])
    assert obs(outs[0]) == [CANCELLED]
    assert (outs[0].reward, outs[0].done) == (1.0, True)
    assert plain_metadata(outs[0])["done_reason"] == "agent_done"
    assert episode.chat_history[-1] == {"role": "user", "content": CANCELLED}


# -- errors -----------------------------------------------------------------------------


@needs_bwrap
def test_an_unknown_tool_is_upstreams_message(http_bookings: HttpBookings) -> None:
    # OpenEnv mcp_tools.py:113-129 raises; task_env.py:268-270 + env.py:299-300, 328-329
    message = "Tool 'teleport' not found on any active MCP endpoint."
    episode, outs = play(
        on_bookings(http_bookings), cancel_task(), [tc("teleport", {"to": "mars"}), "<done>"]
    )
    assert obs(outs[0]) == [f"Error: {message}"]
    assert plain_metadata(outs[0]) == {
        "task_key": "cancel-grace-march",
        "turn": 1,
        "tool_call": {"name": "teleport", "arguments": {"to": "mars"}},
        "tool_result": {"error": message},
        "error": message,
        "done_reason": None,
    }
    assert episode.tool_calls == 1
    # a name that is not a string is looked up the same way (printed with str())
    _, outs = play(
        on_bookings(http_bookings), cancel_task(), ['<tool_call>{"name": 5}</tool_call>'], 2
    )
    assert obs(outs[0]) == ["Error: Tool '5' not found on any active MCP endpoint."]


@needs_bwrap
def test_a_tool_error_result_is_a_result(http_bookings: HttpBookings) -> None:
    # fleet_mcp_client.py:62-68: isError -> {"error": text}; env.py:330-332 shows it as a
    # tool result, and "error" stays None
    text = "Error executing tool cancel_booking: no booking with id 99"
    episode, outs = play(
        on_bookings(http_bookings), cancel_task(), [tc("cancel_booking", {"booking_id": 99})], 3
    )
    assert obs(outs[0]) == [f'Tool result:\n{{\n  "error": "{text}"\n}}']
    assert plain_metadata(outs[0])["tool_result"] == {"error": text}
    assert plain_metadata(outs[0])["error"] is None
    assert episode.tool_errors == 1


@needs_bwrap
@pytest.mark.parametrize("arguments", ['"{\\"booking_id\\": 3}"', "[3]"])
def test_arguments_that_are_not_an_object_are_an_error_observation(
    http_bookings: HttpBookings, arguments: str
) -> None:
    # env.py:91 passes them on as they are; the MCP client then fails (upstream shows
    # "Error: unhandled errors in a TaskGroup (1 sub-exception)"): agentkit words it
    action = f'<tool_call>{{"name": "cancel_booking", "arguments": {arguments}}}</tool_call>'
    episode, outs = play(on_bookings(http_bookings), cancel_task(), [action, "<done>"])
    (text,) = obs(outs[0])
    assert text.startswith("Error: the arguments of tool 'cancel_booking' must be a JSON object")
    meta = plain_metadata(outs[0])
    assert meta["tool_call"] == {"name": "cancel_booking", "arguments": json.loads(arguments)}
    assert meta["tool_result"] == {"error": text[len("Error: ") :]} and meta["error"]
    assert episode.tool_calls == 1 and outs[-1].reward == 0.0


@needs_bwrap
@pytest.mark.parametrize("body", ['["cancel_booking"]', '"cancel_booking"', "3", "null"])
def test_a_call_that_is_not_a_json_object_is_a_clear_error(
    http_bookings: HttpBookings, body: str
) -> None:
    # env.py:90 raises AttributeError on these (the rollout crashes); agentkit keeps a
    # clear error observation and the episode goes on
    episode, outs = play(
        on_bookings(http_bookings), cancel_task(), [f"<tool_call>{body}</tool_call>", "<done>"]
    )
    assert obs(outs[0])[0].startswith("Error: a tool call must be a JSON object with a name")
    assert not outs[0].done and episode.parse_errors == 1 and episode.tool_calls == 0


@needs_bwrap
def test_a_tool_server_that_dies_is_an_error_and_the_episode_goes_on(
    http_bookings: HttpBookings,
) -> None:
    # OpenEnv task_env.py:264-270 catches the failed call (tool_error), env.py:299-300
    # and 328-329 show "Error: ..."; the episode continues and the verifier runs at
    # done (task_env.py:280-284), against the state the server left
    def kill_before_second(i: int) -> None:
        if i == 1:
            http_bookings.stop()

    episode, outs = play(
        on_bookings(http_bookings),
        cancel_task(),
        [CANCEL, tc("list_rooms", {}), "<done>"],
        between=kill_before_second,
    )
    assert obs(outs[0]) == [CANCELLED]
    (text,) = obs(outs[1])
    assert text.startswith("Error: ") and http_bookings.url in text
    assert not outs[1].done and plain_metadata(outs[1])["tool_result"] == {"error": text[7:]}
    assert obs(outs[2]) == [DONE] and (outs[2].reward, outs[2].done) == (1.0, True)
    assert episode.tool_calls == 2 and episode.failure is None


# -- max_turns ----------------------------------------------------------------------


@needs_bwrap
def test_max_turns_with_a_call_every_turn_gives_the_verifiers_reward(
    http_bookings: HttpBookings,
) -> None:
    # env.py:270 + 319-325: no observation, metadata {done_reason, task_key}; OpenEnv
    # task_env.py:257 + 280-284 reached max_steps too and ran the verifier
    episode, outs = play(
        on_bookings(http_bookings), cancel_task(), [tc("list_rooms", {}), CANCEL], max_turns=2
    )
    assert obs(outs[0])[0] == f"Tool result:\n{ROOMS}"
    assert outs[1].observations == [] and (outs[1].reward, outs[1].done) == (1.0, True)
    assert plain_metadata(outs[1]) == {"done_reason": "max_turns", "task_key": "cancel-grace-march"}
    assert outs[1].metadata["verifier"]["success"] is True
    assert episode.chat_history[-1] == {"role": "assistant", "content": CANCEL}


@needs_bwrap
@pytest.mark.parametrize("actions", [["thinking", CANCEL], ["thinking"]])
def test_max_turns_after_a_turn_without_a_call_gives_0(
    http_bookings: HttpBookings, actions: list[str]
) -> None:
    # OpenEnv counts only the steps SkyRL hands it (env.py:284, 304): one turn without a
    # call and its max_steps is never reached, so no verifier runs and the reward is 0
    episode, outs = play(on_bookings(http_bookings), cancel_task(), actions, len(actions))
    assert outs[-1].observations == [] and (outs[-1].reward, outs[-1].done) == (0.0, True)
    assert plain_metadata(outs[-1]) == {
        "done_reason": "max_turns",
        "task_key": "cancel-grace-march",
    }
    assert outs[-1].metadata["verifier"] is None and episode.verifier is None


@needs_bwrap
def test_done_on_the_last_turn_is_max_turns(http_bookings: HttpBookings) -> None:
    # env.py:319 is checked before the done observation: done_reason max_turns, reward
    # from the verifier OpenEnv ran for the done
    _, outs = play(
        on_bookings(http_bookings),
        cancel_task(),
        [tc("list_rooms", {}), CANCEL + " <done>"],
        max_turns=2,
    )
    assert outs[1].observations == [] and (outs[1].reward, outs[1].done) == (1.0, True)
    assert outs[1].metadata["done_reason"] == "max_turns"


# -- result shapes -----------------------------------------------------------------------


def shapes_harness(server: HttpShapes) -> tuple[FleetToolCallHarness, Any]:
    record = FleetRecord.from_json(
        {"task_key": "shapes", "prompt": "Use the tools.", "env_key": "shapes"}
    )
    return FleetToolCallHarness(mcp_url=server.url), record.to_task("fleet")


@pytest.mark.parametrize(
    ("tool", "args", "text", "value"),
    [
        # fleet_mcp_client.py:76-81 + env.py:331-332: JSON object re-dumped, indent 2, ASCII
        (
            "lookup",
            {"query": "x"},
            'Tool result:\n{\n  "query": "x",\n  "limit": null,\n  "where": "caf\\u00e9"\n}',
            {"query": "x", "limit": None, "where": "café"},
        ),
        # env.py:333-334: anything else through str()
        (
            "rows",
            {},
            "Tool result:\n[{'id': 1, 'ok': True, 'note': None}, {'id': 2, 'ok': False}]",
            [{"id": 1, "ok": True, "note": None}, {"id": 2, "ok": False}],
        ),
        ("plain", {}, "Tool result:\njust text", "just text"),
        ("number", {}, "Tool result:\n42", 42),
        # fleet_mcp_client.py:82-84: several text parts, a list of texts
        ("parts", {}, "Tool result:\n['first', 'second']", ["first", "second"]),
        # fleet_mcp_client.py:63-67
        (
            "fails",
            {},
            'Tool result:\n{\n  "error": "boom: the room is locked"\n}',
            {"error": "boom: the room is locked"},
        ),
        # a text beginning with "Error:" is a result like any other
        ("error_text", {}, "Tool result:\nError: not allowed today", "Error: not allowed today"),
        # env.py:339-340 after task_env.py:289 turned the empty result into {}
        ("empty_object", {}, "Action executed.", {}),
        # fleet_mcp_client.py:73-75: non-text parts are skipped
        (
            "picture_and_text",
            {},
            'Tool result:\n{\n  "caption": "a pixel"\n}',
            {"caption": "a pixel"},
        ),
        # fleet_mcp_client.py:86-88
        ("structured", {}, 'Tool result:\n{\n  "rooms": 3\n}', {"rooms": 3}),
        # fleet_mcp_client.py:90-91: str() of mcp 1.x's result object
        ("nothing", {}, f"Tool result:\n{EMPTY_RESULT_TEXT}", EMPTY_RESULT_TEXT),
    ],
)
def test_tool_results_are_shown_as_upstream_shows_them(
    http_shapes: HttpShapes, tool: str, args: dict[str, Any], text: str, value: Any
) -> None:
    harness, task = shapes_harness(http_shapes)
    _, outs = play(harness, task, [tc(tool, args)], max_turns=3)
    assert obs(outs[0]) == [text]
    assert plain_metadata(outs[0])["tool_result"] == value


def test_an_empty_result_with_done_shows_the_done_text(http_shapes: HttpShapes) -> None:
    # env.py:330-336: the empty result is falsy, so the done text is shown
    harness, task = shapes_harness(http_shapes)
    _, outs = play(harness, task, [tc("empty_object", {}) + " <done>"])
    assert obs(outs[0]) == [DONE] and outs[0].done
    assert plain_metadata(outs[0])["tool_result"] == {}
    assert outs[0].reward == 0.0  # the task has no verifier: OpenEnv task_env.py:312-315


def test_a_server_dying_during_a_call_is_an_error_observation(http_shapes: HttpShapes) -> None:
    # the call fails (upstream waits for its client's read timeout, then shows the error);
    # the next call reconnects to nothing and fails again; the episode goes on to done
    harness, task = shapes_harness(http_shapes)
    episode, outs = play(harness, task, [tc("die", {}), tc("plain", {}), "<done>"])
    assert [o[0].startswith("Error: ") for o in map(obs, outs[:2])] == [True, True]
    assert obs(outs[2]) == [DONE] and outs[2].done and episode.tool_errors == 2
