"""The verifiers export of calls the model proxy translated (Anthropic Messages and
the Responses API served from the server's chat completions): each call's messages
are those of the chat request the server was sent, its answer the chat message the
agent's answer stands for, not a placeholder: the proxy records it with the call
(``chat_answer``), and for a calls file written before it did, the run directory's
reader works it out from the answer as recorded.

The calls are real: a request in the agent's protocol through a real proxy route in
translation mode to the scripted server, which serves chat completions only; the
rollout around them is a real run (chat harness, scripted model).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from _calls_runs import write_calls

from agentkit.env import AgentEnv
from agentkit.proxy import ProxySettings, shared_proxy
from agentkit.testing.model_server import ScriptedModelServer
from agentkit.training import export_run

pytestmark = pytest.mark.anyio

REPLY = {
    "content": "I will write it.",
    "reasoning": "A shell command does it.",
    "tool_calls": [{"name": "shell", "arguments": '{"cmd":"echo hi > a.txt"}'}],
}
#: Per protocol: its path, and a request saying "Be brief." then "Make a.txt" with a
#: tool, as the agent's program sends it.
REQUESTS: dict[str, tuple[str, dict[str, Any]]] = {
    "messages": (
        "/messages",
        {
            "model": "m", "max_tokens": 100, "system": "Be brief.",
            "messages": [{"role": "user", "content": [{"type": "text", "text": "Make a.txt"}]}],
            "tools": [{"name": "shell", "input_schema": {"type": "object"}}],
        },
    ),
    "responses": (
        "/responses",
        {
            "model": "m", "instructions": "Be brief.",
            "input": [{"type": "message", "role": "user",
                       "content": [{"type": "input_text", "text": "Make a.txt"}]}],
            "tools": [{"type": "function", "name": "shell", "parameters": {"type": "object"}}],
        },
    ),
}  # fmt: skip


@pytest.mark.parametrize("written", ["now", "before chat_answer"])
@pytest.mark.parametrize("protocol", sorted(REQUESTS))
async def test_a_translated_calls_messages_are_the_chat_request_the_server_got(
    protocol: str, written: str, tmp_path: Path, model_server: ScriptedModelServer
) -> None:
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(json.dumps({"id": "make", "input": "Make a.txt", "target": "x"}) + "\n")
    run = tmp_path / "run"
    await AgentEnv.from_names(f"jsonl:{tasks}", "chat").evaluate(
        model="m", base_url=model_server.base_url, out=run
    )
    [line] = (run / "rollouts.jsonl").read_text().splitlines()
    rollout_id = json.loads(line)["rollout_id"]
    model_server.clear_requests()
    model_server.set_apis({"chat"})
    model_server.set_script({"default": REPLY})
    path, body = REQUESTS[protocol]
    async with shared_proxy() as proxy:
        route = proxy.open_route(
            rollout_id=rollout_id,
            upstream=model_server.base_url,
            api_key=None,
            settings=ProxySettings(token_ids=True, translate_to_chat=True),
        )
        async with (
            aiohttp.ClientSession(headers={"x-api-key": route.key}) as http,
            http.post(route.base_url + path, json=body) as reply,
        ):
            assert reply.status == 200, await reply.text()
        calls = route.close()
    assert [(c.protocol, c.upstream_protocol, c.has_tokens) for c in calls] == [
        (protocol, "chat", True)
    ]
    recorded = calls[0].chat_answer
    assert recorded is not None and recorded["content"] == "I will write it."
    path = write_calls(run, rollout_id, calls)
    if written != "now":  # as the proxy wrote calls before it recorded chat_answer
        lines = [json.loads(x) for x in path.read_text().splitlines()]
        assert all(line.pop("chat_answer") == recorded for line in lines)
        path.write_text("".join(json.dumps(line) + "\n" for line in lines))

    out = tmp_path / "v.jsonl"
    export_run(run, out, format="verifiers", require_token_ids=True)
    [trace] = [json.loads(x) for x in out.read_text().splitlines()]
    [request] = model_server.model_requests
    assert [m["role"] for m in request.body["messages"]] == ["system", "user"]
    *asked, answer = [n["message"] for n in trace["nodes"]]
    assert asked == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Make a.txt"},
    ]
    [call] = answer.pop("tool_calls")
    assert (call["name"], json.loads(call["arguments"])) == ("shell", {"cmd": "echo hi > a.txt"})
    assert answer == {
        "role": "assistant",
        "content": "I will write it.",
        "reasoning_content": "A shell command does it.",
    }
    assert (
        trace["nodes"][-1]["token_ids"]
        == request.sent["prompt_token_ids"] + request.sent["completion_token_ids"]
    )
