"""Reading codex's session file: the transcript, model calls and their usage.

codex records every session in ``$CODEX_HOME/sessions/YYYY/MM/DD/
rollout-<time>-<thread id>.jsonl``, one JSON object per line (``timestamp``,
``type``, ``payload``). The lines used here:

- ``session_meta``: ``payload.id`` (the thread id) and ``cli_version``;
- ``response_item``: what the model said and the tools answered, as Responses
  API items: ``message`` (``role``, ``content`` parts with ``text``),
  ``reasoning`` (``summary`` and ``content`` parts), ``function_call``
  (``name``, ``arguments`` as JSON text, ``call_id``), ``custom_tool_call``
  (``name``, ``input``), ``local_shell_call`` (``action``),
  ``function_call_output`` / ``custom_tool_call_output`` (``call_id``,
  ``output``);
- ``token_usage_record``: one per finished model call (``response_id``,
  ``usage``: ``input_tokens`` with ``cached_input_tokens`` among them,
  ``output_tokens`` with ``reasoning_output_tokens`` among them). The model
  items before it belong to that call.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any

import attrs

from agentkit import Usage
from agentkit.programs import assistant_message, loads_bounded
from agentkit.programs import json_int as _int
from agentkit.programs import json_object as _obj

__all__ = ["Rollout", "RolloutCall"]

_CALL_TYPES = ("function_call", "custom_tool_call", "local_shell_call")
_OUTPUT_TYPES = ("function_call_output", "custom_tool_call_output")


def _texts(parts: Any) -> list[str]:
    return [
        str(p["text"])
        for p in parts or []
        if isinstance(p, dict) and isinstance(p.get("text"), str)
    ]


def _output_text(output: Any) -> str:
    """A tool output as the model saw it: text, or content items' text, or JSON."""
    if isinstance(output, str):
        return output
    if isinstance(output, list):
        return "".join(_texts(output))
    if isinstance(output, dict):
        for key in ("content", "output", "body"):
            if key in output:
                return _output_text(output[key])
    return json.dumps(output, ensure_ascii=False)


@attrs.define
class RolloutCall:
    """One model call being assembled: its text, reasoning, tool calls, usage."""

    texts: list[str] = attrs.field(factory=list)
    reasoning: list[str] = attrs.field(factory=list)
    tool_calls: list[dict[str, Any]] = attrs.field(factory=list)
    usage: Usage | None = None
    response_id: str | None = None


