"""The text an agent program is asked to do."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agentkit._task import Task

__all__ = ["prompt_text"]


def prompt_text(task: Task) -> str:
    """Text input as is; chat messages' system and user text, separated by blank
    lines; structured input as indented JSON."""
    value = task.input
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        parts: list[str] = []
        for message in value:
            content = message.get("content")
            if isinstance(content, list):
                content = "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
            if isinstance(content, str) and content and message.get("role") in ("system", "user"):
                parts.append(content)
        return "\n\n".join(parts)
    return json.dumps(value, ensure_ascii=False, indent=2)
