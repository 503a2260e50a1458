"""The model proxy on its own: real clients call it on loopback, it forwards to the scripted
model server, and each call is recorded (agentkit.proxy)."""

from __future__ import annotations

import json
import socket
from typing import Any

import anyio
import httpx
import openai
import pytest

from agentkit.proxy import ModelProxy, ProxyRoute, ProxySettings
from agentkit.testing.model_server import ScriptedModelServer

pytestmark = pytest.mark.anyio

REAL_KEY = "sk-proxy-real-key-5e1d9c"
TOKENS = ProxySettings(token_ids=True)

TOOLS = {
    "default": {
        "reasoning": "think first",
        "content": "here you go",
        "tool_calls": [{"name": "bash", "arguments": {"cmd": "ls -la"}}],
    }
}


def open_route(proxy: ModelProxy, server: ScriptedModelServer, **settings: Any) -> ProxyRoute:
    server.set_api_key(REAL_KEY)
    return proxy.open_route(
        rollout_id="task-1-r0",
        upstream=server.base_url,
        api_key=REAL_KEY,
        settings=ProxySettings(**settings),
    )


async def post(route: ProxyRoute, path: str, body: dict[str, Any]) -> httpx.Response:
    async with httpx.AsyncClient(timeout=30) as client:
        return await client.post(
            route.base_url + path, json=body, headers={"Authorization": f"Bearer {route.key}"}
        )


async def stream_chunks(route: ProxyRoute, body: dict[str, Any]) -> list[Any]:
    """The JSON of every ``data:`` event of a streamed call, as the agent got it."""
    async with (
        httpx.AsyncClient(timeout=30) as client,
        client.stream(
            "POST",
            route.base_url + "/chat/completions",
            json=body,
            headers={"Authorization": f"Bearer {route.key}"},
        ) as response,
    ):
        lines = [line async for line in response.aiter_lines()]
    return [
        json.loads(line[5:]) for line in lines if line.startswith("data:") and "[DONE]" not in line
    ]


@pytest.mark.parametrize("token_ids", [False, True], ids=["as-is", "rewritten"])
async def test_a_stream_reaches_the_agent_chunk_by_chunk(
    model_server: ScriptedModelServer, proxy: ModelProxy, token_ids: bool
) -> None:
    """The server holds its stream after the first event: the agent already has it.

    Both ways through the proxy: chunks passed on as they are (the proxy adds nothing to
    a request that asks for its usage itself), and events rewritten (the token fields
    the agent did not ask for taken out)."""
    model_server.set_script({"default": {"content": "one two three four five six"}})
    route = open_route(proxy, model_server, token_ids=token_ids)
    model_server.hold(after_events=1)
    body = {
        "model": "m",
        "stream": True,
        "stream_options": {"include_usage": True},
        "messages": [{"role": "user", "content": "count"}],
    }
    lines: list[str] = []
    with anyio.fail_after(30):  # a hang guard: a buffering proxy never shows the first event
        async with (
            httpx.AsyncClient(timeout=30) as client,
            client.stream(
                "POST",
                route.base_url + "/chat/completions",
                json=body,
                headers={"Authorization": f"Bearer {route.key}"},
            ) as response,
        ):
            stream = response.aiter_lines()
            async for line in stream:
                if line.startswith("data:"):
                    lines.append(line)
                    break
            # what matters: the first event is here while the server still holds the
            # second (events_sent counts a write after it is made, so it may still say 0)
            assert model_server.events_sent <= 1
            assert json.loads(lines[0][5:])["choices"][0]["delta"]["role"] == "assistant"
            model_server.release()
            lines += [line async for line in stream if line.startswith("data:")]
    assert lines[-1] == "data: [DONE]"
    chunks = [json.loads(line[5:]) for line in lines[:-1]]
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert text == "one two three four five six"
    [call] = route.close()
    assert bool(call.forwarded) is token_ids  # rewritten only when the proxy asked for more
    assert call.stream and call.status == 200 and call.ttft_s is not None
    assert call.response["choices"][0]["message"]["content"] == text


