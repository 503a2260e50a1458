"""The scripted server's prompt token ids are cut as chat templates cut them, so a
multi-turn rollout's token ids can be stitched (agentkit.chat.TokenTrace)."""

from __future__ import annotations

import httpx

from agentkit.testing import tokens
from agentkit.testing.model_server import ScriptedModelServer


def test_the_next_prompt_extends_the_previous_prompt_and_completion() -> None:
    script = {"default": {"content": "It is 42, of course."}}
    first = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Answer?"}]
    with ScriptedModelServer(script) as server:
        url = f"{server.base_url}/chat/completions"
        body = {"model": "m", "messages": first, "return_token_ids": True}
        one = httpx.post(url, json=body, timeout=30).json()
        reply = {"role": "assistant", "content": one["choices"][0]["message"]["content"]}
        second = [*first, reply, {"role": "user", "content": "Why?"}]
        two = httpx.post(url, json={**body, "messages": second}, timeout=30).json()
    seen = one["prompt_token_ids"] + one["choices"][0]["token_ids"]
    assert two["prompt_token_ids"][: len(seen)] == seen
    assert tokens.decode(two["prompt_token_ids"][len(seen) :]) == "\n<|user|>Why?\n<|assistant|>"
    assert tokens.decode(one["prompt_token_ids"]) == (
        "<|system|>Be brief.\n<|user|>Answer?\n<|assistant|>"
    )
