"""The built-in chat harness against the scripted model server, over loopback."""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

import anyio
import pytest

from agentkit import (
    Event,
    HarnessError,
    Limits,
    ListTaskset,
    RunContext,
    Task,
    TaskReferenceError,
)
from agentkit._options import OptionSchema
from agentkit.harnesses.chat import ChatHarness
from agentkit.testing import tokens
from agentkit.testing.conformance import ConformanceError, check_harness, check_taskset
from agentkit.testing.model_server import ScriptedModelServer

pytestmark = pytest.mark.anyio

KEY = "sk-agentkit-test-SECRET-9f3a"
ECHO = {"default": {"content": "re: {{last_user}}"}}


def ctx(server: ScriptedModelServer, **kw: Any) -> RunContext:
    """A context with ``KEY`` (unless told otherwise), the one key ``server`` accepts."""
    kw.setdefault("api_key", KEY)
    server.set_api_key(kw["api_key"])
    return RunContext(model="scripted", base_url=server.base_url, rollout_id="r1", **kw)


def task(value: Any = "hello") -> Task:
    return Task(task_id="demo:one", input=value)


def assert_no_key(result: Any) -> None:
    assert KEY not in json.dumps(result.to_json())


@pytest.fixture(params=[False, True], ids=["plain", "stream"])
def stream(request: pytest.FixtureRequest) -> bool:
    return bool(request.param)


@pytest.mark.model_script(
    {
        "default": {
            "content": "answer to {{last_user}}",
            "usage": {
                "prompt_tokens": 20,
                "completion_tokens": 5,
                "cached_tokens": 8,
                "reasoning_tokens": 2,
            },
        }
    }
)
async def test_text_task_completes_with_usage_and_events(
    model_server: ScriptedModelServer, stream: bool
) -> None:
    seen: list[Event] = []
    result = await ChatHarness(stream=stream).run(task("2+2?"), ctx(model_server), seen.append)
    assert result.status == "completed" and result.error is None
    assert result.output == "answer to 2+2?"
    assert result.messages == [
        {"role": "user", "content": "2+2?"},
        {"role": "assistant", "content": "answer to 2+2?"},
    ]
    usage = result.usage
    assert (usage.input_tokens, usage.output_tokens) == (20, 5)
    assert (usage.cached_tokens, usage.reasoning_tokens, usage.requests) == (8, 2, 1)
    types = [e.type for e in result.events]
    assert types == ["harness.start", "model.request", "model.response", "harness.end"]
    assert seen == result.events
    response = result.events[2].data
    assert response["message"]["content"] == "answer to 2+2?"
    assert response["usage"]["cached_tokens"] == 8
    (request,) = model_server.chat_requests
    assert request.body["stream"] is stream if stream else "stream" not in request.body
    if stream:
        assert request.body["stream_options"] == {"include_usage": True}
    assert request.api_key_sent
    assert_no_key(result)


async def test_each_unanswered_user_message_gets_one_call(
    model_server: ScriptedModelServer, stream: bool
) -> None:
    model_server.set_script({"default": {"content": "reply {{turn}} to {{last_user}}"}})
    messages: list[dict[str, Any]] = [{"role": "system", "content": "be brief"}]
    for i in range(8):
        messages.append({"role": "user", "content": f"q{i}"})
    messages.insert(3, {"role": "assistant", "content": "given"})  # q1 is already answered
    result = await ChatHarness(stream=stream).run(task(messages), ctx(model_server))
    assert result.status == "completed"
    requests = model_server.chat_requests
    assert len(requests) == 7 and result.usage.requests == 7
    assert [r.body["messages"][-1]["content"] for r in requests] == [
        "q0",
        *[f"q{i}" for i in range(2, 8)],
    ]
    roles = [m["role"] for m in result.messages]
    assert roles[:5] == ["system", "user", "assistant", "user", "assistant"]
    assert roles.count("assistant") == 8
    assert result.output == "reply 7 to q7"
    # every call saw the replies before it
    assert requests[-1].body["messages"][-2] == {"role": "assistant", "content": "reply 6 to q6"}


async def test_eight_user_messages_make_eight_calls(model_server: ScriptedModelServer) -> None:
    model_server.set_script(ECHO)
    msgs = [{"role": "user", "content": f"m{i}"} for i in range(8)]
    result = await ChatHarness().run(task(msgs), ctx(model_server))
    assert len(model_server.chat_requests) == 8
    assert [m["content"] for m in result.messages if m["role"] == "assistant"] == [
        f"re: m{i}" for i in range(8)
    ]


