"""The public chat client (agentkit.chat) against the scripted model server, over loopback."""

from __future__ import annotations

import pickle
from typing import Any

import pytest

from agentkit import Limits, RunContext, Usage
from agentkit.chat import (
    ChatClient,
    ChatResponse,
    ConnectionCache,
    ModelCallError,
    TokenTrace,
)
from agentkit.secrets import registered_secrets
from agentkit.testing import tokens
from agentkit.testing.model_server import ScriptedModelServer

pytestmark = pytest.mark.anyio

KEY = "sk-agentkit-client-SECRET-51c7"
HELLO = [{"role": "user", "content": "hello"}]


@pytest.fixture(params=[False, True], ids=["plain", "stream"])
def stream(request: pytest.FixtureRequest) -> bool:
    return bool(request.param)


def client(server: ScriptedModelServer, **kw: Any) -> ChatClient:
    """A client with ``KEY`` (unless told otherwise), the one key ``server`` accepts."""
    kw.setdefault("api_key", KEY)
    server.set_api_key(kw["api_key"])
    return ChatClient(server.base_url, model="scripted", **kw)


@pytest.mark.parametrize("field", ["reasoning", "reasoning_content"])
async def test_the_thinking_is_read_under_either_name(
    model_server: ScriptedModelServer, stream: bool, field: str
) -> None:
    """vLLM sends a reasoning model's thinking as ``reasoning`` (``reasoning_content``
    before 2026, and other servers still): either is the response's ``reasoning``, and
    a streamed call's assembled body keeps the name the server used."""
    reply = {"content": "42", "reasoning": "six times seven", "chunk_size": 4}
    model_server.set_script({"default": {**reply, "reasoning_field": field}})
    async with client(model_server, stream=stream) as chat:
        response = await chat.complete(HELLO)
    assert response.reasoning == "six times seven" and response.text == "42"
    message = response.body["choices"][0]["message"]
    other = {"reasoning": "reasoning_content", "reasoning_content": "reasoning"}[field]
    assert message[field] == "six times seven" and other not in message
    assert response.message == {"role": "assistant", "content": "42"}


async def test_a_server_sending_both_names_gives_the_thinking_once(
    model_server: ScriptedModelServer, stream: bool
) -> None:
    """vLLM while it moved from one name to the other sent the same text under both."""
    both = {"reasoning": "hmm", "reasoning_content": "hmm"}
    if stream:  # one chunk: its delta carries the thinking under both names
        choice = {"index": 0, "delta": {**both, "content": "ok"}, "finish_reason": "stop"}
        body = {"id": "c1", "object": "chat.completion.chunk", "model": "m", "choices": [choice]}
    else:
        message = {"role": "assistant", "content": "ok", **both}
        choice = {"index": 0, "message": message, "finish_reason": "stop"}
        body = {"id": "c1", "object": "chat.completion", "model": "m", "choices": [choice]}
    model_server.set_script({"default": {"body": body}})
    async with client(model_server, stream=stream) as chat:
        response = await chat.complete(HELLO)
    assert response.reasoning == "hmm" and response.text == "ok"


@pytest.mark.model_script(
    {
        "default": {
            "content": "answer to {{last_user}}",
            "reasoning": "let me think",
            "usage": {
                "prompt_tokens": 20,
                "completion_tokens": 5,
                "cached_tokens": 8,
                "reasoning_tokens": 2,
            },
        }
    }
)
async def test_a_call_gives_the_message_usage_and_the_bodies(
    model_server: ScriptedModelServer, stream: bool
) -> None:
    async with client(model_server, stream=stream) as chat:
        response = await chat.complete(HELLO)
    assert isinstance(response, ChatResponse)
    assert response.message == {"role": "assistant", "content": "answer to hello"}
    assert response.text == "answer to hello" and response.tool_calls == []
    assert response.reasoning == "let me think"
    assert response.finish_reason == "stop" and response.id
    assert response.usage == Usage(
        input_tokens=20, output_tokens=5, cached_tokens=8, reasoning_tokens=2, requests=1
    )
    assert response.cuts == [] and response.stream is stream
    # the request as sent, and the body received (for a stream: assembled from its chunks)
    (request,) = model_server.chat_requests
    assert response.request == request.body
    assert request.body["messages"] == HELLO and request.body["model"] == "scripted"
    assert request.api_key_sent
    choice = response.body["choices"][0]
    assert choice["message"]["content"] == "answer to hello"
    assert choice["message"]["reasoning"] == "let me think"  # the name vLLM sends it by
    assert choice["finish_reason"] == "stop" and response.body["id"] == response.id
    assert response.body["usage"]["prompt_tokens"] == 20
    if stream:
        assert request.body["stream"] is True
        assert request.body["stream_options"] == {"include_usage": True}
    else:
        assert "stream" not in request.body
    # the first bytes of the answer came before its end, both after the call was sent
    assert response.ttft_s is not None and 0 < response.ttft_s <= response.duration_s
    assert response.started_at > 0


