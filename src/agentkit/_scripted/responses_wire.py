"""The OpenAI Responses API: an :class:`Answer` as a ``response`` or as its stream events.

Output items in order: a ``reasoning`` item (the reply's reasoning, as a
summary), a ``message`` with one ``output_text`` part, then one
``function_call`` per tool call. Streamed, the events are those OpenAI
documents, each with its ``sequence_number``: ``response.created``,
``response.in_progress``, per item ``response.output_item.added``, its
deltas (``response.reasoning_summary_*``, ``response.content_part.added``,
``response.output_text.delta``/``.done``, ``response.content_part.done``,
``response.function_call_arguments.delta``/``.done``) and
``response.output_item.done``, then ``response.completed`` (or
``response.incomplete`` when the reply's finish reason is ``length``) with
the whole response and its usage.

With vLLM's ``enable_response_messages: true`` (or the reply's ``token_ids``)
the response also carries ``input_messages`` and ``output_messages``, as vLLM
returns them for models without harmony: one ``{"type":
"raw_message_tokens", "message", "tokens"}`` each, the prompt's text and
token ids, and the completion's (reasoning, then content, then each tool
call's arguments). Streamed, ``response.completed`` carries them.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import Any

from agentkit._scripted.answer import (
    Answer,
    completion_texts,
    completion_token_ids,
    prompt_segments,
    prompt_token_ids,
    split,
    sse,
)
from agentkit._scripted.script import Reply, RequestView

__all__ = ["events", "render"]


def _usage(answer: Answer) -> dict[str, Any]:
    return {
        "input_tokens": answer.prompt_tokens,
        "input_tokens_details": {
            "cached_tokens": answer.cached_tokens,
            "cache_write_tokens": answer.cache_creation_tokens,
        },
        "output_tokens": answer.completion_tokens,
        "output_tokens_details": {"reasoning_tokens": answer.reasoning_tokens},
        "total_tokens": answer.prompt_tokens + answer.completion_tokens,
    }


def _status(answer: Answer) -> str:
    return "incomplete" if answer.finish_reason == "length" else "completed"


def _items(answer: Answer) -> list[dict[str, Any]]:
    """The finished output items."""
    items: list[dict[str, Any]] = []
    if answer.reasoning is not None:
        items.append(
            {
                "type": "reasoning",
                "id": f"rs_{answer.tag}",
                "summary": [{"type": "summary_text", "text": answer.reasoning}],
            }
        )
    if answer.content or not answer.calls:
        items.append(
            {
                "type": "message",
                "id": f"msg_{answer.tag}",
                "status": "completed",
                "role": "assistant",
                "content": [
                    {
                        "type": "output_text",
                        "text": answer.content or "",
                        "annotations": [],
                        "logprobs": [],
                    }
                ],
            }
        )
    for i, call in enumerate(answer.calls):
        items.append(
            {
                "type": "function_call",
                "id": f"fc_{answer.tag}_{i}",
                "call_id": call.id,
                "name": call.name,
                "arguments": call.arguments,
                "status": "completed",
            }
        )
    return items


def _response(
    answer: Answer, body: Mapping[str, Any], status: str, output: list[dict[str, Any]]
) -> dict[str, Any]:
    tools = body.get("tools")
    out: dict[str, Any] = {
        "id": f"resp_{answer.tag}",
        "object": "response",
        "created_at": answer.created,
        "status": status,
        "error": None,
        "incomplete_details": ({"reason": "max_output_tokens"} if status == "incomplete" else None),
        "instructions": body.get("instructions"),
        "metadata": {},
        "model": answer.model,
        "output": output,
        "parallel_tool_calls": bool(body.get("parallel_tool_calls", True)),
        "temperature": body.get("temperature"),
        "tool_choice": body.get("tool_choice", "auto"),
        "tools": tools if isinstance(tools, list) else [],
        "top_p": body.get("top_p"),
        "usage": None,
    }
    if status != "in_progress":
        out["usage"] = _usage(answer)
    return out


def sends_token_ids(reply: Reply, body: Mapping[str, Any]) -> bool:
    """Whether the response carries vLLM's ``input_messages``/``output_messages``."""
    return reply.token_ids or body.get("enable_response_messages") is True


