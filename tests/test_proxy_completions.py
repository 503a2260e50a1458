"""Legacy completions (``POST /v1/completions``) through the model proxy with token ids: a
server of the test's own answers as vLLM does (``return_token_ids``: the choice's
``prompt_token_ids`` and ``token_ids``; ``logprobs``: ``tokens`` and ``token_logprobs``),
whole and streamed. The record has the ids and logprobs; the agent gets only what it
asked for; ids the usage disagrees with are not taken."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from _upstream import Upstream
from aiohttp import web

from agentkit.proxy import ModelProxy, ProxySettings

pytestmark = pytest.mark.anyio

PROMPT = [5, 6, 7]
OUTPUT = [40, 41, 42]


def _choice(ids: list[int], body: dict[str, Any], *, first: bool) -> dict[str, Any]:
    choice: dict[str, Any] = {"index": 0, "text": "".join(f"t{i}" for i in ids)}
    if body.get("return_token_ids"):
        if first:
            choice["prompt_token_ids"] = PROMPT
        choice["token_ids"] = ids
    if body.get("logprobs") is not None:
        choice["logprobs"] = {
            "tokens": [f"t{i}" for i in ids],
            "token_logprobs": [-0.5] * len(ids),
            "top_logprobs": None,
        }
    else:
        choice["logprobs"] = None
    return choice


def completions_server(counted: int) -> Any:
    """vLLM's /v1/completions; ``usage.completion_tokens`` says ``counted``."""

    async def handle(request: web.BaseRequest) -> web.StreamResponse:
        body = await request.json()
        usage = {"prompt_tokens": 3, "completion_tokens": counted, "total_tokens": 3 + counted}
        top = {"id": "cmpl-1", "object": "text_completion", "created": 1, "model": "m"}
        if not body.get("stream"):
            choice = {**_choice(OUTPUT, body, first=True), "finish_reason": "stop"}
            return web.json_response({**top, "choices": [choice], "usage": usage})
        response = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await response.prepare(request)
        for n, token in enumerate(OUTPUT):
            choice = _choice([token], body, first=n == 0)
            choice["finish_reason"] = "stop" if n == len(OUTPUT) - 1 else None
            await response.write(b"data: " + json.dumps({**top, "choices": [choice]}).encode())
            await response.write(b"\n\n")
        if (body.get("stream_options") or {}).get("include_usage"):
            chunk = {**top, "choices": [], "usage": usage}
            await response.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
        await response.write(b"data: [DONE]\n\n")
        return response

    return handle


async def _post(url: str, key: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    """What the agent gets: the whole answer, or each chunk of the stream."""
    headers = {"Authorization": f"Bearer {key}"}
    async with httpx.AsyncClient(timeout=30) as client:
        answer = await client.post(url + "/completions", json=body, headers=headers)
        assert answer.status_code == 200
        if not body.get("stream"):
            return [answer.json()]
        events = [e for e in answer.text.split("\n\n") if e.startswith("data: {")]
        return [json.loads(e[len("data: ") :]) for e in events]


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
async def test_the_record_has_the_ids_and_logprobs_and_the_agent_none(
    proxy: ModelProxy, stream: bool
) -> None:
    async with Upstream(completions_server(counted=len(OUTPUT))) as server:
        route = proxy.open_route(
            rollout_id="r", upstream=server.url, api_key="sk-test",
            settings=ProxySettings(token_ids=True),
        )  # fmt: skip
        body = {"model": "m", "prompt": "go", "stream": stream}
        got = await _post(route.base_url, route.key, body)
        [call] = route.close()
    assert call.protocol == "completions" and call.error is None
    assert call.forwarded["return_token_ids"] is True and call.forwarded["logprobs"] == 0
    assert call.prompt_token_ids == PROMPT and call.completion_token_ids == OUTPUT
    assert call.completion_logprobs == [-0.5] * len(OUTPUT) and call.token_note is None
    assert call.finish_reason == "stop" and call.usage is not None
    assert call.response["choices"][0]["text"] == "t40t41t42"
    for answer in got:  # the agent asked for none of it
        assert "usage" not in answer or not stream
        for choice in answer["choices"]:
            assert not {"prompt_token_ids", "token_ids"} & set(choice)
            assert choice["logprobs"] is None


async def test_ids_the_usage_disagrees_with_are_not_taken(proxy: ModelProxy) -> None:
    async with Upstream(completions_server(counted=len(OUTPUT) + 2)) as server:
        route = proxy.open_route(
            rollout_id="r", upstream=server.url, api_key="sk-test",
            settings=ProxySettings(token_ids=True),
        )  # fmt: skip
        await _post(route.base_url, route.key, {"model": "m", "prompt": "go", "stream": True})
        [call] = route.close()
    assert call.completion_token_ids is None and call.prompt_token_ids is None
    assert call.token_note is not None
    assert "3 ids, but usage.completion_tokens is 5" in call.token_note
