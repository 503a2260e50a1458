"""A stream's last sampled tokens are on its finishing chunk (as vLLM sends them): the
proxy's record of a streamed call keeps them."""

from __future__ import annotations

import httpx
import pytest

from agentkit.proxy import ModelProxy, ProxySettings
from agentkit.testing import tokens
from agentkit.testing.model_server import ScriptedModelServer

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize("finish", ["stop", "tool_calls", "length"])
async def test_the_finishing_chunks_ids_are_recorded(
    model_server: ScriptedModelServer, proxy: ModelProxy, finish: str
) -> None:
    reply: dict[str, object] = {"content": "all done here", "chunk_size": 4}
    if finish == "tool_calls":
        reply["tool_calls"] = [{"name": "bash", "arguments": {"command": "ls"}}]
    if finish == "length":
        reply["finish_reason"] = "length"
    model_server.set_script({"default": reply})
    route = proxy.open_route(
        rollout_id="r0",
        upstream=model_server.base_url,
        api_key="sk-test",
        settings=ProxySettings(token_ids=True),
    )
    body = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "go"}]}
    async with httpx.AsyncClient(timeout=30) as client, client.stream(
        "POST", route.base_url + "/chat/completions", json=body,
        headers={"Authorization": f"Bearer {route.key}"},
    ) as answer:  # fmt: skip
        assert answer.status_code == 200
        await answer.aread()
    [call] = route.close()
    [request] = model_server.model_requests
    sent = request.sent["completion_token_ids"]
    # the server's last chunk carried the last sampled tokens: the end-of-turn token of a
    # turn that ended, the last piece of text of one cut at its length limit
    last = tokens.END_OF_TURN if finish != "length" else "here"
    assert tokens.decode(sent).endswith(last)
    assert call.completion_token_ids == sent
    assert call.usage is not None and call.usage.output_tokens == len(sent)
    assert call.finish_reason == finish
