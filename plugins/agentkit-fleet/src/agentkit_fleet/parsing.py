"""Reading the policy's action text: tool calls and the done signal.

The rules are those of Fleet's SkyRL environment (``parse_tool_call``; see
the parity table in ``docs/fleet.md``):

- the first ``<tool_call>...</tool_call>`` block is read, then, if it gave no
  call, the first ``<function_call>...</function_call>`` block; tags are
  lower case and need their closing tag;
- the block's JSON names the tool with ``name`` (or, when that is missing or
  empty, ``tool``) and passes ``arguments`` (or, when that is missing or
  empty, ``params``); a block whose JSON does not parse, or that names no
  tool, is no call;
- ``<done>`` or ``[done]`` (any case) anywhere ends the episode; a call in the
  same response still runs first.

One difference: a block whose JSON parses to something other than an object
(a list, a string, a number) makes Fleet's environment raise
``AttributeError``; here it is a clear error the policy sees as an
observation (:attr:`ParsedAction.error`).
"""

from __future__ import annotations

import json
import re
from typing import Any

import attrs

from agentkit.validation import loads_bounded

__all__ = ["ParsedAction", "ToolCall", "has_done_signal", "parse_action"]

_TAGS = ("tool_call", "function_call")


@attrs.frozen
class ToolCall:
    """A tool call the policy asked for, as written (``name`` and ``arguments`` unchecked)."""

    name: Any
    arguments: Any

    def to_json(self) -> dict[str, Any]:
        """``{"name": ..., "arguments": ...}``, the values as the policy wrote them."""
        return {"name": self.name, "arguments": self.arguments}


@attrs.frozen
class ParsedAction:
    """The call (if any), an error (a call block that is not a JSON object), the done signal.

    ``malformed`` is true when a call block was present but gave no call
    (JSON that does not parse, no tool name, not an object): Fleet's
    environment treats such a response like one without a call; the episode
    counts it in ``parse_errors``.
    """

    tool_call: ToolCall | None
    error: str | None
    done_signal: bool
    malformed: bool = False

    @property
    def agent_done(self) -> bool:
        """The policy says it is done (a call in the same response still runs first)."""
        return self.done_signal


def has_done_signal(text: str) -> bool:
    """``<done>`` or ``[done]`` anywhere, any case."""
    low = text.lower()
    return "<done>" in low or "[done]" in low


def parse_action(text: str) -> ParsedAction:
    """Parse one policy response."""
    done = has_done_signal(text)
    malformed = False
    for tag in _TAGS:
        match = re.search(rf"<{tag}>(.*?)</{tag}>", text, re.DOTALL)
        if match is None:
            continue
        try:  # nested too deep: refused with our message (Fleet's parser raises RecursionError)
            data = loads_bounded(match.group(1).strip())
        except json.JSONDecodeError:
            malformed = True
            continue
        except ValueError as exc:  # Fleet's parser raises here
            return ParsedAction(None, f"the tool call's JSON cannot be read: {exc}", done, True)
        if not isinstance(data, dict):  # Fleet's parser raises AttributeError here
            return ParsedAction(
                None,
                f"a tool call must be a JSON object with a name, got a JSON {_json_type(data)}",
                done,
                True,
            )
        name = data.get("name") or data.get("tool")
        arguments = data.get("arguments") or data.get("params", {})
        if name:
            return ParsedAction(ToolCall(name, arguments), None, done)
        malformed = True
    return ParsedAction(None, None, done, malformed)


def _json_type(value: Any) -> str:
    if isinstance(value, list):
        return "array"
    if isinstance(value, str):
        return "string"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    return "null"
