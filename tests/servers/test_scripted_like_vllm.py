"""The scripted model server's chat completions are vLLM's in every field the proxy reads.

The same requests (a plain answer, an answer with a tool call; whole and streamed;
ids and logprobs asked for) go to the real vLLM and to the scripted server, told
to answer what vLLM answered (its text, reasoning and tool calls). What the proxy
reads of each (``agentkit.proxy``'s chat wire: ``prompt_token_ids`` on the
completion or the stream's first chunk, each choice's ``token_ids`` and
``logprobs.content``, the deltas' ``content``, ``reasoning`` and ``tool_calls``,
``finish_reason``, ``usage``) is reduced to its shape, with the tokens told apart
by kind (text, a template's marker, the end of the turn), and the two shapes
must be the same. The servers' tokenizers differ, so ids are compared by what
they stand for, never by value.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from agentkit.testing import tokens
from agentkit.testing.model_server import ScriptedModelServer
from conftest import Server

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "bash",
            "description": "Run a shell command",
            "parameters": {
                "type": "object",
                "properties": {"command": {"type": "string"}, "description": {"type": "string"}},
                "required": ["command"],
            },
        },
    }
]
REQUESTS = {
    "text": {"messages": [{"role": "user", "content": "Say hello."}]},
    "tool call": {
        "messages": [
            {"role": "system", "content": "You are a coding agent."},
            {"role": "user", "content": "Create the file /app/hello.txt"},
        ],
        "tools": TOOLS,
    },
}


def _post(base_url: str, body: dict[str, Any]) -> Any:
    if not body.get("stream"):
        answer = httpx.post(f"{base_url}/chat/completions", json=body, timeout=300)
        assert answer.status_code == 200, answer.text
        return answer.json()
    chunks = []
    with httpx.stream("POST", f"{base_url}/chat/completions", json=body, timeout=300) as answer:
        assert answer.status_code == 200
        for line in answer.iter_lines():
            if line.startswith("data: "):
                chunks.append(line[len("data: ") :])
    assert chunks[-1] == "[DONE]"
    return [json.loads(c) for c in chunks[:-1]]


def _reasoning(message: dict[str, Any]) -> tuple[str | None, str | None]:
    """(the field name, the text) of a message's or delta's reasoning."""
    for name in ("reasoning", "reasoning_content"):
        if message.get(name):
            return name, message[name]
    return None, None


def _named(message: dict[str, Any]) -> str | None:
    """The name a message or delta gives its reasoning (None: it has none)."""
    return _reasoning(message)[0]


def whole_shape(data: dict[str, Any], ended: bool) -> dict[str, Any]:
    """What the proxy reads of a whole completion, as a shape."""
    [choice] = data["choices"]
    ids, entries = choice["token_ids"], choice["logprobs"]["content"]
    message = choice["message"]
    return {
        "prompt ids at the top": isinstance(data.get("prompt_token_ids"), list),
        "ids on the choice": isinstance(ids, list),
        "as many ids as counted": len(ids) == data["usage"]["completion_tokens"],
        "a logprob per id": len(entries) == len(ids),
        "message fields": sorted(k for k in ("content", "tool_calls") if message.get(k)),
        "reasoning": _named(message),
        "finish": choice["finish_reason"],
        "ends with the end-of-turn token": ended,
    }


def stream_shape(
    chunks: list[dict[str, Any]], whole: list[int], kind: Any, markers: Any
) -> dict[str, Any]:
    """What the proxy reads of a stream, as a shape. ``whole``: the ids of the same
    request answered whole; ``kind``: what a list of ids ends with (``text``,
    ``marker``, ``end``, ``none``); ``markers``: the template's markers among ids.
    A server may put several tokens on one chunk when its client lags (vLLM does),
    so nothing here depends on how the tokens are spread over the chunks, only on
    where the ids are and that none is missing."""
    with_choice = [c for c in chunks if c["choices"]]
    after = chunks[len(with_choice) :]
    finishing = [n for n, c in enumerate(with_choice) if c["choices"][0]["finish_reason"]]
    deltas = [c["choices"][0]["delta"] for c in with_choice]
    ids = [i for c in with_choice[1:] for i in c["choices"][0].get("token_ids") or []]
    return {
        "prompt ids on the first chunk only": [bool(c.get("prompt_token_ids")) for c in chunks[:2]],
        "ids on the first chunk": "token_ids" in with_choice[0]["choices"][0],
        "ids on every later chunk": all(
            isinstance(c["choices"][0].get("token_ids"), list) for c in with_choice[1:]
        ),
        "a logprob per id": all(
            len((c["choices"][0]["logprobs"] or {"content": []})["content"])
            == len(c["choices"][0]["token_ids"])
            for c in with_choice[1:]
        ),
        "the chunks' ids are the whole answer's": ids == whole,
        "the markers among them": markers(ids),
        "the finishing chunk is the last": finishing == [len(with_choice) - 1],
        "the finishing chunk's tokens end with": kind(with_choice[-1]["choices"][0]["token_ids"]),
        # (vLLM streams the whitespace between a reasoning block and a tool call as
        # content deltas, which its whole answer leaves out: not a field of its own)
        "delta fields": sorted(
            {k for d in deltas for k in d if d.get(k) and not (k == "content" and not d[k].strip())}
        ),
        "reasoning": next((_named(d) for d in deltas if _named(d)), None),
        "then the usage alone": [sorted(c) for c in after][:1] and bool(after[0].get("usage")),
    }


@pytest.mark.parametrize("case", sorted(REQUESTS))
def test_the_scripted_server_answers_in_vllms_shapes(vllm: Server, case: str) -> None:
    from transformers import AutoTokenizer  # deferred: the servers session's

    tokenizer = AutoTokenizer.from_pretrained(vllm.model_dir)
    body = {**REQUESTS[case], "max_tokens": 200, "temperature": 0, "logprobs": True,
            "return_token_ids": True}  # fmt: skip
    real = _post(vllm.base_url, {**body, "model": vllm.model})
    [choice] = real["choices"]
    message = choice["message"]
    assert choice["finish_reason"] in ("stop", "tool_calls"), message  # the model ends its turns
    reply: dict[str, Any] = {"content": message.get("content") or None}
    field, reasoning = _reasoning(message)
    assert field == "reasoning"  # current vLLM's name (reasoning_content was removed)
    reply["reasoning"] = reasoning
    if message.get("tool_calls"):
        reply["tool_calls"] = [
            {"name": c["function"]["name"], "arguments": c["function"]["arguments"]}
            for c in message["tool_calls"]
        ]
    assert bool(reply.get("tool_calls")) == (case == "tool call"), message

    def real_kind(ids: list[int]) -> str:
        if not ids:
            return "none"
        if ids[-1] == tokenizer.eos_token_id:
            return "end"
        text = tokenizer.decode(ids)
        return (
            "marker"
            if any(m in text for m in ("<think>", "</think>", "<tool_call>", "</tool_call>"))
            else "text"
        )

    def scripted_kind(ids: list[int]) -> str:
        text = tokens.decode(ids)
        if not ids:
            return "none"
        if text.endswith(tokens.END_OF_TURN):
            return "end"
        return (
            "marker"
            if any(m in text for m in ("<think>", "</think>", "<tool_call>", "}</tool_call>"))
            else "text"
        )

    with ScriptedModelServer({"default": reply}) as scripted:
        fake = _post(scripted.base_url, {**body, "model": "m"})
        streams = {}
        for name, url, model in (
            ("vllm", vllm.base_url, vllm.model),
            ("scripted", scripted.base_url, "m"),
        ):
            streams[name] = _post(url, {**body, "model": model, "stream": True,
                                        "stream_options": {"include_usage": True}})  # fmt: skip

    assert whole_shape(
        fake, scripted_kind(fake["choices"][0]["token_ids"][-3:]) == "end"
    ) == whole_shape(real, choice["token_ids"][-1] == tokenizer.eos_token_id)
    shapes = {}
    wholes = {"vllm": choice["token_ids"], "scripted": fake["choices"][0]["token_ids"]}
    for name, kind, text in (
        ("vllm", real_kind, tokenizer.decode),
        ("scripted", scripted_kind, tokens.decode),
    ):

        def markers(ids: list[int], text: Any = text) -> list[str]:
            found = text(ids)
            return [m for m in ("<think>", "</think>", "<tool_call>", "</tool_call>") if m in found]

        shapes[name] = stream_shape(streams[name], wholes[name], kind, markers)
    assert shapes["scripted"] == shapes["vllm"]
