"""The scripted model follows its script at the far end of the context vLLM serves.

The agent programs' prompts run to 16,600 tokens; the model's weights are made to
find a tool's name anywhere in 32,768 (``tests/servers/scripted_model.py``). One
request whose tool list is followed by about 32,000 tokens of text, sampled at
temperature 1 (the model's generation config makes vLLM decode greedily), gets the
script's call, token for token, and the end of the turn.
"""

from __future__ import annotations

import random
from typing import Any

import httpx
import scripted_model

from conftest import MODEL, Server

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": name,
            "description": "A tool.",
            "parameters": {"type": "object", "properties": {"command": {"type": "string"}}},
        },
    }
    for name in ("bash", "read")
]


def test_the_scripted_model_answers_its_script_at_the_end_of_the_context(vllm: Server) -> None:
    from transformers import AutoTokenizer  # deferred: the servers session's

    tokenizer = AutoTokenizer.from_pretrained(vllm.model_dir)
    rng = random.Random(0)
    words = " ".join(rng.choice(scripted_model.WORDS) for _ in range(40_000))
    answer = scripted_model.answer("bash")
    expected = [*tokenizer(answer, add_special_tokens=False)["input_ids"], tokenizer.eos_token_id]
    room = MODEL.max_positions - len(expected) - 8

    def body(text: str) -> dict[str, Any]:
        messages = [
            {"role": "system", "content": "You are an agent."},
            {"role": "user", "content": text},
        ]
        return {"model": vllm.model, "messages": messages, "tools": TOOLS}

    def length(text: str) -> int:
        rendered = tokenizer.apply_chat_template(
            body(text)["messages"], tools=TOOLS, add_generation_prompt=True, tokenize=False
        )
        return len(tokenizer(rendered, add_special_tokens=False)["input_ids"])

    # the words' first tokens, as many as leave room for the answer (a cut may
    # tokenize a little differently: the margin)
    ids = tokenizer(words, add_special_tokens=False)["input_ids"]
    text = tokenizer.decode(ids[: room - length("") - 16])
    assert length(text) <= room
    request = {**body(text), "temperature": 1.0, "max_tokens": len(expected) + 8,
               "return_token_ids": True}  # fmt: skip
    reply = httpx.post(f"{vllm.base_url}/chat/completions", json=request, timeout=600)
    assert reply.status_code == 200, reply.text
    data = reply.json()
    assert len(data["prompt_token_ids"]) > 32_000
    [choice] = data["choices"]
    assert choice["token_ids"] == expected, tokenizer.decode(choice["token_ids"])
    [call] = choice["message"]["tool_calls"]
    assert call["function"]["name"] == "bash"
    assert choice["message"]["reasoning"].strip() == scripted_model.REASONING
