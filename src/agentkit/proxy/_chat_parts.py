"""A chat completion, whole or streamed, as the parts another protocol's answer is made of.

The proxy's translation mode serves Anthropic Messages and the OpenAI
Responses API from a server's chat completions. Both answer in *parts* that
follow one another: the reasoning, the text, then each tool call, each opened,
grown and closed in turn (a Messages content block, a Responses output item).
:class:`ChatParts` reads the first choice of a chat completion's stream chunk
by chunk and says, for each chunk, which parts open, what text they gain and
which close; :func:`whole_parts` does the same for a whole completion. It
also keeps what the answer ends with: the finish reason, vLLM's
``stop_reason`` (the stop string that ended it), the usage, and how many
prompt tokens the server reported (vLLM's ``prompt_token_ids``, in the first
chunk), which a Messages stream reports before its usage has come.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Literal

import attrs

__all__ = ["ChatParts", "Part", "PartKind", "Step", "whole_parts"]

#: What a part holds: the model's reasoning, its text, or one tool call's arguments.
PartKind = Literal["reasoning", "text", "tool"]


@attrs.define
class Part:
    """One part of the answer: its kind, text so far and (a tool call) id and name."""

    kind: PartKind
    text: str = ""
    call_id: str = ""
    name: str = ""


@attrs.frozen
class Step:
    """What one chunk did: ``open`` a part, add ``delta`` text to it, or ``close`` it."""

    op: Literal["open", "delta", "close"]
    part: Part
    text: str = ""


class ChatParts:
    """Reads chat completion chunks (the first choice) into :class:`Step` s, in order."""

    def __init__(self) -> None:
        self.parts: list[Part] = []
        self.current: Part | None = None
        self._tool_index: int | None = None
        self.id: str | None = None
        self.model: str | None = None
        self.created: int | None = None
        self.finish_reason: str | None = None
        self.stop_reason: Any = None
        self.usage: dict[str, Any] | None = None
        self.prompt_tokens: int | None = None
        self.closed = False

    def feed(self, chunk: Any) -> list[Step]:
        """The steps one chunk takes (its usage, finish reason and ids noted)."""
        if not isinstance(chunk, dict):
            return []
        if self.id is None and isinstance(chunk.get("id"), str):
            self.id = chunk["id"]
        if self.model is None and isinstance(chunk.get("model"), str):
            self.model = chunk["model"]
        if self.created is None and type(chunk.get("created")) is int:
            self.created = chunk["created"]
        ids = chunk.get("prompt_token_ids")
        if isinstance(ids, list):
            self.prompt_tokens = len(ids)
        if isinstance(chunk.get("usage"), dict):
            self.usage = chunk["usage"]
        steps: list[Step] = []
        for choice in _first_choice(chunk.get("choices")):
            delta = choice.get("delta")
            if isinstance(delta, dict):
                steps += self._delta(delta)
            if isinstance(choice.get("finish_reason"), str):
                self.finish_reason = choice["finish_reason"]
                self.stop_reason = choice.get("stop_reason")
        return steps

    def _delta(self, delta: dict[str, Any]) -> list[Step]:
        steps: list[Step] = []
        reasoning = delta.get("reasoning_content")
        if reasoning is None:
            reasoning = delta.get("reasoning")
        if isinstance(reasoning, str) and reasoning:
            steps += self._grow("reasoning", reasoning)
        content = delta.get("content")
        if isinstance(content, str) and content:
            steps += self._grow("text", content)
        tools = delta.get("tool_calls")
        for call in tools if isinstance(tools, list) else []:
            if isinstance(call, dict):
                steps += self._tool(call)
        return steps

    def _grow(self, kind: PartKind, text: str) -> list[Step]:
        steps: list[Step] = []
        if self.current is None or self.current.kind != kind:
            steps += self._open(Part(kind))
        assert self.current is not None
        self.current.text += text
        steps.append(Step("delta", self.current, text))
        return steps

    def _tool(self, call: dict[str, Any]) -> list[Step]:
        index = call.get("index")
        raw = call.get("function")
        function: dict[str, Any] = raw if isinstance(raw, dict) else {}
        steps: list[Step] = []
        current = self.current
        if (
            current is None
            or current.kind != "tool"
            or (type(index) is int and index != self._tool_index)
        ):
            steps += self._open(Part("tool"))
            self._tool_index = index if type(index) is int else None
        assert self.current is not None
        part = self.current
        if isinstance(call.get("id"), str) and call["id"] and not part.call_id:
            part.call_id = call["id"]
        name = function.get("name")
        if isinstance(name, str):
            part.name += name
        arguments = function.get("arguments")
        if isinstance(arguments, str) and arguments:
            part.text += arguments
            steps.append(Step("delta", part, arguments))
        return steps

    def _open(self, part: Part) -> list[Step]:
        steps = self.close()
        self.parts.append(part)
        self.current = part
        return [*steps, Step("open", part)]

    def close(self) -> list[Step]:
        """Close the open part, if any (the answer ended, or another part begins)."""
        if self.current is None:
            return []
        part, self.current = self.current, None
        return [Step("close", part)]


def _first_choice(choices: Any) -> Iterator[dict[str, Any]]:
    if isinstance(choices, list):
        for choice in choices:
            if isinstance(choice, dict) and choice.get("index", 0) == 0:
                yield choice
                return


def whole_parts(completion: dict[str, Any]) -> ChatParts:
    """A whole ``chat.completion`` read as one chunk: its parts, closed."""
    parts = ChatParts()
    chunk = dict(completion)
    choices = []
    for choice in _first_choice(completion.get("choices")):
        message = dict(choice.get("message") or {})
        calls = message.get("tool_calls")
        if isinstance(calls, list):  # a whole message's calls carry no index: each its own
            message["tool_calls"] = [
                {**c, "index": i} if isinstance(c, dict) else c for i, c in enumerate(calls)
            ]
        choices.append({**choice, "delta": message})
    chunk["choices"] = choices
    parts.feed(chunk)
    parts.close()
    return parts
