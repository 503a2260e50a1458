"""The tool definitions and the system prompt, as Fleet's SkyRL environment builds them.

The tools are the MCP server's, in OpenAI's function format, with their input
schemas simplified the way OpenEnv's Fleet client does it before SkyRL shows
them to the policy: ``title`` and ``default`` dropped, an ``anyOf`` replaced by
its first non-null member, ``prefixItems`` turned into ``items``, and only the
top-level ``properties`` and ``required`` kept (``required`` always present).
The system prompt is the SkyRL environment's text, word for word, with today's
date from the clock. See the parity table in ``docs/fleet.md``.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = [
    "FORMAT_REMINDER",
    "build_system_prompt",
    "initial_messages",
    "normalize_schema",
    "to_openai_tools",
]

#: The observation when a response has neither a tool call nor the done signal.
FORMAT_REMINDER = (
    'No tool call found. Use <tool_call>{"name": "...", "arguments": {...}}</tool_call> format.'
)


def normalize_schema(schema: Any) -> Any:
    """One property's JSON schema as OpenEnv's Fleet client simplifies it.

    ``anyOf`` becomes its first member whose ``type`` is not ``null`` (merged
    over the schema); ``title``, ``default`` and a remaining ``anyOf`` are
    dropped; ``prefixItems`` becomes ``items`` (its first entry, or
    ``{"type": "string"}``); ``properties`` and ``items`` are simplified
    recursively; everything else is kept as it is.
    """
    if not isinstance(schema, dict):
        return schema
    if "anyOf" in schema and isinstance(schema["anyOf"], list):
        members = [
            s for s in schema["anyOf"] if not (isinstance(s, dict) and s.get("type") == "null")
        ]
        if members and isinstance(members[0], dict):
            schema = {**schema, **members[0]}
            del schema["anyOf"]
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key in ("title", "default", "anyOf"):
            continue
        if key == "prefixItems":
            out["items"] = normalize_schema(value[0]) if value else {"type": "string"}
        elif key == "properties" and isinstance(value, dict):
            out[key] = {name: normalize_schema(sub) for name, sub in value.items()}
        elif key == "items" and isinstance(value, dict):
            out[key] = normalize_schema(value)
        else:
            out[key] = value
    return out


def to_openai_tools(
    mcp_tools: Sequence[Mapping[str, Any]], modality: str = "tool_use"
) -> list[dict[str, Any]]:
    """MCP tools (wire JSON) as OpenAI function definitions; tool_use tasks drop ``computer``.

    ``parameters`` is ``{"type": "object", "properties": ..., "required": ...}``
    built from the tool's ``inputSchema`` (other top-level schema keys are
    not shown); ``description`` is the tool's, ``null`` when it has none.
    """
    out = []
    for tool in mcp_tools:
        name = tool.get("name")
        if modality == "tool_use" and name == "computer":
            continue
        schema = tool.get("inputSchema") or {}
        properties = schema.get("properties", {}) if isinstance(schema, Mapping) else {}
        required = schema.get("required", []) if isinstance(schema, Mapping) else []
        out.append(
            {
                "type": "function",
                "function": {
                    "name": name,
                    "description": tool.get("description"),
                    "parameters": {
                        "type": "object",
                        "properties": {
                            key: normalize_schema(value)
                            for key, value in (properties or {}).items()
                        },
                        "required": required,
                    },
                },
            }
        )
    return out


def build_system_prompt(
    tools: Sequence[Mapping[str, Any]], *, now: dt.datetime | None = None
) -> str:
    """The system prompt: role, today's date, the tools as JSON, call format, errors, ending.

    ``now`` defaults to the local clock (``datetime.now()``), as in Fleet's
    SkyRL environment.
    """
    now = now or dt.datetime.now()
    tools_json = json.dumps(list(tools), indent=2)
    return f"""You are a helpful agent. Complete the task by calling tools.

## Current Date
Today's date is {now.strftime("%Y-%m-%d")}. When dates are mentioned without a year, assume the current year ({now.year}) or a future date.

## Available Tools
{tools_json}

## Tool Call Format
<tool_call>{{"name": "tool_name", "arguments": {{"param": "value"}}}}</tool_call>

## Error Handling
If a tool call returns an error:
- Read the error message carefully
- Do NOT repeat the same call with identical arguments
- Change your approach: use different parameters, try a different tool, or break the task into smaller steps

## Response Format
EVERY response MUST end with exactly ONE of:
1. A tool call: <tool_call>...</tool_call> - to perform an action
2. Done signal: <done> - ONLY when the task is fully complete

NEVER respond with just a message. NEVER say "feel free to ask" or offer further help.
If the task is complete, say <done>. Otherwise, make a tool call."""  # noqa: E501


def initial_messages(
    prompt: str, tools: Sequence[Mapping[str, Any]], *, now: dt.datetime | None = None
) -> list[dict[str, Any]]:
    """``[system, user]``: the system prompt and the task prompt."""
    return [
        {"role": "system", "content": build_system_prompt(tools, now=now)},
        {"role": "user", "content": prompt},
    ]
