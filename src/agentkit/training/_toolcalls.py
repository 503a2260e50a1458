"""The tool calls of an OpenAI chat message, as the exports read them."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

__all__ = ["tool_calls_of"]


def tool_calls_of(message: Mapping[str, Any], *, ensure_ascii: bool) -> list[tuple[str, str, str]]:
    """``(id, name, arguments)`` of each well-formed entry of ``message["tool_calls"]``:
    an id made from its position when it has none, arguments as the JSON text they
    were (an object given instead is dumped, ``ensure_ascii`` as ``json.dumps``)."""
    out = []
    for i, call in enumerate(message.get("tool_calls") or []):
        if not isinstance(call, Mapping):
            continue
        fn = call.get("function")
        fn = fn if isinstance(fn, Mapping) else {}
        arguments = fn.get("arguments")
        if not isinstance(arguments, str):
            arguments = json.dumps(arguments, ensure_ascii=ensure_ascii)
        out.append((str(call.get("id") or f"call_{i}"), str(fn.get("name") or ""), arguments))
    return out
