"""An agent program's model calls as an OpenAI-style transcript."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import attrs

__all__ = ["ModelCall", "assistant_message", "final_text", "transcript"]


def assistant_message(
    texts: Sequence[str],
    reasoning: Sequence[str] = (),
    tool_calls: Sequence[dict[str, Any]] = (),
    *,
    joiner: str = "",
) -> dict[str, Any]:
    """The assistant message of one model call: its text parts joined by ``joiner``
    (``content``; None when it only called tools, else at least ``""``), its
    reasoning as ``reasoning_content`` and its ``tool_calls``, each only when present."""
    message: dict[str, Any] = {
        "role": "assistant",
        "content": joiner.join(texts) if texts else None,
    }
    if reasoning:
        message["reasoning_content"] = joiner.join(reasoning)
    if tool_calls:
        message["tool_calls"] = list(tool_calls)
    elif message["content"] is None:
        message["content"] = ""
    return message


@attrs.define
class ModelCall:
    """One model call of an agent program, assembled from the program's output as
    its parts arrive (a plugin may subclass it to keep more, such as usage).

    ``index`` counts the calls from 0 in the order they began; ``message_id``
    is the program's name for the call's message. ``texts``, ``reasoning`` and
    ``tool_calls`` (OpenAI ``tool_calls`` entries) make its assistant message,
    ``tool_messages`` (``role: tool``) the answers to its tool calls.
    """

    index: int
    message_id: str
    texts: list[str] = attrs.field(factory=list)
    reasoning: list[str] = attrs.field(factory=list)
    tool_calls: list[dict[str, Any]] = attrs.field(factory=list)
    tool_messages: list[dict[str, Any]] = attrs.field(factory=list)


def transcript(prompt: str, calls: Iterable[ModelCall]) -> list[dict[str, Any]]:
    """The transcript of a run: the prompt as the user message, then each call that
    produced anything (text, reasoning or tool calls) as an
    :func:`assistant_message` followed by its tool results."""
    out: list[dict[str, Any]] = [{"role": "user", "content": prompt}]
    for call in calls:
        if not (call.texts or call.tool_calls or call.reasoning):
            continue
        out.append(assistant_message(call.texts, call.reasoning, call.tool_calls))
        out.extend(call.tool_messages)
    return out


def final_text(calls: Sequence[ModelCall]) -> str | None:
    """The text of the last call that produced text (its parts joined), else None."""
    for call in reversed(calls):
        if call.texts:
            return "".join(call.texts)
    return None
