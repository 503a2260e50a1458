"""A reasoning model's thinking in a chat completion, under either of its two names.

vLLM's reasoning parsers put the thinking beside the answer's text: as
``reasoning`` in current vLLM (the assistant ``message`` of a completion and
each ``delta`` of a stream), as ``reasoning_content`` before (the name vLLM
dropped early in 2026, which SGLang and DeepSeek's API still send). Readers
take ``reasoning`` first, then ``reasoning_content``: a server that sends both
(vLLM while it moved from one to the other) sends the same text twice.

A request's earlier assistant turns go the other way: current vLLM hands a
chat template the thinking of a turn it finds under ``reasoning`` only, other
servers (and the templates themselves) read ``reasoning_content``; a turn
that must show its thinking carries both (:func:`with_reasoning`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["REASONING_FIELDS", "message_reasoning", "with_reasoning"]

#: The names of the reasoning field, in the order they are read: current vLLM's first.
REASONING_FIELDS: tuple[str, ...] = ("reasoning", "reasoning_content")


def message_reasoning(message: Mapping[str, Any]) -> tuple[str | None, Any]:
    """``(name, value)`` of the reasoning a chat message or stream delta carries: the
    first of :data:`REASONING_FIELDS` it holds a non-null value under (``(None, None)``
    when neither)."""
    for name in REASONING_FIELDS:
        value = message.get(name)
        if value is not None:
            return name, value
    return None, None


def with_reasoning(message: dict[str, Any], text: str) -> dict[str, Any]:
    """``message`` (an assistant turn of a request), its thinking ``text`` set under
    every name of :data:`REASONING_FIELDS`; returns the same dict."""
    for name in REASONING_FIELDS:
        message[name] = text
    return message
