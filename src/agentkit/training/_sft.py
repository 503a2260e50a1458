"""SFT: the transcripts of the rollouts that passed, as OpenAI-chat or ShareGPT JSONL.

Like ``harbor traces export``: one line per rollout that passed (``passed``
true), tool calls included.

- ``sft-chat``: ``{"messages": [...], "tools": [...], "rollout_id", "task_id",
  "reward"}``, the messages in OpenAI's chat shape (``tool_calls`` with
  ``function.name`` and ``function.arguments`` as a JSON string; ``tool``
  messages with ``tool_call_id``; an assistant's thinking as
  ``reasoning_content``, which chat templates and tinker-cookbook's OpenAI
  message reader take), as TRL's SFT trainer and tinker-cookbook's
  ``FromConversationFileBuilder`` read a ``messages`` column. ``tools`` are
  the function tools of the rollout's last chat request, when its calls were
  recorded.
- ``sharegpt``: ``{"conversations": [{"from", "value"}], "system", "tools"}``
  as LLaMA-Factory's ShareGPT format: ``human``, ``gpt``, ``function_call``
  (the calls as JSON ``{"name", "arguments"}``, a list when several) and
  ``observation`` (a tool result); the system prompt in ``system`` and the
  tools as a JSON string. Text an assistant wrote beside its tool calls is
  kept in the turn's ``thought``. ShareGPT has no field for a model's
  thinking: it is left out.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from agentkit._calls import ModelCall
from agentkit._reasoning import message_reasoning
from agentkit.training._files import write_lines
from agentkit.training._records import TrainingRecord
from agentkit.training._toolcalls import tool_calls_of

__all__ = ["chat_messages", "sharegpt_record", "tools_of_calls", "write_sft"]


def _content(value: Any) -> Any:
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, list):
        return value
    return json.dumps(value, ensure_ascii=False)


def _tool_calls(message: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [
        {"id": cid, "type": "function", "function": {"name": name, "arguments": arguments}}
        for cid, name, arguments in tool_calls_of(message, ensure_ascii=False)
    ]


def chat_messages(messages: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """A transcript as OpenAI chat messages: role, content, an assistant's thinking as
    ``reasoning_content`` (read from ``reasoning`` or ``reasoning_content``), tool calls,
    tool call ids."""
    out: list[dict[str, Any]] = []
    for message in messages:
        role = message.get("role")
        role = "system" if role == "developer" else role
        if role not in ("system", "user", "assistant", "tool"):
            continue
        item: dict[str, Any] = {"role": role, "content": _content(message.get("content"))}
        if role == "assistant" and isinstance(reasoning := message_reasoning(message)[1], str):
            item["reasoning_content"] = reasoning
        if role == "assistant" and (calls := _tool_calls(message)):
            item["tool_calls"] = calls
        if role == "tool":
            item["tool_call_id"] = str(message.get("tool_call_id") or "")
            if isinstance(message.get("name"), str):
                item["name"] = message["name"]
        if item["content"] is None and role != "assistant":
            item["content"] = ""
        out.append(item)
    return out


def tools_of_calls(calls: list[ModelCall] | None) -> list[dict[str, Any]] | None:
    """The function tools of a rollout's last chat request that had some (None: none)."""
    for call in reversed(calls or []):
        request = call.request if isinstance(call.request, Mapping) else {}
        tools = request.get("tools")
        if call.protocol == "chat" and isinstance(tools, list) and tools:
            return [t for t in tools if isinstance(t, dict)]
    return None


def _text(content: Any) -> str:
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, Mapping))
    return "" if content is None else str(content)


def sharegpt_record(
    messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None
) -> dict[str, Any]:
    """OpenAI chat messages as one ShareGPT record (LLaMA-Factory's roles)."""
    system = "\n".join(_text(m["content"]) for m in messages if m["role"] == "system")
    turns: list[dict[str, Any]] = []
    for m in messages:
        role, text = m["role"], _text(m["content"])
        if role == "user":
            turns.append({"from": "human", "value": text})
        elif role == "tool":
            turns.append({"from": "observation", "value": text})
        elif role == "assistant" and m.get("tool_calls"):
            calls = [
                {"name": c["function"]["name"], "arguments": _arguments(c)} for c in m["tool_calls"]
            ]
            value = json.dumps(calls[0] if len(calls) == 1 else calls, ensure_ascii=False)
            turn = {"from": "function_call", "value": value}
            if text:
                turn["thought"] = text
            turns.append(turn)
        elif role == "assistant":
            turns.append({"from": "gpt", "value": text})
    return {
        "conversations": turns,
        "system": system or None,
        "tools": json.dumps(tools, ensure_ascii=False) if tools else None,
    }


def _arguments(call: Mapping[str, Any]) -> Any:
    text = call["function"]["arguments"]
    try:
        return json.loads(text)
    except ValueError:
        return text


def _lines(
    records: Iterable[TrainingRecord],
    tools_of: Callable[[str], list[dict[str, Any]] | None],
    sharegpt: bool,
) -> Iterator[dict[str, Any]]:
    seen: set[str] = set()
    for record in records:
        if record.rollout_id in seen or record.passed is not True:
            continue
        seen.add(record.rollout_id)
        messages = chat_messages([*record.prompt, *record.completion])
        tools = tools_of(record.rollout_id)
        ident = {
            "rollout_id": record.rollout_id,
            "task_id": record.task_id,
            "reward": record.reward,
        }
        if sharegpt:
            yield sharegpt_record(messages, tools) | ident
        else:
            yield {"messages": messages, **({"tools": tools} if tools else {}), **ident}


def write_sft(
    records: Iterable[TrainingRecord],
    out: str | os.PathLike[str],
    tools_of: Callable[[str], list[dict[str, Any]] | None],
    *,
    sharegpt: bool = False,
) -> int:
    """Write the transcripts of the rollouts that passed; returns how many. ``tools_of``
    gives a rollout's :func:`tools_of_calls` (None: none)."""
    return write_lines(_lines(records, tools_of, sharegpt), out)