async def test_tool_calls_come_back_and_tools_are_sent(
    model_server: ScriptedModelServer, stream: bool
) -> None:
    model_server.set_script(
        {
            "default": {
                "chunk_size": 3,
                "tool_calls": [
                    {"id": "call_1", "name": "search", "arguments": {"q": "agentkit"}},
                    {"name": "open", "arguments": {"url": "https://example.invalid"}},
                ],
            }
        }
    )
    tools = [{"type": "function", "function": {"name": "search", "parameters": {}}}]
    async with client(model_server) as chat:
        response = await chat.complete(HELLO, tools=tools, stream=stream)
    assert response.finish_reason == "tool_calls"
    first, second = response.tool_calls
    assert first == {
        "id": "call_1",
        "type": "function",
        "function": {"name": "search", "arguments": '{"q": "agentkit"}'},
    }
    assert second["function"]["name"] == "open"
    assert response.message["tool_calls"] == response.tool_calls
    assert model_server.chat_requests[0].body["tools"] == tools


async def test_sampling_arguments_extra_body_headers_and_query(
    model_server: ScriptedModelServer, stream: bool
) -> None:
    sampling = {
        "temperature": 0.3,
        "max_tokens": 99,
        "min_p": 0.1,
        "model": "ignored",
        "timeout": 5,
        "extra_body": {"chat_template_kwargs": {"thinking": False}, "temperature": 0.5},
        "extra_headers": {"X-Trace-Id": "abc"},
        "extra_query": {"api-version": "2024-10-21"},
    }
    headers = {"X-Run": "r1"}
    async with client(
        model_server, sampling=sampling, max_tokens=7, headers=headers, stream=stream
    ) as chat:
        await chat.complete(HELLO)
    (request,) = model_server.chat_requests
    body = request.body
    assert body["model"] == "scripted" and body["max_tokens"] == 7
    # extra_body is merged over the known arguments, as the openai client does
    assert (body["temperature"], body["min_p"]) == (0.5, 0.1)
    assert body["chat_template_kwargs"] == {"thinking": False}
    assert not {"extra_body", "extra_headers", "extra_query", "timeout"} & set(body)
    assert request.headers["x-trace-id"] == "abc" and request.headers["x-run"] == "r1"
    assert request.path.endswith("/chat/completions?api-version=2024-10-21")