async def test_the_agent_gets_only_what_it_asked_and_the_record_has_the_ids(
    model_server: ScriptedModelServer, proxy: ModelProxy
) -> None:
    """With token ids asked on the agent's behalf, the answers (whole and streamed) carry
    none of vLLM's token fields, logprobs or the usage chunk the agent did not ask for;
    the records hold exactly the ids and logprobs the server sent."""
    model_server.set_script(TOOLS)
    route = open_route(proxy, model_server, token_ids=True)
    messages = [{"role": "user", "content": "list the files"}]
    whole = await post(route, "/chat/completions", {"model": "m", "messages": messages})
    data = whole.json()
    assert "prompt_token_ids" not in data
    [choice] = data["choices"]
    assert "token_ids" not in choice and choice["logprobs"] is None
    assert choice["message"]["tool_calls"][0]["function"]["arguments"] == '{"cmd": "ls -la"}'
    async with openai.AsyncOpenAI(base_url=route.base_url, api_key=route.key) as client:
        chunks = [
            c.model_dump()
            async for c in await client.chat.completions.create(
                model="m",
                messages=messages,
                stream=True,  # type: ignore[arg-type]
            )
        ]
    assert all("prompt_token_ids" not in c and c["choices"] for c in chunks)  # no usage chunk
    assert all(c["usage"] is None for c in chunks)
    # every chunk as it came on the wire: no choice carries token ids or logprobs
    raw = await stream_chunks(route, {"model": "m", "messages": messages, "stream": True})
    sent = model_server.model_requests[-1].sent
    assert sent["completion_token_ids"] and sent["completion_logprobs"]  # the server sent them
    assert raw and all("prompt_token_ids" not in c and "usage" not in c for c in raw)
    for chunk in raw:
        for choice in chunk["choices"]:
            assert "token_ids" not in choice and choice.get("logprobs") is None
    calls = route.close()[:2]
    assert [c.stream for c in calls] == [False, True]
    sent = [r.sent for r in model_server.model_requests][:2]
    for call, tokens in zip(calls, sent, strict=True):
        assert call.forwarded["return_token_ids"] is True and call.forwarded["logprobs"] is True
        assert "return_token_ids" not in call.request
        assert call.prompt_token_ids == tokens["prompt_token_ids"]
        assert call.completion_token_ids == tokens["completion_token_ids"]
        assert call.completion_logprobs == tokens["completion_logprobs"]
        assert call.token_source == "server" and call.token_note is None
        assert call.usage is not None and call.usage.output_tokens > 0
    assert calls[1].forwarded["stream_options"] == {"include_usage": True}
    # the streamed record is the completion assembled from the chunks
    message = calls[1].response["choices"][0]["message"]
    assert message["reasoning_content"] == "think first"
    assert message["tool_calls"][0]["function"] == {
        "name": "bash",
        "arguments": '{"cmd": "ls -la"}',
    }
    assert calls[1].finish_reason == "tool_calls"


async def test_an_agent_that_asks_for_token_ids_gets_them(
    model_server: ScriptedModelServer, proxy: ModelProxy
) -> None:
    """What the agent asked for itself is passed on, and recorded, as the server sent it."""
    route = open_route(proxy, model_server)  # the run does not ask
    body = {
        "model": "m",
        "messages": [{"role": "user", "content": "hi"}],
        "return_token_ids": True,
        "logprobs": True,
    }
    data = (await post(route, "/chat/completions", body)).json()
    [call] = route.close()
    assert data["prompt_token_ids"] == call.prompt_token_ids
    assert data["choices"][0]["token_ids"] == call.completion_token_ids
    assert call.forwarded == {} and call.completion_logprobs is not None


