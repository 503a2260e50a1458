"""Anthropic Messages: an :class:`Answer` as a ``message`` or as its stream events.

Content blocks in order: ``thinking`` (the reply's reasoning), ``text``,
then one ``tool_use`` block per tool call. Streamed, the events are those
Anthropic documents: ``message_start``, then per block
``content_block_start``, ``content_block_delta``\\ s (``thinking_delta`` and
``signature_delta``, ``text_delta``, ``input_json_delta``) and
``content_block_stop``, then ``message_delta`` (stop reason and usage) and
``message_stop``; a ``ping`` follows ``message_start``.

Usage: ``input_tokens`` counts the prompt tokens that were neither read from
nor written to the cache, as Anthropic counts them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agentkit._scripted.answer import Answer, split, sse
from agentkit._scripted.script import Reply, RequestView

__all__ = ["error_body", "events", "render"]

#: Chat completions' finish reasons in Anthropic's words; others pass through.
_STOP_REASONS = {"stop": "end_turn", "tool_calls": "tool_use", "length": "max_tokens"}
_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    405: "invalid_request_error",
    413: "request_too_large",
    429: "rate_limit_error",
    529: "overloaded_error",
}


def _usage(answer: Answer) -> dict[str, Any]:
    uncached = answer.prompt_tokens - answer.cached_tokens - answer.cache_creation_tokens
    return {
        "input_tokens": max(0, uncached),
        "cache_creation_input_tokens": answer.cache_creation_tokens,
        "cache_read_input_tokens": answer.cached_tokens,
        "output_tokens": answer.completion_tokens,
    }


def _signature(answer: Answer) -> str:
    return f"scripted-signature-{answer.tag}"


def _blocks(answer: Answer) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    if answer.reasoning is not None:
        blocks.append(
            {"type": "thinking", "thinking": answer.reasoning, "signature": _signature(answer)}
        )
    if answer.content or not answer.calls:
        blocks.append({"type": "text", "text": answer.content or ""})
    for call in answer.calls:
        blocks.append(
            {"type": "tool_use", "id": call.id, "name": call.name, "input": call.input_object()}
        )
    return blocks


def _message(answer: Answer, content: list[dict[str, Any]], stop: str | None) -> dict[str, Any]:
    return {
        "id": f"msg_{answer.tag}",
        "type": "message",
        "role": "assistant",
        "model": answer.model,
        "content": content,
        "stop_reason": stop,
        "stop_sequence": None,
    }


def render(answer: Answer, reply: Reply, body: Mapping[str, Any], view: RequestView) -> Any:
    """The non-streamed ``message`` body."""
    stop = _STOP_REASONS.get(answer.finish_reason, answer.finish_reason)
    return {**_message(answer, _blocks(answer), stop), "usage": _usage(answer)}


def events(answer: Answer, reply: Reply, body: Mapping[str, Any], view: RequestView) -> list[bytes]:
    """The server-sent events of the streamed message, ``message_stop`` last."""
    usage = _usage(answer)
    size = answer.chunk_size
    start_usage = {**usage, "output_tokens": 1}
    out = [
        sse(
            {
                "type": "message_start",
                "message": {**_message(answer, [], None), "usage": start_usage},
            },
            "message_start",
        ),
        sse({"type": "ping"}, "ping"),
    ]

    def block(index: int, start: dict[str, Any], deltas: list[dict[str, Any]]) -> None:
        out.append(
            sse(
                {"type": "content_block_start", "index": index, "content_block": start},
                "content_block_start",
            )
        )
        for delta in deltas:
            out.append(
                sse(
                    {"type": "content_block_delta", "index": index, "delta": delta},
                    "content_block_delta",
                )
            )
        out.append(sse({"type": "content_block_stop", "index": index}, "content_block_stop"))

    calls = iter(answer.calls)
    for index, whole in enumerate(_blocks(answer)):
        kind = whole["type"]
        if kind == "thinking":
            deltas = [
                {"type": "thinking_delta", "thinking": t} for t in split(whole["thinking"], size)
            ]
            deltas.append({"type": "signature_delta", "signature": whole["signature"]})
            block(index, {"type": "thinking", "thinking": "", "signature": ""}, deltas)
        elif kind == "text":
            deltas = [{"type": "text_delta", "text": t} for t in split(whole["text"], size)]
            block(index, {"type": "text", "text": ""}, deltas)
        else:
            call = next(calls)
            deltas = [
                {"type": "input_json_delta", "partial_json": p} for p in split(call.arguments, size)
            ]
            start = {"type": "tool_use", "id": call.id, "name": call.name, "input": {}}
            block(index, start, deltas)
    stop = _STOP_REASONS.get(answer.finish_reason, answer.finish_reason)
    out.append(
        sse(
            {
                "type": "message_delta",
                "delta": {"stop_reason": stop, "stop_sequence": None},
                "usage": usage,
            },
            "message_delta",
        )
    )
    out.append(sse({"type": "message_stop"}, "message_stop"))
    return out


def error_body(status: int, message: str) -> dict[str, Any]:
    """An Anthropic error body."""
    kind = _ERROR_TYPES.get(status, "api_error")
    return {"type": "error", "error": {"type": kind, "message": message}}
