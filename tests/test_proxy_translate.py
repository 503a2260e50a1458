"""The model proxy's translation mode: Anthropic Messages and the Responses API served from
a chat-only scripted server's chat completions, called with the real SDKs (anthropic,
openai), which parse every answer and event with their own types."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import anthropic
import anyio
import httpx
import openai
import pytest

from agentkit.proxy import ModelProxy, ProxyRoute, ProxySettings
from agentkit.testing.model_server import ScriptedModelServer

pytestmark = pytest.mark.anyio

REAL_KEY = "sk-proxy-translate-key-7a3c"

#: The model writes its tool call's arguments compactly, as no client re-serialises them.
SCRIPT = {
    "rules": [
        {
            "match": {"after_tool": False},
            "reply": {
                "reasoning": "list them",
                "content": "Listing.",
                "tool_calls": [{"name": "bash", "arguments": '{"cmd":"ls -la"}'}],
                # 30 completion tokens: as many as its token ids, as vLLM counts (the
                # reasoning 3, text 2 and arguments 4, the think markers 2 + 2, the tool
                # call's opening 11 and closing 4, the end of the turn 2)
                "usage": {"prompt_tokens": 40, "completion_tokens": 30, "cached_tokens": 8},
            },
        },
        {"match": {"after_tool": True}, "reply": {"content": "Two files."}},
    ]
}
ANTHROPIC_TOOLS: list[Any] = [
    {
        "name": "bash",
        "description": "Run a command.",
        "input_schema": {"type": "object", "properties": {"cmd": {"type": "string"}}},
        "cache_control": {"type": "ephemeral"},
    },
    {"type": "web_search_20250305", "name": "web_search"},  # a server tool: left out
]
OPENAI_TOOLS: list[Any] = [
    {
        "type": "function",
        "name": "bash",
        "description": "Run a command.",
        "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}},
    },
    {"type": "web_search"},  # built in: left out
]


@pytest.fixture
def route(proxy: ModelProxy, model_server: ScriptedModelServer) -> ProxyRoute:
    model_server.set_script(SCRIPT)
    model_server.set_apis({"chat"})
    model_server.set_api_key(REAL_KEY)
    return proxy.open_route(
        rollout_id="task-1-r0",
        upstream=model_server.base_url,
        api_key=REAL_KEY,
        settings=ProxySettings(token_ids=True, translate_to_chat=True),
    )


@pytest.fixture
async def claude(route: ProxyRoute) -> AsyncIterator[anthropic.AsyncAnthropic]:
    """Anthropic's client, as Claude Code is given the proxy (no ``/v1``)."""
    base_url = route.base_url.removesuffix("/v1")
    async with anthropic.AsyncAnthropic(base_url=base_url, api_key=route.key, max_retries=0) as c:
        yield c


@pytest.fixture
async def codex(route: ProxyRoute) -> AsyncIterator[openai.AsyncOpenAI]:
    async with openai.AsyncOpenAI(base_url=route.base_url, api_key=route.key, max_retries=0) as c:
        yield c