async def test_for_run_makes_the_client_the_run_context_describes(
    model_server: ScriptedModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``ChatClient.for_run``: the run's endpoint, model, key (from its variable),
    headers, sampling arguments and limit; the run's tools left out unless asked for;
    a ``max_tokens`` sampling argument wins over the run's limit, a harness's own
    ``max_tokens`` over both; a harness's ``model`` and ``base_url`` over the run's."""
    monkeypatch.setenv("AGENTKIT_TEST_FOR_RUN_KEY", KEY)
    model_server.set_api_key(KEY)
    tools = [{"type": "function", "function": {"name": "f", "parameters": {}}}]
    context = RunContext(
        model="scripted",
        base_url=model_server.base_url,
        api_key_env="AGENTKIT_TEST_FOR_RUN_KEY",
        headers={"X-Run": "r1"},
        sampling_args={"temperature": 0.3, "tools": tools},
        limits=Limits(max_tokens=9),
        max_connections=3,
    )
    async with ChatClient.for_run(context) as chat:
        await chat.complete(HELLO)
    async with ChatClient.for_run(
        context.evolve(sampling_args={"max_tokens": 5, "tools": tools})
    ) as chat:
        await chat.complete(HELLO)
    async with ChatClient.for_run(
        # nothing listens on port 1: the harness's base URL is the one used
        context.evolve(
            base_url="http://127.0.0.1:1/v1", sampling_args={"max_tokens": 5, "tools": tools}
        ),
        model="other",
        base_url=model_server.base_url,
        max_tokens=7,
        tools=True,
    ) as chat:
        await chat.complete(HELLO)
    limit, sampled, own = model_server.chat_requests
    assert all(r.api_key_sent and r.headers["x-run"] == "r1" for r in (limit, sampled, own))
    assert (limit.body["model"], limit.body["temperature"], limit.body["max_tokens"]) == (
        "scripted",
        0.3,
        9,
    )
    assert "tools" not in limit.body and "tools" not in sampled.body
    assert sampled.body["max_tokens"] == 5
    assert (own.body["model"], own.body["max_tokens"], own.body["tools"]) == ("other", 7, tools)


async def test_token_ids_and_logprobs_when_asked(
    model_server: ScriptedModelServer, stream: bool
) -> None:
    model_server.set_script({"default": {"content": "four", "chunk_size": 2}})
    trace = TokenTrace()
    async with client(model_server, token_ids=True, stream=stream) as chat:
        response = await chat.complete([{"role": "user", "content": "2+2?"}])
    body = model_server.chat_requests[0].body
    assert body["return_token_ids"] is True and body["logprobs"] is True
    assert response.prompt_token_ids is not None
    assert tokens.decode(response.prompt_token_ids) == "<|user|>2+2?\n<|assistant|>"
    # the answer's text, then the end-of-turn token its turn ended with (as vLLM's ids)
    assert response.token_ids == tokens.encode("four") + tokens.encode(tokens.END_OF_TURN)
    assert response.logprobs is not None and len(response.logprobs) == len(response.token_ids)
    assert all(lp < 0 for lp in response.logprobs)
    trace.add(response.prompt_token_ids, response.token_ids, response.logprobs)
    raw = trace.to_raw()
    assert raw["completion_token_ids"] == response.token_ids
    assert raw["completion_mask"] == [1] * len(response.token_ids)
    # not asked, and the server returns nothing: no token fields
    async with client(model_server, stream=stream) as chat:
        plain = await chat.complete(HELLO)
    assert "return_token_ids" not in model_server.chat_requests[-1].body
    assert (plain.prompt_token_ids, plain.token_ids, plain.logprobs) == (None, None, None)


@pytest.mark.parametrize(
    ("reply", "kind", "status"),
    [
        ({"fail": "rate_limit", "retry_after": 3}, "model_rate_limit", 429),
        ({"status": 503}, "model_server_error", 503),
        ({"status": 401}, "model_auth", 401),
        ({"status": 400}, "model_bad_request", 400),
        ({"fail": "invalid_json"}, "model_bad_response", None),
        ({"fail": "disconnect"}, "model_connection", None),
        ({"raw_body": "not json"}, "model_bad_response", None),
    ],
)
async def test_failures_are_model_call_errors_without_the_key(
    model_server: ScriptedModelServer,
    stream: bool,
    reply: dict[str, Any],
    kind: str,
    status: int | None,
) -> None:
    # the endpoint echoes the key in its error message: it never reaches ours
    if status is not None:
        reply = {**reply, "message": f"denied for key {KEY}"}
    model_server.set_script({"default": reply})
    async with client(model_server, stream=stream) as chat:
        with pytest.raises(ModelCallError) as failed:
            await chat.complete(HELLO)
    error = failed.value
    assert error.kind == kind and error.status == status, str(error)
    assert KEY not in str(error)
    if status is not None:
        assert "denied for key ***" in str(error)
    assert error.retry_after == (3.0 if kind == "model_rate_limit" else None)


async def test_a_shape_error_names_the_field(
    model_server: ScriptedModelServer, stream: bool
) -> None:
    if stream:
        body = {"choices": [{"index": 0, "delta": {"tool_calls": {"name": "x"}}}]}
    else:
        body = {"choices": [{"message": {"role": "assistant", "tool_calls": {"name": "x"}}}]}
    model_server.set_script({"default": {"body": body}})
    async with client(model_server, stream=stream) as chat:
        with pytest.raises(ModelCallError, match="tool_calls is an object, not a list") as info:
            await chat.complete(HELLO)
    assert info.value.kind == "model_bad_response"
    wrong = {"choices": [{"message": {"role": "assistant", "content": "x"}}], "usage": []}
    model_server.set_script({"default": {"body": wrong}})
    async with client(model_server) as chat:
        with pytest.raises(ModelCallError, match="usage: expected an object or null"):
            await chat.complete(HELLO)


async def test_request_timeout_bounds_the_whole_call(
    model_server_factory: Any, stream: bool
) -> None:
    server = model_server_factory({"default": {"fail": "hang"}})
    async with ChatClient(server.base_url, model="m", request_timeout=0.3) as chat:
        with pytest.raises(ModelCallError) as info:
            await chat.complete(HELLO, stream=stream)
    assert info.value.kind == "model_connection"
    assert "request_timeout=0.3s" in str(info.value)


def test_a_base_url_that_is_not_http_is_refused_at_once() -> None:
    with pytest.raises(ModelCallError) as info:
        ChatClient("ftp://example.invalid/v1", model="m")
    assert info.value.kind == "model_bad_request"
    with pytest.raises(ValueError, match="request_timeout"):
        ChatClient("http://127.0.0.1:1/v1", model="m", request_timeout=0)


async def test_replies_over_the_cap_are_cut_and_reported(
    model_server: ScriptedModelServer, stream: bool
) -> None:
    model_server.set_script({"default": {"content": "y" * 120, "chunk_size": 50}})
    async with client(model_server, max_reply_chars=100, stream=stream) as chat:
        response = await chat.complete(HELLO)
        assert response.text == "y" * 100
        assert response.cuts == [{"field": "content", "chars": 120}]
    async with client(model_server, max_reply_chars=None, stream=stream) as chat:
        whole = await chat.complete(HELLO)
    assert whole.text == "y" * 120 and whole.cuts == []
    model_server.set_script({"default": {"content": "z" * 20_000}})
    async with client(model_server, max_reply_bytes=10_000) as chat:
        with pytest.raises(ModelCallError, match="larger than 10000 bytes"):
            await chat.complete(HELLO)


async def test_clients_on_one_cache_share_its_pool(model_server: ScriptedModelServer) -> None:
    cache = ConnectionCache()
    first = client(model_server, connections=cache)
    second = client(model_server, connections=cache, sampling={"seed": 1})
    other_key = client(model_server, connections=cache, api_key="sk-another-key-0000")
    other_headers = client(model_server, connections=cache, headers={"X-Run": "a"})
    await first.complete(HELLO)
    # the key goes with each request: the pool the first client opened does not lend
    # its key to a client with another one, which the server refuses
    with pytest.raises(ModelCallError) as refused:
        await other_key.complete(HELLO)
    assert refused.value.status == 401
    assert [r.api_key_sent for r in model_server.requests] == [True, False]
    model_server.set_api_key(None)  # both keys answered
    await second.complete(HELLO)
    await other_key.complete(HELLO)
    await other_headers.complete(HELLO)
    (pools,) = cache.values()
    assert len(pools) == 2  # one per endpoint and headers; the key goes with each request
    shared = pools[(model_server.base_url, ())]
    assert sum(shared.served) == 4
    await first.aclose()  # a client on a cache leaves the pools to the cache's owner
    assert not shared.closed
    assert len(pickle.loads(pickle.dumps(cache))) == 0  # pickled empty, for Ray workers
    await cache.aclose()
    assert shared.closed and len(cache) == 0


def test_the_key_and_secret_headers_are_registered_with_the_redactor() -> None:
    ChatClient(
        "http://127.0.0.1:1/v1",
        model="m",
        api_key=KEY,
        headers={"X-Api-Token": "tok-0123456789", "X-Run": "visible-value"},
    )
    secrets = registered_secrets()
    assert KEY in secrets and "tok-0123456789" in secrets
    assert "visible-value" not in secrets