async def test_responses_record_vllms_raw_token_messages(
    model_server: ScriptedModelServer, proxy: ModelProxy
) -> None:
    """The Responses API: enable_response_messages asked for and taken out of the answer
    (whole, and the stream's response.completed); the ids recorded, without logprobs."""
    model_server.set_script(TOOLS)
    route = open_route(proxy, model_server, token_ids=True)
    whole = await post(route, "/responses", {"model": "m", "input": "list the files"})
    assert "input_messages" not in whole.json() and "output_messages" not in whole.json()
    async with openai.AsyncOpenAI(base_url=route.base_url, api_key=route.key) as client:
        stream = await client.responses.create(model="m", input="list the files", stream=True)
        events = [e.model_dump() async for e in stream]
    completed = [e for e in events if e["type"] == "response.completed"]
    assert completed and "input_messages" not in completed[0]["response"]
    calls = route.close()
    for call, request in zip(calls, model_server.model_requests, strict=True):
        assert call.protocol == "responses"
        assert call.forwarded == {"enable_response_messages": True}
        assert call.prompt_token_ids == request.sent["prompt_token_ids"]
        assert call.completion_token_ids == request.sent["completion_token_ids"]
        assert call.completion_logprobs is None and "output text" in (call.token_note or "")
        assert call.finish_reason == "completed"
        assert "output_messages" not in call.response
    assert calls[1].stream and calls[1].response["output"][-1]["type"] == "function_call"


async def test_messages_calls_say_they_carry_no_token_ids(
    model_server: ScriptedModelServer, proxy: ModelProxy
) -> None:
    model_server.set_script(TOOLS)
    route = open_route(proxy, model_server, token_ids=True)
    async with httpx.AsyncClient(timeout=30) as client:
        response = await client.post(
            route.base_url.removesuffix("/v1") + "/v1/messages?beta=true",
            json={
                "model": "m",
                "max_tokens": 100,
                "stream": True,
                "messages": [{"role": "user", "content": "hi"}],
            },
            headers={"x-api-key": route.key, "anthropic-version": "2023-06-01"},
        )
    assert response.status_code == 200
    [call] = route.close()
    assert call.protocol == "messages" and call.forwarded == {}
    assert not call.has_tokens and "Messages protocol returns no token ids" in call.token_note
    blocks = call.response["content"]
    assert [b["type"] for b in blocks] == ["thinking", "text", "tool_use"]
    assert blocks[2]["input"] == {"cmd": "ls -la"}
    assert call.finish_reason == "tool_use" and call.usage is not None
    assert call.headers["x-api-key"] == "***"
    [request] = model_server.model_requests
    assert request.api_key_sent  # the real key went upstream, in the agent's header


async def test_the_real_key_goes_upstream_and_no_other_key_is_served(
    model_server: ScriptedModelServer, proxy: ModelProxy
) -> None:
    route = open_route(proxy, model_server)
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    assert (await post(route, "/chat/completions", body)).status_code == 200
    assert [r.api_key_sent for r in model_server.model_requests] == [True]
    async with httpx.AsyncClient(timeout=30) as client:
        for key in (REAL_KEY, "akp-not-a-route"):
            refused = await client.post(
                route.base_url + "/chat/completions",
                json=body,
                headers={"Authorization": f"Bearer {key}"},
            )
            assert refused.status_code == 401
            assert "opens no rollout's route" in refused.json()["error"]["message"]
    route.close()
    assert (await post(route, "/chat/completions", body)).status_code == 401  # closed
    assert len(model_server.model_requests) == 1  # nothing refused reached the server


async def test_the_agents_account_headers_stay_behind_and_the_runs_go_upstream(
    model_server: ScriptedModelServer, proxy: ModelProxy
) -> None:
    # the agent holds no account: an OpenAI-Organization or OpenAI-Project it sends would
    # bill the real key's calls to an account it chose; only the run's own headers pick one
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    agent_headers = {
        "OpenAI-Organization": "org-agent-chosen",
        "OpenAI-Project": "proj_agent_chosen",
        "X-Agent-Note": "kept",
    }
    bare = open_route(proxy, model_server)
    model_server.set_api_key(REAL_KEY)
    configured = proxy.open_route(
        rollout_id="task-1-r1",
        upstream=model_server.base_url,
        api_key=REAL_KEY,
        headers={"OpenAI-Organization": "org-the-run"},
        settings=ProxySettings(),
    )
    async with httpx.AsyncClient(timeout=30) as client:
        for route in (bare, configured):
            headers = {**agent_headers, "Authorization": f"Bearer {route.key}"}
            sent = await client.post(
                route.base_url + "/chat/completions", json=body, headers=headers
            )
            assert sent.status_code == 200
    first, second = model_server.model_requests
    assert first.api_key_sent and second.api_key_sent
    assert "openai-organization" not in first.headers and "openai-project" not in first.headers
    assert first.headers["x-agent-note"] == "kept"
    assert second.headers["openai-organization"] == "org-the-run"
    assert "openai-project" not in second.headers
    [call] = bare.close()  # what the agent sent is recorded, as it sent it
    assert call.headers["openai-organization"] == "org-agent-chosen"
    configured.close()


