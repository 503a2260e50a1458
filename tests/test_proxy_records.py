"""The proxy's records say what happened: with token ids asked for, a call that failed,
broke off, never reached the server or was cut short notes that (not "the server returned
no token ids"), and keeps what it had sampled apart from any completion; a stream with an
event that is not JSON is recorded with an error; an answer's texts are recorded no longer
than agentkit's harnesses keep a reply (MAX_REPLY_CHARS), with a note of the cut."""

from __future__ import annotations

import asyncio
import json
import socket
from typing import Any

import anyio
import httpx
import openai
import pytest
from _upstream import Upstream
from aiohttp import web

from agentkit.chat import MAX_REPLY_CHARS
from agentkit.proxy import ModelProxy, ProxyRoute, ProxySettings
from agentkit.testing.model_server import ScriptedModelServer

pytestmark = pytest.mark.anyio

BODY = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
NOT_SAID = "the server returned no token ids"


def route_to(proxy: ModelProxy, url: str, **settings: Any) -> ProxyRoute:
    return proxy.open_route(
        rollout_id="r0", upstream=url, api_key=None, settings=ProxySettings(**settings)
    )


async def post(route: ProxyRoute, body: dict[str, Any]) -> httpx.Response:
    async with httpx.AsyncClient(timeout=30) as client:
        return await client.post(
            route.base_url + "/chat/completions",
            json=body,
            headers={"Authorization": f"Bearer {route.key}"},
        )


async def test_a_call_that_never_reached_the_server_says_so(proxy: ModelProxy) -> None:
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    route = route_to(proxy, f"http://127.0.0.1:{port}/v1", token_ids=True)
    with pytest.raises(httpx.TransportError):
        await post(route, BODY)
    [call] = route.close()
    assert call.token_note == "the model endpoint could not be reached: no tokens"
    assert (call.error or "").startswith("the model endpoint could not be reached: ")


async def test_a_stream_that_broke_off_keeps_its_partial_ids_apart(
    model_server: ScriptedModelServer, proxy: ModelProxy
) -> None:
    """The ids the server had sent before the stream broke are the first ones of what it
    sampled; they are recorded as partial_token_ids, never as a completion."""
    model_server.set_script(
        {"default": {"content": "a long answer " * 20, "fail": "broken_stream"}}
    )
    route = route_to(proxy, model_server.base_url, token_ids=True)
    async with openai.AsyncOpenAI(
        base_url=route.base_url, api_key=route.key, max_retries=0
    ) as client:
        with pytest.raises((openai.APIError, httpx.TransportError)):
            async for _ in await client.chat.completions.create(
                model="m", messages=BODY["messages"], stream=True
            ):
                pass
    [call] = route.close()
    [sent] = [r.sent for r in model_server.model_requests]
    assert call.completion_token_ids is None and call.completion_logprobs is None
    assert not call.has_tokens and call.token_source == "none"
    assert call.prompt_token_ids == sent["prompt_token_ids"]
    partial = call.partial_token_ids or []
    assert 0 < len(partial) < len(sent["completion_token_ids"])
    assert partial == sent["completion_token_ids"][: len(partial)]
    assert call.token_note == (
        f"the answer broke off after {len(partial)} sampled tokens: kept as "
        "partial_token_ids, never trained"
    )


async def test_failed_and_cut_short_calls_say_what_happened(
    model_server: ScriptedModelServer, proxy: ModelProxy
) -> None:
    model_server.set_script({"default": {"fail": "server_error"}})
    route = route_to(proxy, model_server.base_url, token_ids=True)
    assert (await post(route, BODY)).status_code == 500
    [failed] = route.close()
    assert failed.token_note == "the call failed (HTTP 500): no tokens"
    model_server.set_script({"default": {"content": "ok"}})
    model_server.clear_requests()
    model_server.hold()
    route = route_to(proxy, model_server.base_url, token_ids=True)
    async with anyio.create_task_group() as tg:
        tg.start_soon(post, route, BODY)
        with anyio.fail_after(30):
            await model_server.wait_for_requests(1)
        [cut] = route.close()
        model_server.release()
    assert cut.error == "the rollout ended before the call did"
    assert cut.token_note == "the rollout ended before the call did: no tokens"
    assert NOT_SAID not in (failed.token_note + cut.token_note)