async def test_dict_input_is_sent_as_json_and_system_prompt_prepended(
    model_server: ScriptedModelServer,
) -> None:
    model_server.set_script(ECHO)
    harness = ChatHarness(system_prompt="You are terse.", max_tokens=17)
    result = await harness.run(task({"question": "capital of France", "n": 1}), ctx(model_server))
    body = model_server.chat_requests[0].body
    assert body["messages"][0] == {"role": "system", "content": "You are terse."}
    assert json.loads(body["messages"][1]["content"]) == {"question": "capital of France", "n": 1}
    assert body["max_tokens"] == 17
    assert result.output.startswith("re: {")


async def test_sampling_args_limits_and_model_override(model_server: ScriptedModelServer) -> None:
    context = ctx(
        model_server,
        sampling_args={"temperature": 0.3, "top_k": 5, "model": "ignored"},
        limits=Limits(max_tokens=9),
    )
    await ChatHarness(model="override").run(task(), context)
    body = model_server.chat_requests[0].body
    assert body["model"] == "override"
    assert (body["temperature"], body["top_k"], body["max_tokens"]) == (0.3, 5, 9)


async def test_tool_call_replies_are_kept_in_the_transcript(
    model_server: ScriptedModelServer, stream: bool
) -> None:
    model_server.set_script(
        {
            "default": {
                "chunk_size": 2,
                "tool_calls": [
                    {"id": "call_1", "name": "search", "arguments": {"q": "agentkit"}},
                    {"name": "open", "arguments": {"url": "https://example.invalid"}},
                ],
            }
        }
    )
    result = await ChatHarness(stream=stream).run(task(), ctx(model_server))
    assert result.status == "completed"
    reply = result.messages[-1]
    assert reply["tool_calls"][0] == {
        "id": "call_1",
        "type": "function",
        "function": {"name": "search", "arguments": '{"q": "agentkit"}'},
    }
    assert reply["tool_calls"][1]["function"]["name"] == "open"
    assert result.raw["finish_reasons"] == ["tool_calls"]


@pytest.mark.parametrize(
    ("reply", "kind"),
    [
        ({"fail": "rate_limit"}, "model_rate_limit"),
        ({"fail": "server_error"}, "model_server_error"),
        ({"status": 502}, "model_server_error"),
        ({"status": 400}, "model_bad_request"),
        ({"status": 401}, "model_auth"),
        ({"fail": "invalid_json"}, "model_bad_response"),
        ({"fail": "broken_stream", "content": "y" * 100}, "model_connection"),
        ({"fail": "disconnect"}, "model_connection"),
    ],
)
async def test_failures_map_onto_error_kinds(
    model_server: ScriptedModelServer, stream: bool, reply: dict[str, Any], kind: str
) -> None:
    # the endpoint echoes the key in its error message: it must never reach the result
    reply = {**reply, "message": f"denied for key {KEY}"} if "status" in reply else reply
    model_server.set_script({"default": reply})
    seen: list[Event] = []
    result = await ChatHarness(stream=stream).run(task(), ctx(model_server), seen.append)
    assert result.status == "failed"
    assert result.error_kind == kind
    assert result.error
    assert result.retryable is (
        kind in {"model_rate_limit", "model_server_error", "model_connection"}
    )
    assert result.usage.requests == 0 and result.output is None
    assert [e.type for e in seen][-2:] == ["error", "harness.end"]
    assert seen == result.events
    assert_no_key(result)


async def test_request_timeout_and_connection_refused(model_server_factory: Any) -> None:
    server = model_server_factory({"default": {"fail": "hang"}})
    result = await ChatHarness(request_timeout=0.3).run(task(), ctx(server))
    assert (result.status, result.error_kind) == ("failed", "model_connection")
    assert "timed out" in (result.error or "")
    base_url = server.base_url
    server.stop()
    refused = await ChatHarness().run(task(), RunContext(model="m", base_url=base_url, api_key=KEY))
    assert (refused.status, refused.error_kind) == ("failed", "model_connection")
    assert_no_key(refused)


async def test_run_time_limit_gives_timeout(model_server: ScriptedModelServer) -> None:
    model_server.set_script({"default": {"fail": "hang"}})  # never answers
    result = await ChatHarness().run(task(), ctx(model_server, limits=Limits(timeout_sec=0.3)))
    assert result.status == "timeout"
    assert "0.3" in (result.error or "")
    assert result.events[-1].data == {"status": "timeout"}