def _raw_messages(
    answer: Answer, reply: Reply, body: Mapping[str, Any], view: RequestView
) -> dict[str, Any]:
    """vLLM's ``input_messages`` and ``output_messages`` (``raw_message_tokens``) when
    the request asks with ``enable_response_messages`` (or the reply's ``token_ids``)."""
    if not sends_token_ids(reply, body):
        return {}
    as_json = reply.tool_calls_in_prompt == "json"
    return {
        "input_messages": [
            {
                "type": "raw_message_tokens",
                "message": "".join(prompt_segments(view, tool_calls_as_json=as_json)),
                "tokens": prompt_token_ids(view, tool_calls_as_json=as_json),
            }
        ],
        "output_messages": [
            {
                "type": "raw_message_tokens",
                "message": "".join(completion_texts(answer)),
                "tokens": completion_token_ids(answer),
            }
        ],
    }


def render(answer: Answer, reply: Reply, body: Mapping[str, Any], view: RequestView) -> Any:
    """The non-streamed ``response`` body."""
    out = _response(answer, body, _status(answer), _items(answer))
    out.update(_raw_messages(answer, reply, body, view))
    return out


def events(answer: Answer, reply: Reply, body: Mapping[str, Any], view: RequestView) -> list[bytes]:
    """The server-sent events of the streamed response, ``response.completed`` last."""
    numbers = itertools.count()
    out: list[bytes] = []
    size = answer.chunk_size

    def emit(kind: str, **fields: Any) -> None:
        out.append(sse({"type": kind, "sequence_number": next(numbers), **fields}, kind))

    started = _response(answer, body, "in_progress", [])
    emit("response.created", response=started)
    emit("response.in_progress", response=started)
    items = _items(answer)
    for index, item in enumerate(items):
        where = {"item_id": item["id"], "output_index": index}
        if item["type"] == "reasoning":
            emit("response.output_item.added", output_index=index, item={**item, "summary": []})
            part = item["summary"][0]
            emit(
                "response.reasoning_summary_part.added",
                **where,
                summary_index=0,
                part={"type": "summary_text", "text": ""},
            )
            for piece in split(part["text"], size):
                emit("response.reasoning_summary_text.delta", **where, summary_index=0, delta=piece)
            emit(
                "response.reasoning_summary_text.done", **where, summary_index=0, text=part["text"]
            )
            emit("response.reasoning_summary_part.done", **where, summary_index=0, part=part)
        elif item["type"] == "message":
            added = {**item, "status": "in_progress", "content": []}
            emit("response.output_item.added", output_index=index, item=added)
            part = item["content"][0]
            empty = {**part, "text": ""}
            emit("response.content_part.added", **where, content_index=0, part=empty)
            for piece in split(part["text"], size):
                emit(
                    "response.output_text.delta", **where, content_index=0, delta=piece, logprobs=[]
                )
            emit(
                "response.output_text.done",
                **where,
                content_index=0,
                text=part["text"],
                logprobs=[],
            )
            emit("response.content_part.done", **where, content_index=0, part=part)
        else:
            added = {**item, "status": "in_progress", "arguments": ""}
            emit("response.output_item.added", output_index=index, item=added)
            for piece in split(item["arguments"], size):
                emit("response.function_call_arguments.delta", **where, delta=piece)
            emit(
                "response.function_call_arguments.done",
                **where,
                name=item["name"],
                arguments=item["arguments"],
            )
        emit("response.output_item.done", output_index=index, item=item)
    status = _status(answer)
    final = "response.completed" if status == "completed" else "response.incomplete"
    done = _response(answer, body, status, items)
    done.update(_raw_messages(answer, reply, body, view))
    emit(final, response=done)
    return out
