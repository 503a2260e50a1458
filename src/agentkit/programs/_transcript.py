"""One model call of an agent program as an OpenAI-style transcript message."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["assistant_message"]


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