class Rollout:
    """Feed it the session file's lines; it keeps the model calls and tool outputs.

    ``redact`` is applied to every string of the transcript.
    """

    def __init__(self, redact: Callable[[str], str] | None = None) -> None:
        self.redact: Callable[[str], str] = redact or (lambda text: text)
        self.calls: list[RolloutCall] = []
        self.current = RolloutCall()
        self.outputs: dict[str, str] = {}
        self.session_id: str | None = None
        self.cli_version: str | None = None
        self.lines = 0

    def feed_text(self, text: str) -> None:
        """Feed a whole file's text."""
        for line in text.splitlines():
            self.feed(line)

    def feed(self, line: str) -> None:
        """Handle one line (anything that is not a JSON object is skipped)."""
        line = line.strip()
        if not line:
            return
        try:
            obj = loads_bounded(line)
        except ValueError:
            return
        if not isinstance(obj, dict):
            return
        self.lines += 1
        kind = obj.get("type")
        payload = _obj(obj.get("payload"))
        if kind == "session_meta":
            self.session_id = str(payload.get("id") or "") or self.session_id
            self.cli_version = str(payload.get("cli_version") or "") or self.cli_version
        elif kind == "response_item":
            self._item(payload)
        elif kind == "token_usage_record":
            usage = _obj(payload.get("usage"))
            self.current.usage = Usage(
                input_tokens=_int(usage.get("input_tokens")),
                output_tokens=_int(usage.get("output_tokens")),
                cached_tokens=_int(usage.get("cached_input_tokens")),
                reasoning_tokens=_int(usage.get("reasoning_output_tokens")),
                requests=1,
            )
            self.current.response_id = str(payload.get("response_id") or "") or None
            self.calls.append(self.current)
            self.current = RolloutCall()

    def _item(self, item: dict[str, Any]) -> None:
        kind = item.get("type")
        if kind == "message" and item.get("role") == "assistant":
            self.current.texts.append(self.redact("".join(_texts(item.get("content")))))
        elif kind == "reasoning":
            parts = _texts(item.get("summary")) + _texts(item.get("content"))
            if parts:
                self.current.reasoning.append(self.redact("\n\n".join(parts)))
        elif kind in _CALL_TYPES:
            call_id = str(item.get("call_id") or item.get("id") or f"call_{len(self.outputs)}")
            if kind == "function_call":
                name, arguments = str(item.get("name") or ""), item.get("arguments")
            elif kind == "custom_tool_call":
                name, arguments = str(item.get("name") or ""), item.get("input")
            else:
                name, arguments = "local_shell", json.dumps(item.get("action") or {})
            text = arguments if isinstance(arguments, str) else json.dumps(arguments or {})
            self.current.tool_calls.append(
                {
                    "id": call_id,
                    "type": "function",
                    "function": {"name": name, "arguments": self.redact(text)},
                }
            )
        elif kind in _OUTPUT_TYPES:
            call_id = str(item.get("call_id") or "")
            self.outputs[call_id] = self.redact(_output_text(item.get("output")))

    # -- what it says -------------------------------------------------------

    def all_calls(self) -> list[RolloutCall]:
        """The finished model calls, and an unfinished one when it said anything."""
        pending = self.current
        if pending.texts or pending.reasoning or pending.tool_calls:
            return [*self.calls, pending]
        return list(self.calls)

    def messages(self, prompt: str) -> list[dict[str, Any]]:
        """The OpenAI-style transcript: the prompt, then per model call an assistant
        message and a ``tool`` message per answered tool call."""
        out: list[dict[str, Any]] = [{"role": "user", "content": self.redact(prompt)}]
        for call in self.all_calls():
            out.append(
                assistant_message(call.texts, call.reasoning, call.tool_calls, joiner="\n\n")
            )
            for tool_call in call.tool_calls:
                if tool_call["id"] in self.outputs:
                    out.append(
                        {
                            "role": "tool",
                            "tool_call_id": tool_call["id"],
                            "content": self.outputs[tool_call["id"]],
                        }
                    )
        return out

    @property
    def output(self) -> str | None:
        """The text of the last model call that produced text."""
        for call in reversed(self.all_calls()):
            if call.texts:
                return "\n\n".join(call.texts)
        return None

    @property
    def usage(self) -> Usage:
        """Summed over the finished model calls."""
        return sum((c.usage for c in self.calls if c.usage is not None), Usage())

    @property
    def tool_calls(self) -> int:
        """Tool calls the model made."""
        return sum(len(c.tool_calls) for c in self.all_calls())

    def turn_limit_reached(self, max_turns: int) -> bool:
        """True once model call ``max_turns + 1`` is about to begin (or began).

        That is: more than ``max_turns`` calls finished, or ``max_turns`` did and
        every tool call of the last one has its output (codex then asks the
        model again at once).
        """
        if len(self.calls) > max_turns:
            return True
        if len(self.calls) < max_turns or not self.calls:
            return False
        last = self.calls[-1].tool_calls
        return bool(last) and all(c["id"] in self.outputs for c in last)

    def cut_after(self, max_turns: int) -> int:
        """Keep only the first ``max_turns`` model calls (and their tools' outputs);
        returns how many calls were dropped.

        codex is stopped as call ``max_turns + 1`` begins, but on a busy machine
        that call may be answered (and written to the session file) before the
        stop lands: the rollout ends at the limit all the same, so what came after
        is not part of it.
        """
        later = self.all_calls()[max_turns:]
        if not later:
            return 0
        for call in later:
            for tool_call in call.tool_calls:
                self.outputs.pop(tool_call["id"], None)
        self.calls = self.calls[:max_turns]
        self.current = RolloutCall()
        return len(later)

    @staticmethod
    def from_lines(lines: Iterable[str], redact: Callable[[str], str] | None = None) -> Rollout:
        """A rollout fed with ``lines``."""
        rollout = Rollout(redact)
        for line in lines:
            rollout.feed(line)
        return rollout
