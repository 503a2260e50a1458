"""A model server answering with the wrong shapes or far too much: each is a clear error or a
cut with a note, never a crash, a silent misreading or unbounded memory."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentkit import HarnessResult, RunContext, Task, ValidationError
from agentkit.harnesses import chat
from agentkit.harnesses.chat import MAX_REPLY_CHARS, ChatHarness
from agentkit.tasksets.jsonl import JsonlTaskset
from agentkit.testing.model_server import ScriptedModelServer

pytestmark = pytest.mark.anyio

TASK = Task(task_id="t:1", input="hi")


async def run_chat(server: ScriptedModelServer, *, stream: bool) -> HarnessResult:
    async with ChatHarness(stream=stream) as harness:
        return await harness.run(TASK, RunContext(model="m", base_url=server.base_url))


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
async def test_tool_calls_that_are_an_object_are_a_bad_response(
    model_server: ScriptedModelServer, stream: bool
) -> None:
    if stream:
        body = {"choices": [{"index": 0, "delta": {"tool_calls": {"name": "x"}}}]}
    else:
        body = {"choices": [{"message": {"role": "assistant", "tool_calls": {"name": "x"}}}]}
    model_server.set_script({"default": {"body": body}})
    result = await run_chat(model_server, stream=stream)
    assert result.status == "failed" and result.error_kind == "model_bad_response"
    assert "tool_calls is an object, not a list" in (result.error or "")


def test_tool_calls_that_are_an_object_in_a_task_file_are_a_problem(tmp_path: Path) -> None:
    path = tmp_path / "tasks.jsonl"
    messages = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "tool_calls": {"id": "1"}},
        {"role": "user", "content": "again"},
    ]
    path.write_text(json.dumps({"id": "a", "input": messages}) + "\n")
    taskset = JsonlTaskset(path)
    assert len(taskset) == 0
    assert [str(p) for p in taskset.problems] == [
        f"{path}:1: input[1].tool_calls: expected a list of tool calls, got dict"
    ]
    with pytest.raises(ValidationError, match=r"input\[0\]\.tool_calls"):
        Task(task_id="t:1", input=[{"role": "assistant", "tool_calls": "call"}])


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
async def test_a_reply_over_the_cap_is_cut_with_a_note(
    model_server: ScriptedModelServer, stream: bool
) -> None:
    too_long = MAX_REPLY_CHARS + 12_345
    model_server.set_script(
        {"default": {"content": "y" * too_long, "chunk_size": 1 << 16, "reasoning": "r"}}
    )
    result = await run_chat(model_server, stream=stream)
    assert result.status == "completed"
    assert result.output == "y" * MAX_REPLY_CHARS
    assert result.raw["replies_cut"] == [{"field": "content", "chars": too_long, "turn": 0}]
    notes = [e.data["message"] for e in result.events if e.type == "log"]
    assert notes == [
        f"the model's content had {too_long} characters; cut to {MAX_REPLY_CHARS} (MAX_REPLY_CHARS)"
    ]


async def test_a_reply_body_over_the_byte_cap_is_refused_unread(
    model_server: ScriptedModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(chat, "MAX_REPLY_BYTES", 10_000)
    model_server.set_script({"default": {"content": "z" * 20_000}})
    result = await run_chat(model_server, stream=False)
    assert result.status == "failed" and result.error_kind == "model_bad_response"
    assert "larger than 10000 bytes" in (result.error or "")
