"""Reading the policy's tool calls: from its text, or from a message's native tool calls.

Both formats give the same thing, a list of :class:`CallAttempt` (one per
call the policy wrote, in order), each either a valid :class:`ToolCall` or
the reason it is not one, which the policy sees as that call's result.

**Text** (:func:`parse_text`): every ``<tool_call>...</tool_call>`` block, in
order, holds one JSON object ``{"name": ..., "arguments": {...}}``. A last
block without its closing tag runs to the end of the text (a sampler that
stops at ``</tool_call>`` leaves it out). A JSON code fence around the
object is allowed. ``arguments`` may be left out (``{}``) or be a JSON string
that holds an object (as native calls carry them).

**Native** (:func:`parse_message`): the ``tool_calls`` of an assistant
message in OpenAI's format; ``function.arguments`` is JSON text.

A valid call names ``shell`` with a non-empty string ``command`` (and,
optionally, a positive number ``timeout``) or ``submit``; other argument
keys are ignored. Anything else (JSON that does not parse, nesting deeper
than :data:`~agentkit.validation.MAX_NESTING_DEPTH`, no name, another tool,
a missing command) is an error the episode counts in ``parse_errors``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

import attrs

from agentkit.validation import NestingError, json_type, loads_bounded
from agentkit_terminal.prompt import SHELL, SUBMIT, TOOL_NAMES

__all__ = ["CallAttempt", "ToolCall", "parse_message", "parse_text"]

_BLOCK = re.compile(r"<tool_call>(.*?)(?:</tool_call>|\Z)", re.DOTALL)
_FENCE = re.compile(r"\A```(?:json)?\s*(.*?)\s*```\Z", re.DOTALL)


@attrs.frozen
class ToolCall:
    """A valid call: ``shell`` (``command``, ``timeout`` or None) or ``submit``.

    ``id`` is the native call's id (None for a text call).
    """

    name: str
    command: str | None = None
    timeout: float | None = None
    id: str | None = None

    def to_json(self) -> dict[str, Any]:
        """``{"name", "arguments"}`` as the episode records it in events and metadata."""
        arguments: dict[str, Any] = {}
        if self.command is not None:
            arguments["command"] = self.command
        if self.timeout is not None:
            arguments["timeout"] = self.timeout
        return {"name": self.name, "arguments": arguments}


@attrs.frozen
class CallAttempt:
    """One call the policy wrote: the valid ``call``, or the ``error`` saying why it is not.

    ``id`` is the native call's id (None for a text call); ``raw`` is the
    call as written (for the record).
    """

    call: ToolCall | None
    error: str | None = None
    id: str | None = None
    raw: Any = None


def parse_text(text: str) -> list[CallAttempt]:
    """Every ``<tool_call>`` block of ``text``, in order (empty: the reply has no call)."""
    return [_from_block(m.group(1)) for m in _BLOCK.finditer(text)]


def parse_message(message: Mapping[str, Any]) -> list[CallAttempt]:
    """The native ``tool_calls`` of an assistant message, in order (empty: none)."""
    calls = message.get("tool_calls") or []
    if not isinstance(calls, list):
        return [CallAttempt(None, error="the message's tool_calls is not a list")]
    out: list[CallAttempt] = []
    for index, call in enumerate(calls):
        call_id = call.get("id") if isinstance(call, Mapping) else None
        call_id = call_id if isinstance(call_id, str) and call_id else None
        function = call.get("function") if isinstance(call, Mapping) else None
        if not isinstance(function, Mapping):
            out.append(CallAttempt(None, f"tool call {index + 1} has no function", call_id, call))
            continue
        attempt = _checked(function.get("name"), function.get("arguments"), raw=dict(function))
        out.append(attrs.evolve(attempt, id=call_id, call=_with_id(attempt.call, call_id)))
    return out


def _with_id(call: ToolCall | None, call_id: str | None) -> ToolCall | None:
    return None if call is None else attrs.evolve(call, id=call_id)


def _from_block(body: str) -> CallAttempt:
    text = body.strip()
    fenced = _FENCE.match(text)
    if fenced:
        text = fenced.group(1)
    if not text:
        return CallAttempt(None, "the <tool_call> block is empty", raw=body)
    try:
        value = loads_bounded(text)
    except NestingError as exc:
        return CallAttempt(None, f"the <tool_call> block cannot be read: {exc}", raw=body)
    except ValueError as exc:
        reason = exc.msg if isinstance(exc, json.JSONDecodeError) else str(exc)
        return CallAttempt(
            None,
            f"the <tool_call> block is not valid JSON ({reason}); write "
            '<tool_call>{"name": "shell", "arguments": {"command": "..."}}</tool_call>',
            raw=body,
        )
    if not isinstance(value, dict):
        return CallAttempt(
            None,
            f"the <tool_call> block holds {json_type(value)}, expected a JSON object "
            'with "name" and "arguments"',
            raw=body,
        )
    return _checked(value.get("name"), value.get("arguments"), raw=value)


def _checked(name: Any, arguments: Any, *, raw: Any) -> CallAttempt:
    """A call named ``name`` with ``arguments`` (an object, JSON text of one, or absent)."""
    if not isinstance(name, str) or not name:
        return CallAttempt(None, 'the tool call has no "name"', raw=raw)
    if name not in TOOL_NAMES:
        return CallAttempt(
            None, f"unknown tool {name!r}; the tools are {SHELL} and {SUBMIT}", raw=raw
        )
    args = _arguments(arguments)
    if isinstance(args, str):
        return CallAttempt(None, f"the arguments of {name}: {args}", raw=raw)
    if name == SUBMIT:
        return CallAttempt(ToolCall(SUBMIT), raw=raw)
    command = args.get("command")
    if not isinstance(command, str) or not command.strip():
        return CallAttempt(
            None,
            'shell needs "command", a non-empty string: '
            '{"name": "shell", "arguments": {"command": "ls -la"}}',
            raw=raw,
        )
    timeout = args.get("timeout")
    if timeout is not None and (
        isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0
    ):
        return CallAttempt(
            None, f'shell\'s "timeout" must be a positive number of seconds, got {timeout!r}',
            raw=raw,
        )  # fmt: skip
    return CallAttempt(
        ToolCall(SHELL, command=command, timeout=None if timeout is None else float(timeout)),
        raw=raw,
    )


def _arguments(value: Any) -> dict[str, Any] | str:
    """The arguments object, or why there is none."""
    if value is None or value == "":
        return {}
    if isinstance(value, str):
        try:
            value = loads_bounded(value)
        except NestingError as exc:
            return str(exc)
        except ValueError:
            return "not valid JSON"
    if not isinstance(value, dict):
        return f"expected a JSON object, got {json_type(value)}"
    return value