@pytest.mark.parametrize("token_ids", [False, True], ids=["passed-on", "rewritten"])
async def test_a_stream_event_that_is_not_json_is_the_calls_error(
    model_server: ScriptedModelServer, proxy: ModelProxy, token_ids: bool
) -> None:
    model_server.set_script({"default": {"content": "one two three four", "fail": "invalid_json"}})
    route = route_to(proxy, model_server.base_url, token_ids=token_ids)
    body = {**BODY, "stream": True, "stream_options": {"include_usage": True}}
    await post(route, body)
    [call] = route.close()
    assert call.status == 200 and call.error is not None
    assert call.error.startswith(
        "the answer has a stream event that is not JSON (model_bad_response): "
    )
    assert not call.has_tokens and call.completion_token_ids is None
    assert call.token_note is not None and call.token_note.startswith(
        "the answer has a stream event that is not JSON"
    )


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
async def test_a_reply_longer_than_a_harness_keeps_is_recorded_cut_with_a_note(
    model_server: ScriptedModelServer, proxy: ModelProxy, stream: bool
) -> None:
    """The record keeps the reply as agentkit's harnesses do (1,000,000 characters) and
    says where it cut (the token ids, fields of their own, are never cut)."""
    text = "x" * (MAX_REPLY_CHARS + 200_000)
    model_server.set_script({"default": {"content": text, "chunk_size": 100_000}})
    route = route_to(proxy, model_server.base_url)
    response = await post(route, {**BODY, "stream": stream})
    assert response.status_code == 200
    [call] = route.close()
    content = call.response["choices"][0]["message"]["content"]
    assert content == text[:MAX_REPLY_CHARS]
    field = "choices[0].message.content"
    assert call.cuts == [{"field": field, "chars": len(text)}]
    assert call.error is None and call.usage is not None