def assert_extends(first: Any, second: Any) -> None:
    """The second call's prompt ids start with the first call's prompt and completion."""
    seen = first.prompt_token_ids + first.completion_token_ids
    assert second.prompt_token_ids[: len(seen)] == seen


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
async def test_messages_from_chat_completions(
    route: ProxyRoute,
    model_server: ScriptedModelServer,
    claude: anthropic.AsyncAnthropic,
    stream: bool,
) -> None:
    """Two turns of a tool loop in Messages: each answer is a Message the SDK parses
    (thinking, text, tool_use; stop reason; usage); the server got chat completions; each
    call records the server's ids, and the second prompt extends the first turn's tokens
    (the tool call's arguments go back as the model wrote them)."""
    client = claude
    system: Any = [{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}]
    messages: list[Any] = [{"role": "user", "content": "What files are there?"}]

    async def ask() -> anthropic.types.Message:
        kwargs: dict[str, Any] = {"model": "m", "max_tokens": 200, "system": system,
            "messages": messages, "tools": ANTHROPIC_TOOLS}  # fmt: skip
        if not stream:
            return await client.messages.create(**kwargs)
        async with client.messages.stream(**kwargs) as events:
            kinds = [event.type async for event in events]
            assert kinds[:2] == ["message_start", "content_block_start"]
            assert kinds[-2:] == ["message_delta", "message_stop"]
            return await events.get_final_message()

    first = await ask()
    thinking, text, tool = first.content
    assert thinking.type == "thinking" and thinking.thinking == "list them"
    assert text.type == "text" and text.text == "Listing."
    assert tool.type == "tool_use" and tool.name == "bash" and tool.input == {"cmd": "ls -la"}
    assert first.stop_reason == "tool_use"
    assert (first.usage.input_tokens, first.usage.cache_read_input_tokens) == (32, 8)
    assert first.usage.output_tokens == 30
    messages += [
        {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": tool.id, "content": "a.txt b.txt"}]},
    ]  # fmt: skip
    second = await ask()
    assert [b.type for b in second.content] == ["text"] and second.stop_reason == "end_turn"
    assert second.content[0].text == "Two files."  # type: ignore[union-attr]

    sent = [r for r in model_server.model_requests]
    assert [(r.api, r.path) for r in sent] == [("chat", "/v1/chat/completions")] * 2
    up = sent[1].body
    assert up["messages"][0] == {"role": "system", "content": "Be brief."}
    assert up["messages"][2]["tool_calls"][0]["function"]["arguments"] == '{"cmd":"ls -la"}'
    assert up["messages"][3] == {"role": "tool", "tool_call_id": tool.id, "content": "a.txt b.txt"}
    assert [t["function"]["name"] for t in up["tools"]] == ["bash"]
    calls = route.close()
    assert [(c.protocol, c.upstream_protocol, c.stream) for c in calls] == [
        ("messages", "chat", stream)
    ] * 2
    for call, request in zip(calls, sent, strict=True):
        assert call.upstream_request == request.body
        assert call.prompt_token_ids == request.sent["prompt_token_ids"]
        assert call.completion_token_ids == request.sent["completion_token_ids"]
        assert call.completion_logprobs == request.sent["completion_logprobs"]
        assert call.token_source == "server" and call.token_note is None
        assert call.forwarded["return_token_ids"] is True
        assert call.response["type"] == "message"
        assert "prompt_token_ids" not in json.dumps(call.response)
    assert calls[0].finish_reason == "tool_use" and calls[1].finish_reason == "end_turn"
    assert_extends(*calls)


async def test_a_translated_stream_reaches_the_agent_event_by_event(
    route: ProxyRoute, model_server: ScriptedModelServer
) -> None:
    """The server holds its chat stream after 2 chunks: the agent already has the
    message's start and its first text, in Anthropic's events."""
    model_server.set_script({"default": {"content": "one two three four five six"}})
    model_server.hold(after_events=2)
    body = {"model": "m", "max_tokens": 50, "stream": True,
            "messages": [{"role": "user", "content": "count"}]}  # fmt: skip
    names: list[str] = []
    with anyio.fail_after(30):  # a hang guard: a buffering proxy never shows the first event
        async with (
            httpx.AsyncClient(timeout=30) as client,
            client.stream(
                "POST", route.base_url + "/messages", json=body, headers={"x-api-key": route.key}
            ) as response,
        ):
            lines = response.aiter_lines()
            async for line in lines:
                if line.startswith("event: "):
                    names.append(line[7:])
                if names[-1:] == ["content_block_delta"]:
                    break
            # what matters: the agent has these events while the server still holds its
            # third (events_sent counts a write after it is made, so it may still say 1)
            assert model_server.events_sent <= 2
            model_server.release()
            names += [line[7:] async for line in lines if line.startswith("event: ")]
    assert names[:3] == ["message_start", "ping", "content_block_start"]
    assert names[-3:] == ["content_block_stop", "message_delta", "message_stop"]


async def test_a_chat_error_reaches_the_agent_in_its_protocols_shape(
    route: ProxyRoute, model_server: ScriptedModelServer, claude: anthropic.AsyncAnthropic
) -> None:
    model_server.set_script({"default": {"status": 429, "message": "slow down"}})
    with pytest.raises(anthropic.RateLimitError) as caught:
        await claude.messages.create(
            model="m", max_tokens=10, messages=[{"role": "user", "content": "hi"}]
        )
    assert caught.value.body == {
        "type": "error",
        "error": {"type": "rate_limit_error", "message": "slow down"},
    }
    [call] = route.close()
    assert call.status == 429 and call.error == "HTTP 429: slow down"
    assert call.token_note == "the call failed (HTTP 429): no tokens"


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
async def test_responses_from_chat_completions(
    route: ProxyRoute, model_server: ScriptedModelServer, codex: openai.AsyncOpenAI, stream: bool
) -> None:
    """Two turns of a tool loop in the Responses API (the whole input each time, as
    codex sends it): each answer is a Response the SDK parses (reasoning, message,
    function_call; usage); the server got chat completions with the ids asked for; each
    call records them, and the second prompt extends the first turn's tokens."""
    client = codex
    items: list[Any] = [{"role": "developer", "content": "Be brief."},
                        {"role": "user", "content": "What files are there?"}]  # fmt: skip

    async def ask() -> openai.types.responses.Response:
        kwargs: dict[str, Any] = {"model": "m", "input": items, "tools": OPENAI_TOOLS,
            "instructions": "You are a shell agent.", "store": False}  # fmt: skip
        if not stream:
            return await client.responses.create(**kwargs)
        async with client.responses.stream(**kwargs) as events:
            kinds = [event.type async for event in events]
            assert kinds[:3] == ["response.created", "response.in_progress",
                                 "response.output_item.added"]  # fmt: skip
            assert kinds[-1] == "response.completed"
            return await events.get_final_response()

    first = await ask()
    reasoning, message, call = first.output
    assert reasoning.type == "reasoning" and reasoning.summary[0].text == "list them"
    assert message.type == "message" and first.output_text == "Listing."
    assert call.type == "function_call" and call.arguments == '{"cmd":"ls -la"}'
    assert first.status == "completed" and first.usage is not None
    assert (first.usage.input_tokens, first.usage.input_tokens_details.cached_tokens) == (40, 8)
    items += [
        *[item.model_dump(exclude_none=True) for item in first.output],
        {"type": "function_call_output", "call_id": call.call_id, "output": "a.txt b.txt"},
    ]
    second = await ask()
    assert second.output_text == "Two files."

    sent = model_server.model_requests
    assert [r.api for r in sent] == ["chat", "chat"]
    up = sent[1].body
    assert [m["role"] for m in up["messages"]] == ["system", "system", "user", "assistant", "tool"]
    assert up["messages"][3]["reasoning_content"] == "list them"
    assert [t["function"]["name"] for t in up["tools"]] == ["bash"]
    calls = route.close()
    assert [(c.protocol, c.upstream_protocol) for c in calls] == [("responses", "chat")] * 2
    for record, request in zip(calls, sent, strict=True):
        assert record.upstream_request == request.body
        assert record.prompt_token_ids == request.sent["prompt_token_ids"]
        assert record.completion_token_ids == request.sent["completion_token_ids"]
        assert record.completion_logprobs == request.sent["completion_logprobs"]
        assert record.token_source == "server" and record.finish_reason == "completed"
        assert record.response["object"] == "response"
    assert_extends(*calls)


async def test_previous_response_id_is_served_from_the_routes_memory(
    route: ProxyRoute, model_server: ScriptedModelServer, codex: openai.AsyncOpenAI
) -> None:
    """The server keeps no responses: a ``previous_response_id`` this rollout got goes on
    from the conversation the proxy kept; one it did not get is refused, and nothing
    reaches the server."""
    client = codex
    first = await client.responses.create(model="m", input="What files?", tools=OPENAI_TOOLS)
    call = first.output[-1]
    assert call.type == "function_call"
    output = {"type": "function_call_output", "call_id": call.call_id, "output": "a.txt"}
    second = await client.responses.create(
        model="m", input=[output], previous_response_id=first.id, tools=OPENAI_TOOLS
    )
    assert second.output_text == "Two files."
    assert [m["role"] for m in model_server.model_requests[1].body["messages"]] == [
        "user",
        "assistant",
        "tool",
    ]
    with pytest.raises(openai.BadRequestError, match="previous_response_id"):
        await client.responses.create(model="m", input="more", previous_response_id="resp_nope")
    assert len(model_server.model_requests) == 2
    calls = route.close()
    assert calls[2].status == 400 and calls[2].response["error"]["param"] == (
        "previous_response_id"
    )
    assert calls[2].upstream_request is None and "nothing was sent" in (calls[2].error or "")
    assert_extends(calls[0], calls[1])
