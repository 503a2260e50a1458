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


def test_a_reply_can_show_earlier_tool_calls_otherwise_than_sampled() -> None:
    # by default a prompt shows an earlier tool call as it was sampled (it extends that
    # call's prompt and completion); a reply with tool_calls_in_prompt "json" gets a
    # prompt that shows it as JSON after the turn's text: a prefix break
    call = {"name": "calc", "arguments": '{"expr":"2+3"}'}
    script = {
        "rules": [
            {"match": {"turn": 0}, "reply": {"content": "Let me add.", "tool_calls": [call]}},
            {
                "match": {"turn": 1, "last_user_contains": "json"},
                "reply": {"content": "5", "tool_calls_in_prompt": "json"},
            },
            {"match": {"turn": 1}, "reply": {"content": "5"}},
        ]
    }
    prompts = {}
    with ScriptedModelServer(script) as server:
        url = f"{server.base_url}/chat/completions"
        for user in ("json", "sampled"):
            question = {"role": "user", "content": f"2+3? ({user})"}
            body = {"model": "m", "messages": [question], "return_token_ids": True}
            one = httpx.post(url, json=body, timeout=30).json()
            message = one["choices"][0]["message"]
            tool = {"role": "tool", "tool_call_id": message["tool_calls"][0]["id"], "content": "5"}
            messages = [question, message, tool]
            two = httpx.post(url, json={**body, "messages": messages}, timeout=30).json()
            seen = one["prompt_token_ids"] + one["choices"][0]["token_ids"]
            prompts[user] = (seen, two["prompt_token_ids"])
    seen, prompt = prompts["sampled"]
    assert prompt[: len(seen)] == seen
    assert tokens.decode(prompt[len(seen) :]) == "\n<|tool|>5\n<|assistant|>"
    seen, prompt = prompts["json"]
    assert prompt[: len(seen)] != seen
