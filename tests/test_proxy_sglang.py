"""The model proxy against SGLang's chat completions (the scripted server's
``engine="sglang"``, written from SGLang 0.5.23's protocol): ids on the choice under
SGLang's names, a stream asked for them SGLang's way (it refuses vLLM's with a 400)."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from agentkit.proxy import ModelProxy, ProxySettings
from agentkit.testing import tokens
from agentkit.testing.model_server import ScriptedModelServer

pytestmark = pytest.mark.anyio

REPLY = {
    "reasoning": "think first",
    "content": "done",
    "tool_calls": [{"name": "bash", "arguments": {"command": "ls"}}],
}
MESSAGES = [{"role": "user", "content": "list the files"}]


async def _call(base_url: str, body: dict[str, Any], key: str = "k") -> tuple[int, Any]:
    headers = {"Authorization": f"Bearer {key}"}
    async with httpx.AsyncClient(timeout=30) as client:
        if not body.get("stream"):
            answer = await client.post(base_url + "/chat/completions", json=body, headers=headers)
            return answer.status_code, answer.json()
        async with client.stream(
            "POST", base_url + "/chat/completions", json=body, headers=headers
        ) as answer:
            lines = [x async for x in answer.aiter_lines() if x.startswith("data: {")]
            if answer.status_code != 200:
                return answer.status_code, None
            return 200, [json.loads(x[len("data: ") :]) for x in lines]


async def test_sglang_refuses_vllms_stream_fields_and_answers_in_its_own() -> None:
    async with ScriptedModelServer({"default": REPLY}, engine="sglang") as server:
        asked = {"model": "m", "messages": MESSAGES, "return_token_ids": True}
        status, whole = await _call(server.base_url, asked)
        [choice] = whole["choices"]
        assert status == 200 and "prompt_token_ids" not in whole and "token_ids" not in choice
        assert choice["message"]["reasoning_content"] == "think first"
        [sent] = [r.sent for r in server.model_requests]
        assert choice["response_token_ids"] == sent["completion_token_ids"]
        assert choice["prompt_token_ids"] == sent["prompt_token_ids"]
        assert tokens.decode(choice["response_token_ids"]).endswith(tokens.END_OF_TURN)
        status, _ = await _call(server.base_url, {**asked, "stream": True})
        assert status == 400
        sglang_way = {
            "model": "m", "messages": MESSAGES, "stream": True,
            "return_input_ids_in_sglext": True, "return_output_ids_in_sglext": True,
        }  # fmt: skip
        status, chunks = await _call(server.base_url, sglang_way)
        [ids] = [c["sglext"] for c in chunks if "sglext" in c]
        assert ids["output_ids"] == [sent["completion_token_ids"]]
        assert ids["input_ids"] == sent["prompt_token_ids"]
        assert all("token_ids" not in c["choices"][0] for c in chunks if c["choices"])


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
async def test_the_proxy_records_sglangs_ids_and_the_agent_gets_what_it_asked(
    proxy: ModelProxy, stream: bool
) -> None:
    async with ScriptedModelServer({"default": REPLY}, engine="sglang") as server:
        route = proxy.open_route(
            rollout_id="r0", upstream=server.base_url, api_key="sk-test",
            settings=ProxySettings(token_ids=True),
        )  # fmt: skip
        body = {"model": "m", "messages": MESSAGES, "stream": stream}
        status, answer = await _call(route.base_url, body, route.key)
        assert status == 200  # a stream was not asked return_token_ids, which SGLang refuses
        if stream:
            assert all("sglext" not in c for c in answer)  # the agent did not ask
            assert [c["choices"][0]["finish_reason"] for c in answer][-1] == "tool_calls"
        else:
            [choice] = answer["choices"]
            assert not {"prompt_token_ids", "response_token_ids"} & set(choice)
        [call] = route.close()
        [request] = [r for r in server.model_requests]
        sent = request.sent
        assert call.prompt_token_ids == sent["prompt_token_ids"]
        assert call.completion_token_ids == sent["completion_token_ids"]
        assert call.token_source == "server"
        if stream:
            assert request.body["return_output_ids_in_sglext"] is True
            assert "return_token_ids" not in request.body