async def test_session_header_and_cache_salt(
    model_server: ScriptedModelServer, proxy: ModelProxy
) -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    route = open_route(proxy, model_server, cache_salt="policy-v7")
    await post(route, "/chat/completions", body)
    other = open_route(proxy, model_server, session_header="X-Rollout-Session")
    await post(other, "/chat/completions", body)
    none = open_route(proxy, model_server, session_header=None)
    await post(none, "/chat/completions", body)
    first, second, third = model_server.model_requests
    assert first.headers["x-session-id"] == route.session_id
    assert route.session_id.startswith("task-1-r0-") and route.session_id != other.session_id
    assert first.body["cache_salt"] == "policy-v7"
    assert second.headers["x-rollout-session"] == other.session_id
    assert "x-session-id" not in second.headers and "cache_salt" not in second.body
    assert "x-session-id" not in third.headers
    [call] = route.close()
    assert call.session_id == route.session_id and call.forwarded == {"cache_salt": "policy-v7"}
    assert none.close()[0].session_id is None
    other.close()


async def test_an_error_answer_is_passed_on_and_recorded(
    model_server: ScriptedModelServer, proxy: ModelProxy
) -> None:
    model_server.set_script({"default": {"fail": "rate_limit", "retry_after": 7}})
    route = open_route(proxy, model_server, token_ids=True)
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    response = await post(route, "/chat/completions", body)
    assert response.status_code == 429 and response.headers["retry-after"] == "7"
    assert response.json()["error"]["code"] == "rate_limit_exceeded"
    [call] = route.close()
    assert call.status == 429 and call.error is not None and call.error.startswith("HTTP 429: ")
    assert call.response["error"]["code"] == "rate_limit_exceeded"
    assert call.token_note == "the call failed (HTTP 429): no tokens"


async def test_a_server_that_cannot_be_reached_is_a_dropped_connection(
    proxy: ModelProxy,
) -> None:
    """As if the agent called the endpoint itself: the connection fails, and the call is
    recorded with why."""
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    route = proxy.open_route(
        rollout_id="r", upstream=f"http://127.0.0.1:{port}/v1", api_key=REAL_KEY
    )
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    with pytest.raises(httpx.TransportError):
        await post(route, "/chat/completions", body)
    [call] = route.close()
    assert call.status is None and "could not be reached" in (call.error or "")


async def test_a_stream_that_breaks_breaks_for_the_agent(
    model_server: ScriptedModelServer, proxy: ModelProxy
) -> None:
    model_server.set_script(
        {"default": {"content": "a long answer " * 20, "fail": "broken_stream"}}
    )
    route = open_route(proxy, model_server)
    async with openai.AsyncOpenAI(
        base_url=route.base_url, api_key=route.key, max_retries=0
    ) as client:
        with pytest.raises((openai.APIError, httpx.TransportError)):
            async for _ in await client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "hi"}], stream=True
            ):
                pass
    [call] = route.close()
    assert call.status == 200 and "broke off" in (call.error or "")


async def test_other_requests_pass_unrecorded(
    model_server: ScriptedModelServer, proxy: ModelProxy
) -> None:
    route = open_route(proxy, model_server)
    async with openai.AsyncOpenAI(base_url=route.base_url, api_key=route.key) as client:
        models = await client.models.list()
    assert [m.id for m in models.data] == ["scripted-model"]
    assert route.close() == []


async def test_a_call_in_flight_when_the_rollout_ends_is_recorded_as_cut_short(
    model_server: ScriptedModelServer, proxy: ModelProxy
) -> None:
    route = open_route(proxy, model_server)
    model_server.hold()
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    async with anyio.create_task_group() as tg:
        tg.start_soon(post, route, "/chat/completions", body)
        with anyio.fail_after(30):
            await model_server.wait_for_requests(1)
        [call] = route.close()
        model_server.release()
    assert call.error == "the rollout ended before the call did"
