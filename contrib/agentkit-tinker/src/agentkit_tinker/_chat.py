"""A chat conversation rendered to token ids with the model's chat template, and a
completion's text parsed back into an assistant message (Hermes/Qwen ``<tool_call>``
blocks, a ``<think>`` block as its reasoning)."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["assistant_message", "render"]

_TOOL_CALL = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.DOTALL)
_THINK = re.compile(r"^\s*<think>\s*(.*?)\s*</think>\s*", re.DOTALL)


def render(
    tokenizer: Any, messages: Sequence[Mapping[str, Any]], tools: Sequence[Any] | None
) -> list[int]:
    """The prompt's token ids: ``messages`` (and ``tools``) through the tokenizer's chat
    template, with the assistant's generation prompt."""
    ids = tokenizer.apply_chat_template(
        [dict(m) for m in messages],
        tools=list(tools) if tools else None,
        add_generation_prompt=True,
        tokenize=True,
    )
    if isinstance(ids, Mapping):  # newer transformers answer a BatchEncoding
        ids = ids["input_ids"]
    return [int(i) for i in ids]


def assistant_message(text: str) -> tuple[dict[str, Any], bool]:
    """The assistant message of a completion's decoded ``text``, and whether it calls
    tools: each ``<tool_call>{"name": ..., "arguments": ...}</tool_call>`` block a
    call (a block that is not such JSON stays in the content), a leading
    ``<think>`` block its ``reasoning_content``."""
    message: dict[str, Any] = {"role": "assistant"}
    thought = _THINK.match(text)
    if thought:
        message["reasoning_content"] = thought.group(1)
        text = text[thought.end() :]
    calls: list[dict[str, Any]] = []
    kept: list[str] = []
    last = 0
    for match in _TOOL_CALL.finditer(text):
        call = _call(match.group(1), len(calls))
        if call is None:
            continue
        kept.append(text[last : match.start()])
        last = match.end()
        calls.append(call)
    kept.append(text[last:])
    content = "".join(kept).strip()
    message["content"] = content or (None if calls else "")
    if calls:
        message["tool_calls"] = calls
    return message, bool(calls)


def _call(body: str, index: int) -> dict[str, Any] | None:
    try:
        data = json.loads(body)
    except json.JSONDecodeError:
        return None
    if not isinstance(data, dict) or not isinstance(data.get("name"), str):
        return None
    arguments = data.get("arguments", {})
    return {
        "id": f"call_{index}",
        "type": "function",
        "function": {
            "name": data["name"],
            "arguments": arguments if isinstance(arguments, str) else json.dumps(arguments),
        },
    }
