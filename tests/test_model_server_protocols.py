"""The scripted model server in Anthropic Messages and OpenAI Responses wire protocols.

Driven over loopback by the official ``anthropic`` and ``openai`` clients
(and raw httpx where the bytes matter): one script, rendered in whichever
protocol the request used, with the same faults.
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import anthropic
import httpx
import openai
import pytest

from agentkit import ValidationError
from agentkit.testing.model_server import ScriptedModelServer

USER = [{"role": "user", "content": "hello"}]

TOOL_SCRIPT = {
    "rules": [
        {
            "match": {"after_tool": False, "has_tools": True},
            "reply": {
                "content": "Let me check.",
                "reasoning": "The user wants the weather.",
                "chunk_size": 3,
                "tool_calls": [
                    {"id": "call_a", "name": "get_weather", "arguments": {"city": "Paris"}},
                    {"name": "lookup", "arguments": {"q": "x", "n": [1, 2]}},
                ],
                "usage": {
                    "prompt_tokens": 100,
                    "completion_tokens": 30,
                    "cached_tokens": 60,
                    "cache_creation_tokens": 15,
                    "reasoning_tokens": 7,
                },
            },
        },
        {"match": {"after_tool": True}, "reply": {"content": "It is sunny in {{last_user}}."}},
    ],
    "default": {"content": "plain answer at turn {{turn}}"},
}

ANTHROPIC_TOOLS: list[Any] = [
    {"name": n, "description": "test tool", "input_schema": {"type": "object"}}
    for n in ("get_weather", "lookup")
]
RESPONSES_TOOLS: list[Any] = [
    {"type": "function", "name": n, "description": "test tool", "parameters": {"type": "object"}}
    for n in ("get_weather", "lookup")
]


def claude(server: ScriptedModelServer, **kw: Any) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=server.url, api_key="sk-ant-test", max_retries=0, **kw)


def oai(server: ScriptedModelServer, **kw: Any) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.base_url, api_key="sk-test", max_retries=0, **kw)


def sse(text: str) -> list[tuple[str | None, str]]:
    """(event name, data) of every server-sent event in ``text``."""
    out = []
    for block in text.split("\n\n"):
        if not block.strip():
            continue
        name = None
        data = ""
        for line in block.splitlines():
            if line.startswith("event: "):
                name = line[len("event: ") :]
            elif line.startswith("data: "):
                data = line[len("data: ") :]
        out.append((name, data))
    return out


# -- Anthropic Messages ---------------------------------------------------------------------


@pytest.mark.model_script(TOOL_SCRIPT)
def test_messages_tool_use_thinking_and_usage(model_server: ScriptedModelServer) -> None:
    model_server.set_api_key("sk-ant-test")
    message = claude(model_server).messages.create(
        model="claude-x", max_tokens=100, messages=USER, tools=ANTHROPIC_TOOLS
    )
    assert [b.type for b in message.content] == ["thinking", "text", "tool_use", "tool_use"]
    thinking, text, first, second = message.content
    assert thinking.type == "thinking" and thinking.thinking == "The user wants the weather."
    assert thinking.signature
    assert text.type == "text" and text.text == "Let me check."
    assert first.type == "tool_use" and second.type == "tool_use"
    assert (first.id, first.name, first.input) == ("call_a", "get_weather", {"city": "Paris"})
    assert second.id.startswith("toolu_") and second.input == {"q": "x", "n": [1, 2]}
    assert message.stop_reason == "tool_use"
    assert message.model == "claude-x" and message.role == "assistant"
    # Anthropic's input_tokens leaves out the tokens read from and written to the cache
    usage = message.usage
    assert (usage.input_tokens, usage.cache_read_input_tokens) == (25, 60)
    assert (usage.cache_creation_input_tokens, usage.output_tokens) == (15, 30)

    logged = model_server.requests[-1]
    assert (logged.api, logged.rule, logged.path) == ("messages", 0, "/v1/messages")
    # the key comes as x-api-key or as a bearer token, by the client's version
    key_header = logged.headers.get("x-api-key") or logged.headers.get("authorization")
    assert key_header == "[redacted]" and logged.api_key_sent
    assert logged.headers["anthropic-version"]
    assert "sk-ant-test" not in json.dumps(logged.headers)

    # the tool results come back in a user message: the after_tool rule answers
    follow = claude(model_server).messages.create(
        model="claude-x",
        max_tokens=100,
        system="be brief",
        tools=ANTHROPIC_TOOLS,
        messages=[
            {"role": "user", "content": "Paris"},
            {"role": "assistant", "content": message.content},  # type: ignore[typeddict-item]
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "call_a", "content": "sunny"},
                    {
                        "type": "tool_result",
                        "tool_use_id": second.id,
                        "content": [{"type": "text", "text": "found"}],
                    },
                ],
            },
        ],
    )
    assert [b.type for b in follow.content] == ["text"]
    assert follow.content[0].type == "text"
    assert follow.content[0].text == "It is sunny in Paris."
    assert follow.stop_reason == "end_turn"
    assert model_server.requests[-1].rule == 1


@pytest.mark.model_script(TOOL_SCRIPT)
def test_messages_stream_events_as_anthropic_documents_them(
    model_server: ScriptedModelServer,
) -> None:
    raw = httpx.post(
        f"{model_server.url}/v1/messages?beta=true",
        headers={"x-api-key": "k", "anthropic-version": "2023-06-01"},
        json={
            "model": "m",
            "max_tokens": 10,
            "messages": USER,
            "tools": ANTHROPIC_TOOLS,
            "stream": True,
        },
    )
    assert raw.headers["content-type"].startswith("text/event-stream")
    events = sse(raw.text)
    names = [name for name, _ in events]
    datas = [json.loads(data) for _, data in events]
    assert all(d["type"] == n for n, d in zip(names, datas, strict=True))
    assert names[:2] == ["message_start", "ping"]
    assert names[-2:] == ["message_delta", "message_stop"]
    start = datas[0]["message"]
    assert start["content"] == [] and start["stop_reason"] is None
    assert start["usage"]["input_tokens"] == 25
    # four blocks, each opened, filled and closed in order
    blocks: dict[int, list[dict[str, Any]]] = {}
    for data in datas[2:-2]:
        blocks.setdefault(data["index"], []).append(data)
    assert sorted(blocks) == [0, 1, 2, 3]
    for index, seq in blocks.items():
        assert seq[0]["type"] == "content_block_start" and seq[-1]["type"] == "content_block_stop"
        assert all(d["type"] == "content_block_delta" for d in seq[1:-1]), index
    kinds = [blocks[i][0]["content_block"]["type"] for i in range(4)]
    assert kinds == ["thinking", "text", "tool_use", "tool_use"]
    delta_kinds = {d["delta"]["type"] for i in range(4) for d in blocks[i][1:-1]}
    assert delta_kinds == {"thinking_delta", "signature_delta", "text_delta", "input_json_delta"}
    text = "".join(d["delta"]["text"] for d in blocks[1][1:-1])
    assert text == "Let me check."
    args = "".join(d["delta"]["partial_json"] for d in blocks[2][1:-1])
    assert json.loads(args) == {"city": "Paris"}
    assert blocks[2][0]["content_block"]["input"] == {}
    final = datas[-2]
    assert final["delta"] == {"stop_reason": "tool_use", "stop_sequence": None}
    assert final["usage"]["output_tokens"] == 30
    assert model_server.requests[-1].path == "/v1/messages?beta=true"


@pytest.mark.model_script(TOOL_SCRIPT)
def test_messages_stream_through_the_sdk_helper(model_server: ScriptedModelServer) -> None:
    with claude(model_server).messages.stream(
        model="m", max_tokens=10, messages=USER, tools=ANTHROPIC_TOOLS
    ) as stream:
        kinds = {event.type for event in stream}
        final = stream.get_final_message()
    assert {"message_start", "content_block_start", "text", "input_json", "message_stop"} <= kinds
    assert [b.type for b in final.content] == ["thinking", "text", "tool_use", "tool_use"]
    assert final.content[2].type == "tool_use"
    assert final.content[2].input == {"city": "Paris"}
    assert final.usage.cache_read_input_tokens == 60 and final.usage.output_tokens == 30


@pytest.mark.model_script(TOOL_SCRIPT)
def test_messages_count_tokens_and_plain_text(model_server: ScriptedModelServer) -> None:
    c = claude(model_server)
    counted = c.messages.count_tokens(model="m", messages=USER)
    longer = c.messages.count_tokens(model="m", messages=[{"role": "user", "content": "w " * 200}])
    assert 0 < counted.input_tokens < longer.input_tokens
    reply = c.messages.create(model="m", max_tokens=5, messages=USER)
    assert reply.content[0].type == "text"
    assert reply.content[0].text == "plain answer at turn 0"
    # estimated usage is the same estimate that count_tokens gives
    assert reply.usage.input_tokens == counted.input_tokens
    assert [r.api for r in model_server.requests] == [None, None, "messages"]
    assert model_server.model_requests == model_server.requests[-1:]
    assert model_server.chat_requests == []


# -- OpenAI Responses -----------------------------------------------------------------------


@pytest.mark.model_script(TOOL_SCRIPT)
def test_responses_function_calls_reasoning_and_usage(model_server: ScriptedModelServer) -> None:
    response = oai(model_server).responses.create(
        model="gpt-x", input="Paris", tools=RESPONSES_TOOLS, instructions="be brief"
    )
    assert response.status == "completed" and response.model == "gpt-x"
    assert [i.type for i in response.output] == [
        "reasoning",
        "message",
        "function_call",
        "function_call",
    ]
    reasoning, _, first, second = response.output
    assert reasoning.type == "reasoning"
    assert reasoning.summary[0].text == "The user wants the weather."
    assert response.output_text == "Let me check."
    assert first.type == "function_call" and second.type == "function_call"
    assert (first.call_id, first.name) == ("call_a", "get_weather")
    assert json.loads(first.arguments) == {"city": "Paris"}
    assert second.call_id and second.call_id != first.call_id
    usage = response.usage
    assert usage is not None
    assert (usage.input_tokens, usage.output_tokens, usage.total_tokens) == (100, 30, 130)
    assert usage.input_tokens_details.cached_tokens == 60
    assert usage.output_tokens_details.reasoning_tokens == 7
    logged = model_server.requests[-1]
    assert (logged.api, logged.rule, logged.path) == ("responses", 0, "/v1/responses")
    assert logged.headers["authorization"] == "[redacted]"

    follow = oai(model_server).responses.create(
        model="gpt-x",
        tools=RESPONSES_TOOLS,
        input=[
            {"role": "user", "content": [{"type": "input_text", "text": "Paris"}]},
            *[item.model_dump(exclude_none=True) for item in response.output],  # type: ignore[misc]
            {"type": "function_call_output", "call_id": "call_a", "output": "sunny"},
            {"type": "function_call_output", "call_id": second.call_id, "output": "found"},
        ],
    )
    assert follow.output_text == "It is sunny in Paris."
    assert model_server.requests[-1].rule == 1
    # one model reply in the history: turn 1
    plain = oai(model_server).responses.create(
        model="gpt-x",
        input=[
            {"role": "user", "content": "a"},
            {"role": "assistant", "content": "b"},
            {"role": "user", "content": "c"},
        ],
    )
    assert plain.output_text == "plain answer at turn 1"


@pytest.mark.model_script(TOOL_SCRIPT)
def test_responses_stream_events_as_openai_documents_them(
    model_server: ScriptedModelServer,
) -> None:
    raw = httpx.post(
        f"{model_server.base_url}/responses",
        json={"model": "m", "input": "hi", "tools": RESPONSES_TOOLS, "stream": True},
    )
    assert raw.headers["content-type"].startswith("text/event-stream")
    events = sse(raw.text)
    datas = [json.loads(data) for _, data in events]
    assert [name for name, _ in events] == [d["type"] for d in datas]
    assert [d["sequence_number"] for d in datas] == list(range(len(datas)))
    names = [d["type"] for d in datas]
    assert names[:2] == ["response.created", "response.in_progress"]
    assert names[-1] == "response.completed"
    assert datas[0]["response"]["status"] == "in_progress"
    assert datas[0]["response"]["output"] == []
    assert names.count("response.output_item.added") == 4
    assert names.count("response.output_item.done") == 4
    text = "".join(d["delta"] for d in datas if d["type"] == "response.output_text.delta")
    assert text == "Let me check."
    summary = "".join(
        d["delta"] for d in datas if d["type"] == "response.reasoning_summary_text.delta"
    )
    assert summary == "The user wants the weather."
    args = "".join(
        d["delta"]
        for d in datas
        if d["type"] == "response.function_call_arguments.delta" and d["output_index"] == 2
    )
    assert json.loads(args) == {"city": "Paris"}
    completed = datas[-1]["response"]
    assert completed["status"] == "completed"
    assert completed["usage"]["input_tokens_details"]["cached_tokens"] == 60
    assert [i["type"] for i in completed["output"]] == [
        "reasoning",
        "message",
        "function_call",
        "function_call",
    ]


@pytest.mark.model_script(TOOL_SCRIPT)
def test_responses_stream_through_the_sdk_helper(model_server: ScriptedModelServer) -> None:
    with oai(model_server).responses.stream(model="m", input="hi", tools=RESPONSES_TOOLS) as stream:
        kinds = {event.type for event in stream}
        final = stream.get_final_response()
    assert {"response.output_text.delta", "response.function_call_arguments.delta"} <= kinds
    assert final.output_text == "Let me check."
    calls = [i for i in final.output if i.type == "function_call"]
    assert [c.name for c in calls] == ["get_weather", "lookup"]
    assert final.usage is not None and final.usage.output_tokens == 30


def test_length_finish_maps_to_each_protocol(model_server: ScriptedModelServer) -> None:
    model_server.set_script({"default": {"content": "cut", "finish_reason": "length"}})
    message = claude(model_server).messages.create(model="m", max_tokens=1, messages=USER)
    assert message.stop_reason == "max_tokens"
    response = oai(model_server).responses.create(model="m", input="hi")
    assert response.status == "incomplete"
    assert response.incomplete_details is not None
    assert response.incomplete_details.reason == "max_output_tokens"


def test_rules_can_match_the_protocol(model_server: ScriptedModelServer) -> None:
    model_server.set_script(
        {
            "rules": [
                {"match": {"api": "messages"}, "reply": {"content": "anthropic"}},
                {"match": {"api": "responses"}, "reply": {"content": "responses"}},
                {"match": {"api": "chat"}, "reply": {"content": "chat"}},
            ]
        }
    )
    message = claude(model_server).messages.create(model="m", max_tokens=5, messages=USER)
    assert message.content[0].type == "text" and message.content[0].text == "anthropic"
    assert oai(model_server).responses.create(model="m", input="x").output_text == "responses"
    chat = oai(model_server).chat.completions.create(model="m", messages=USER)  # type: ignore[arg-type]
    assert chat.choices[0].message.content == "chat"
    with pytest.raises(ValidationError, match=r"rules\[0\]\.match\.api: expected 'chat'"):
        model_server.set_script({"rules": [{"match": {"api": "anthropic"}}]})


# -- faults, in every protocol --------------------------------------------------------------


def post(server: ScriptedModelServer, api: str, stream: bool, **kw: Any) -> httpx.Response:
    if api == "messages":
        url = f"{server.url}/v1/messages"
        body: dict[str, Any] = {"model": "m", "max_tokens": 5, "messages": USER}
    elif api == "responses":
        url = f"{server.base_url}/responses"
        body = {"model": "m", "input": "hi"}
    else:
        url = f"{server.base_url}/chat/completions"
        body = {"model": "m", "messages": USER}
    return httpx.post(url, json={**body, "stream": stream}, timeout=kw.get("timeout", 10))


def call_sdk(server: ScriptedModelServer, api: str, stream: bool, timeout: float = 10) -> Any:
    """One request through the official client; consumes a stream to its end."""
    if api == "messages":
        c = claude(server, timeout=timeout)
        if stream:
            with c.messages.stream(model="m", max_tokens=5, messages=USER) as s:  # type: ignore[arg-type]
                return s.get_final_message()
        return c.messages.create(model="m", max_tokens=5, messages=USER)  # type: ignore[arg-type]
    o = oai(server, timeout=timeout)
    if api == "responses":
        if stream:
            with o.responses.stream(model="m", input="hi") as s:
                return s.get_final_response()
        return o.responses.create(model="m", input="hi")
    if stream:
        return list(o.chat.completions.create(model="m", messages=USER, stream=True))  # type: ignore[arg-type]
    return o.chat.completions.create(model="m", messages=USER)  # type: ignore[arg-type]


APIS = ["messages", "responses", "chat"]
STATUS_ERRORS: dict[str, dict[int, type[Exception]]] = {
    "messages": {429: anthropic.RateLimitError, 500: anthropic.InternalServerError},
    "responses": {429: openai.RateLimitError, 500: openai.InternalServerError},
    "chat": {429: openai.RateLimitError, 500: openai.InternalServerError},
}


@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(("fail", "status"), [("rate_limit", 429), ("server_error", 500)])
def test_http_errors_in_every_protocol(
    model_server: ScriptedModelServer, api: str, stream: bool, fail: str, status: int
) -> None:
    model_server.set_script({"default": {"fail": fail, "retry_after": 2}})
    raw = post(model_server, api, stream)
    assert raw.status_code == status
    assert raw.headers["retry-after"] == "2"
    error = raw.json()
    if api == "messages":
        assert error["type"] == "error"
        expected = {429: "rate_limit_error", 500: "api_error"}[status]
        assert error["error"]["type"] == expected and error["error"]["message"]
    else:
        assert set(error["error"]) == {"message", "type", "param", "code"}
    with pytest.raises(STATUS_ERRORS[api][status]) as info:
        call_sdk(model_server, api, stream)
    assert getattr(info.value, "status_code", None) == status


def test_anthropic_overloaded_status(model_server: ScriptedModelServer) -> None:
    model_server.set_script({"default": {"status": 529, "message": "busy"}})
    with pytest.raises(anthropic.APIStatusError) as info:
        claude(model_server).messages.create(model="m", max_tokens=5, messages=USER)
    assert info.value.status_code == 529
    assert isinstance(info.value.body, dict)
    assert info.value.body["error"] == {"type": "overloaded_error", "message": "busy"}


@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize("stream", [False, True])
def test_invalid_json_in_every_protocol(
    model_server: ScriptedModelServer, api: str, stream: bool
) -> None:
    model_server.set_script({"default": {"fail": "invalid_json", "content": "some text here"}})
    raw = post(model_server, api, stream)
    assert raw.status_code == 200
    if stream:
        datas = [data for _, data in sse(raw.text) if data != "[DONE]"]
        broken = [d for d in datas if not _is_json(d)]
        assert len(broken) == 1 and len(datas) > 3
    else:
        assert not _is_json(raw.text)
    with pytest.raises(ValueError):
        call_sdk(model_server, api, stream)


def _is_connection_error(exc: BaseException) -> bool:
    """The clients' own connection errors, or their HTTP stack's (it varies by version)."""
    names = {cls.__name__ for cls in type(exc).__mro__}
    return bool(names & {"APIConnectionError", "HTTPError", "TransportError"})


def _is_json(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("fail", ["broken_stream", "disconnect"])
def test_broken_and_dropped_connections_in_every_protocol(
    model_server: ScriptedModelServer, api: str, stream: bool, fail: str
) -> None:
    model_server.set_script({"default": {"fail": fail, "content": "x" * 200}})
    with pytest.raises(httpx.HTTPError):
        post(model_server, api, stream).read()
    with pytest.raises(Exception) as info:
        call_sdk(model_server, api, stream)
    assert _is_connection_error(info.value), repr(info.value)
    model_server.set_script("fine")
    assert post(model_server, api, stream).status_code == 200


@pytest.mark.parametrize("api", ["messages", "responses"])
def test_hang_in_every_protocol(model_server_factory: Any, api: str) -> None:
    server = model_server_factory({"default": {"fail": "hang"}})
    with pytest.raises((anthropic.APITimeoutError, openai.APITimeoutError)):
        call_sdk(server, api, stream=True, timeout=0.3)
    # stop() releases a request still hanging
    outcome: list[BaseException] = []

    def hang() -> None:
        try:
            call_sdk(server, api, stream=False, timeout=60)
        except BaseException as exc:
            outcome.append(exc)

    thread = threading.Thread(target=hang)
    thread.start()
    while len(server.requests) < 2:
        time.sleep(0.01)
    server.stop()
    thread.join(30)
    assert not thread.is_alive()
    assert isinstance(outcome[0], (anthropic.APIConnectionError, openai.APIConnectionError))


@pytest.mark.parametrize("api", APIS)
def test_times_counts_requests_of_every_protocol(
    model_server: ScriptedModelServer, api: str
) -> None:
    model_server.set_script({"rules": [{"times": 2, "reply": {"fail": "rate_limit"}}]})
    statuses = [post(model_server, api, False).status_code for _ in range(3)]
    assert statuses == [429, 429, 200]


def test_bad_bodies_get_each_protocols_error(model_server: ScriptedModelServer) -> None:
    bad = httpx.post(f"{model_server.url}/v1/messages", content=b"not json")
    assert bad.status_code == 400
    assert bad.json()["error"]["type"] == "invalid_request_error"
    assert bad.json()["type"] == "error"
    bad = httpx.post(f"{model_server.base_url}/responses", content=b"[1]")
    assert bad.status_code == 400 and bad.json()["error"]["type"] == "invalid_request_error"
    assert httpx.get(f"{model_server.url}/v1/messages").status_code == 405
    assert httpx.get(f"{model_server.url}/v1/messages/count_tokens").status_code == 405