async def test_max_turns_stops_with_a_truncated_transcript(
    model_server: ScriptedModelServer,
) -> None:
    msgs = [{"role": "user", "content": f"m{i}"} for i in range(4)]
    result = await ChatHarness().run(task(msgs), ctx(model_server, limits=Limits(max_turns=2)))
    assert (result.status, result.error_kind) == ("timeout", "max_turns")
    assert len(model_server.chat_requests) == 2


async def test_no_key_means_no_authorization_header(
    model_server: ScriptedModelServer, stream: bool
) -> None:
    context = RunContext(
        model="m", base_url=model_server.base_url, api_key_env="AGENTKIT_TEST_UNSET_KEY_VAR"
    )
    result = await ChatHarness(stream=stream).run(task(), context)
    assert result.ok
    [request] = model_server.chat_requests
    assert not {"authorization", "x-api-key", "api-key"} & set(request.headers)


async def test_key_from_environment(
    model_server: ScriptedModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENTKIT_TEST_KEY", KEY)
    model_server.set_api_key(KEY)
    context = RunContext(model="m", base_url=model_server.base_url, api_key_env="AGENTKIT_TEST_KEY")
    result = await ChatHarness().run(task(), context)
    assert result.ok and model_server.chat_requests[0].api_key_sent
    assert_no_key(result)


async def test_reference_task_and_missing_model_are_errors(
    model_server: ScriptedModelServer,
) -> None:
    with pytest.raises(TaskReferenceError, match="demo"):
        await ChatHarness().run(Task(task_id="demo:one"), ctx(model_server))
    with pytest.raises(HarnessError, match="needs a model"):
        await ChatHarness().run(task(), RunContext(base_url=model_server.base_url))
    assert model_server.requests == []


async def test_async_on_event_receives_events_while_running(
    model_server: ScriptedModelServer,
) -> None:
    model_server.set_script({"default": {"content": "x", "latency": 0.2}})
    received: list[tuple[str, int]] = []

    async def watcher(event: Event) -> None:
        # the request is already logged by the server only after model.request was delivered
        received.append((event.type, len(model_server.chat_requests)))

    result = await ChatHarness().run(task(), ctx(model_server), watcher)
    assert result.ok
    assert received[:2] == [("harness.start", 0), ("model.request", 0)]
    assert received[2] == ("model.response", 1)


async def test_a_failing_watcher_does_not_fail_the_run(model_server: ScriptedModelServer) -> None:
    def broken(event: Event) -> None:
        raise RuntimeError("watcher bug")

    result = await ChatHarness().run(task(), ctx(model_server), broken)
    assert result.ok
    assert any(e.type == "log" and "watcher bug" in e.data["message"] for e in result.events)


async def test_many_concurrent_rollouts_share_one_client(model_server: ScriptedModelServer) -> None:
    model_server.set_script({"default": {"content": "{{last_user}}"}})
    harness = ChatHarness()
    model_server.hold()  # no answer until all 48 calls are in flight at once
    runs = [
        asyncio.ensure_future(
            harness.run(Task(task_id=f"demo:{i}", input=f"n{i}"), ctx(model_server))
        )
        for i in range(48)
    ]
    with anyio.fail_after(60):  # a hang guard: calls that did not overlap never all arrive
        while len(model_server.chat_requests) < 48:
            await asyncio.sleep(0.01)
    model_server.release()
    results = await asyncio.gather(*runs)
    assert [r.output for r in results] == [f"n{i}" for i in range(48)]
    clients = [c for per_loop in harness._clients.values() for c in per_loop.values()]
    assert len(clients) == 1
    await harness.aclose()
    assert clients[0].closed
    again = await harness.run(task(), ctx(model_server))  # a new client after aclose()
    assert again.ok
    await harness.aclose()


async def test_conformance_of_the_chat_harness(model_server: ScriptedModelServer) -> None:
    result = await check_harness(
        ChatHarness(), task(), ctx(model_server), expect_status="completed"
    )
    assert result.output == "ok"
    model_server.set_script({"default": {"fail": "rate_limit"}})
    failed = await check_harness(ChatHarness(stream=True), task(), ctx(model_server))
    assert failed.error_kind == "model_rate_limit"


async def test_conformance_catches_a_broken_harness(model_server: ScriptedModelServer) -> None:
    from agentkit import HarnessResult

    class Sloppy:
        async def run(
            self, task: Task, context: RunContext | None = None, on_event: Any = None
        ) -> HarnessResult:
            # runs reference tasks, reports failures without a message, leaks the key
            return HarnessResult(status="failed", raw={"key": context.api_key if context else ""})

    with pytest.raises(ConformanceError) as info:
        await check_harness(Sloppy(), task(), ctx(model_server))
    message = str(info.value)
    assert "without an error message" in message
    assert "API key appears" in message
    assert "TaskReferenceError" in message


def test_conformance_of_a_list_taskset() -> None:
    tasks = [Task(task_id=f"arith:{i}", input=f"{i}+{i}?", target=str(2 * i)) for i in range(5)]
    checked = check_taskset(ListTaskset("arith", tasks))
    assert checked == tasks


def test_conformance_catches_a_broken_taskset() -> None:
    class Mixed(ListTaskset):
        def get_task(self, task_id: str) -> Task:
            return Task(task_id=task_id, input="something else")

    tasks = [Task(task_id="other:1", input="a"), Task(task_id="mixed:2", input="b")]
    with pytest.raises(ConformanceError) as info:
        check_taskset(Mixed("mixed", tasks))
    message = str(info.value)
    assert "'other:1': id does not start with the taskset id" in message
    assert "get_task returns a task different" in message
    assert "does not exist" in message


def test_options_are_typed_for_the_command_line() -> None:
    schema = OptionSchema.from_callable("harness 'chat'", ChatHarness)
    assert set(schema.options) >= {
        "model",
        "system_prompt",
        "max_tokens",
        "request_timeout",
        "stream",
    }
    parsed = schema.parse_cli(["max_tokens=64", "stream=true", "request_timeout=2.5"])
    assert parsed == {"max_tokens": 64, "stream": True, "request_timeout": 2.5}
    assert ChatHarness(**parsed).max_tokens == 64


@pytest.mark.parametrize("field", ["reasoning", "reasoning_content"])
async def test_reasoning_is_reported_in_events_and_usage(
    model_server: ScriptedModelServer, stream: bool, field: str
) -> None:
    """The model's thinking, under vLLM's name (``reasoning``) or the older one."""
    reply = {"reasoning": "think think think", "content": "42", "chunk_size": 5}
    model_server.set_script({"default": {**reply, "reasoning_field": field}})
    result = await ChatHarness(stream=stream).run(task(), ctx(model_server))
    assert result.output == "42"
    response = next(e for e in result.events if e.type == "model.response")
    assert response.data["reasoning"] == "think think think"
    assert result.usage.reasoning_tokens == 5  # estimated: 17 characters
    # every token sampled: the think markers around the reasoning, the text, the end of the turn
    markers = ("<think>", "</think>", tokens.END_OF_TURN)
    assert result.usage.output_tokens == 5 + 1 + sum(len(tokens.encode(m)) for m in markers)
    assert "reasoning_content" not in result.messages[-1] and "reasoning" not in result.messages[-1]


async def test_extra_body_headers_and_query_reach_the_endpoint(
    model_server: ScriptedModelServer, stream: bool
) -> None:
    context = ctx(
        model_server,
        sampling_args={
            "seed": 7,
            "min_p": 0.1,
            "extra_body": {"chat_template_kwargs": {"thinking": False}, "seed": 8},
            "extra_headers": {"X-Trace-Id": "abc"},
            "extra_query": {"api-version": "2024-10-21"},
        },
    )
    result = await ChatHarness(stream=stream).run(task(), context)
    assert result.ok
    (request,) = [r for r in model_server.requests if "/chat/completions" in r.path]
    # extra_body is merged last, over the known arguments, as the openai client does
    assert request.body["seed"] == 8 and request.body["min_p"] == 0.1
    assert request.body["chat_template_kwargs"] == {"thinking": False}
    assert "extra_body" not in request.body and "extra_headers" not in request.body
    assert request.headers["x-trace-id"] == "abc"
    assert request.path.endswith("/chat/completions?api-version=2024-10-21")
    assert request.api_key_sent


async def test_connection_pools_reuse_one_pool_sequentially_and_spread_concurrent_calls(
    model_server: ScriptedModelServer,
) -> None:
    from agentkit.chat._endpoint import EndpointError, ModelEndpoint

    model_server.set_script({"default": {"content": "ok"}})
    endpoint = ModelEndpoint(model_server.base_url, max_connections=16, pools=4)
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    for _ in range(3):  # one after the other: always the first pool
        assert (await endpoint.post_json("/chat/completions", body))["choices"]
    assert endpoint.served == [3, 0, 0, 0]
    model_server.hold()  # all 16 in flight at once before any answer
    posts = [
        asyncio.ensure_future(endpoint.post_json("/chat/completions", body)) for _ in range(16)
    ]
    with anyio.fail_after(60):  # a hang guard: calls that did not overlap never all arrive
        while len(model_server.chat_requests) < 3 + 16:
            await asyncio.sleep(0.01)
    model_server.release()
    answers = await asyncio.gather(*posts)
    assert all(a["choices"] for a in answers)
    assert endpoint.served[1:] == [4, 4, 4]  # the least busy pool first
    assert endpoint.in_flight == [0, 0, 0, 0]
    await endpoint.aclose()
    base_url = model_server.base_url
    model_server.stop()
    refused = ModelEndpoint(base_url, max_connections=4, pools=2)
    with pytest.raises(EndpointError) as info:
        await refused.post_json("/chat/completions", body)
    assert info.value.kind == "model_connection"
    assert refused.in_flight == [0, 0] and refused.served == [1, 0]
    await refused.aclose()


def test_pools_are_sized_from_the_run_concurrency() -> None:
    from agentkit.chat._endpoint import ModelEndpoint

    assert ModelEndpoint("http://127.0.0.1:1/v1", max_connections=8)._count == 1
    many = ModelEndpoint("http://127.0.0.1:1/v1", max_connections=200)
    assert (many._count, many._pool_size) == (7, 29)


async def test_a_chat_run_never_imports_openai(model_server: ScriptedModelServer) -> None:
    import subprocess
    import sys

    code = (
        "import anyio, sys\n"
        "from agentkit import RunContext, Task\n"
        "from agentkit.harnesses.chat import ChatHarness\n"
        f"ctx = RunContext(model='m', base_url={model_server.base_url!r})\n"
        "r = anyio.run(ChatHarness().run, Task(task_id='d:1', input='hi'), ctx)\n"
        "assert r.ok, r.error\n"
        "print('openai' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


async def _serve_event_stream(body: bytes) -> tuple[asyncio.AbstractServer, str]:
    """A bare HTTP server answering every request with ``body`` as an event stream."""

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        length = next(
            int(line.split(b":", 1)[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length:")
        )
        await reader.readexactly(length)
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
            b"connection: close\r\ncontent-length: %d\r\n\r\n" % len(body) + body
        )
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    return server, f"http://127.0.0.1:{port}/v1"


async def test_event_streams_with_comments_fields_and_crlf_are_read() -> None:
    chunk = '{"id":"c1","choices":[{"index":0,"delta":{"content":"Hel"}}]}'
    body = (
        ": keep-alive comment\r\n"
        "event: message\r\n"
        f"data: {chunk}\r\n\r\n"
        'data:{"id":"c1","choices":[{"index":0,"delta":{"content":"lo"},"finish_reason":"stop"}]}'
        "\n\n"
        'data: {"id":"c1","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2}}\n\n'
        "data: [DONE]\n\n"
    ).encode()
    server, url = await _serve_event_stream(body)
    async with server, ChatHarness(stream=True) as harness:
        result = await harness.run(task(), RunContext(model="m", base_url=url, api_key=KEY))
    assert result.status == "completed" and result.output == "Hello"
    assert (result.usage.input_tokens, result.usage.output_tokens) == (3, 2)
    assert result.raw["response_ids"] == ["c1"] and result.raw["finish_reasons"] == ["stop"]


async def test_an_error_event_in_a_stream_fails_the_run() -> None:
    body = b'data: {"error": {"message": "the model is overloaded", "type": "server"}}\n\n'
    server, url = await _serve_event_stream(body)
    async with server, ChatHarness(stream=True) as harness:
        result = await harness.run(task(), RunContext(model="m", base_url=url, api_key=KEY))
    assert (result.status, result.error_kind) == ("failed", "model_error")
    assert "the model is overloaded" in (result.error or "")


async def test_proxy_settings_from_the_environment_are_honoured(
    model_server: ScriptedModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    import socket

    with socket.socket() as sock:  # a port nobody listens on: the proxy is down
        sock.bind(("127.0.0.1", 0))
        dead = sock.getsockname()[1]
    for name in ("NO_PROXY", "no_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{dead}")
    async with ChatHarness() as harness:
        result = await harness.run(task(), ctx(model_server))
    assert (result.status, result.error_kind) == ("failed", "model_connection")
    assert model_server.requests == []  # it went to the proxy, not to the server


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        ({"max_tokens": 0}, "option 'max_tokens' for harness 'chat': expected >= 1, got 0"),
        ({"request_timeout": -1.0}, "option 'request_timeout' for harness 'chat': expected > 0"),
    ],
)
def test_out_of_range_options_are_refused(options: dict[str, Any], expected: str) -> None:
    from agentkit import OptionError

    with pytest.raises(OptionError, match=re.escape(expected)):
        ChatHarness(**options)