async def test_a_stream_longer_than_the_record_keeps_is_no_error(
    model_server: ScriptedModelServer, proxy: ModelProxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stream passed on as it came is recorded from its first MAX_BODY bytes (4 KiB
    here): the event cut at that point is left out of the record, not taken for a
    malformed one."""
    monkeypatch.setattr("agentkit.proxy._forward.MAX_BODY", 4096)
    model_server.set_script({"default": {"content": "word " * 2000}})
    route = route_to(proxy, model_server.base_url)
    body = {**BODY, "stream": True, "stream_options": {"include_usage": True}}
    response = await post(route, body)
    assert response.status_code == 200 and response.text.endswith("data: [DONE]\n\n")
    [call] = route.close()
    assert call.error is None and call.forwarded == {}
    content = call.response["choices"][0]["message"]["content"]
    assert 0 < len(content) < 4096 and "word " * 10 in content


def chunk(delta: dict[str, Any], ids: list[int], finish: str | None = None) -> bytes:
    choice = {
        "index": 0,
        "delta": delta,
        "token_ids": ids,
        "logprobs": {"content": [{"token": str(i), "logprob": -0.5} for i in ids]},
        "finish_reason": finish,
    }
    data = {"id": "c1", "object": "chat.completion.chunk", "model": "m", "choices": [choice]}
    if not ids:
        data["prompt_token_ids"] = [1, 2, 3]
    return b"data: " + json.dumps(data).encode() + b"\n\n"


class HoldsItsEnd:
    """A chat stream with token ids, held open after its first ``events`` events (never
    its usage chunk nor ``[DONE]``) until the client goes. The model listing the proxy
    asks for first (which engine serves a streamed call with token ids) is not found:
    ``gone`` is the chat call's connection only."""

    def __init__(self, events: int) -> None:
        self.events = events
        self.gone = asyncio.Event()

    async def __call__(self, request: web.BaseRequest) -> web.StreamResponse:
        if request.method == "GET":
            return web.json_response({"error": "no listing"}, status=404)
        await request.read()
        response = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await response.prepare(request)
        chunks = [
            chunk({"role": "assistant", "content": ""}, []),
            chunk({"content": "four"}, [11, 12]),
            chunk({"content": "ty-two"}, [13], finish="stop"),
        ]
        try:
            for event in chunks[: self.events]:
                await response.write(event)
            await asyncio.Event().wait()
        finally:
            self.gone.set()
        return response


@pytest.mark.parametrize("finished", [True, False], ids=["after-the-end", "mid-answer"])
async def test_an_agent_that_hangs_up_once_it_has_the_answer_completed_its_call(
    proxy: ModelProxy, finished: bool
) -> None:
    """Agents close the connection once they have the answer's last event (codex does,
    before the server's [DONE]): the call is complete, trainable. One that hangs up in
    the middle of the answer did not complete it: its ids are partial."""
    server = HoldsItsEnd(3 if finished else 2)
    async with Upstream(server) as upstream:
        route = route_to(proxy, upstream.url, token_ids=True)
        with anyio.fail_after(30):
            async with (
                httpx.AsyncClient(timeout=30) as client,
                client.stream(
                    "POST",
                    route.base_url + "/chat/completions",
                    json={**BODY, "stream": True},
                    headers={"Authorization": f"Bearer {route.key}"},
                ) as response,
            ):
                seen = 0
                async for line in response.aiter_lines():
                    seen += line.startswith("data:")
                    if seen == server.events:
                        break  # and hang up
            await server.gone.wait()
        [call] = route.close()
    if finished:
        assert call.error is None and call.finish_reason == "stop"
        assert call.has_tokens and call.completion_token_ids == [11, 12, 13]
    else:
        assert call.error == "the agent closed the connection before the answer ended"
        assert call.completion_token_ids is None and call.partial_token_ids == [11, 12]


@pytest.mark.parametrize("finished", [True, False], ids=["after-the-end", "mid-answer"])
async def test_a_rollout_that_ends_once_its_agent_has_the_answer_keeps_the_call(
    proxy: ModelProxy, finished: bool
) -> None:
    """The rollout ends (its route closes) while the proxy still waits for the end of a
    stream whose answer the agent already has: the call is complete. Closed mid-answer,
    it is cut short."""
    server = HoldsItsEnd(3 if finished else 2)
    async with Upstream(server) as upstream:
        route = route_to(proxy, upstream.url, token_ids=True)
        with anyio.fail_after(30):
            async with (
                httpx.AsyncClient(timeout=30) as client,
                client.stream(
                    "POST",
                    route.base_url + "/chat/completions",
                    json={**BODY, "stream": True},
                    headers={"Authorization": f"Bearer {route.key}"},
                ) as response,
            ):
                seen = 0
                async for line in response.aiter_lines():
                    seen += line.startswith("data:")
                    if seen == server.events:
                        break
                [call] = route.close()  # the call is still in flight
    if finished:
        assert call.error is None and call.completion_token_ids == [11, 12, 13]
    else:
        assert call.error == "the rollout ended before the call did"
        assert call.partial_token_ids == [11, 12]


class HoldsResponsesEnd:
    """A Responses stream with vLLM's raw message tokens, held open after its
    ``response.completed`` event until the client goes (as a server does before it ends
    the stream)."""

    def __init__(self) -> None:
        self.gone = asyncio.Event()

    async def __call__(self, request: web.BaseRequest) -> web.StreamResponse:
        await request.read()
        response = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await response.prepare(request)
        done = {
            "id": "resp_1",
            "object": "response",
            "status": "completed",
            "output": [
                {
                    "type": "message",
                    "role": "assistant",
                    "content": [{"type": "output_text", "text": "forty-two"}],
                }
            ],
            "usage": {"input_tokens": 3, "output_tokens": 2, "total_tokens": 5},
            "input_messages": [
                {"type": "raw_message_tokens", "message": "hi", "tokens": [1, 2, 3]}
            ],
            "output_messages": [
                {"type": "raw_message_tokens", "message": "forty-two", "tokens": [11, 12]}
            ],
        }
        events = [
            {"type": "response.created", "response": {**done, "status": "in_progress"}},
            {"type": "response.completed", "response": done},
        ]
        try:
            for event in events:
                data = json.dumps(event).encode()
                await response.write(
                    b"event: " + event["type"].encode() + b"\ndata: " + data + b"\n\n"
                )
            await asyncio.Event().wait()
        finally:
            self.gone.set()
        return response


async def test_a_responses_call_whose_agent_hangs_up_after_it_completed_keeps_its_ids(
    proxy: ModelProxy,
) -> None:
    """Codex closes the connection once it has ``response.completed``, before the stream's
    end: the call is complete, and its record still has the ids (the proxy reads the
    record twice then: whether the server had finished, and the record itself)."""
    server = HoldsResponsesEnd()
    async with Upstream(server) as upstream:
        route = route_to(proxy, upstream.url, token_ids=True)
        with anyio.fail_after(30):
            async with (
                httpx.AsyncClient(timeout=30) as client,
                client.stream(
                    "POST",
                    route.base_url + "/responses",
                    json={"model": "m", "input": "hi", "stream": True},
                    headers={"Authorization": f"Bearer {route.key}"},
                ) as response,
            ):
                async for line in response.aiter_lines():
                    if line == "event: response.completed":
                        break  # and hang up
            await server.gone.wait()
        [call] = route.close()
    assert call.error is None and call.finish_reason == "completed"
    assert call.prompt_token_ids == [1, 2, 3] and call.completion_token_ids == [11, 12]
    assert "input_messages" not in call.response  # the ids' source is not kept twice
