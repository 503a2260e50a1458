"""One chat completion as the client returns it, and the readers that build it.

A reply is read strictly: ``choices``, ``message``, ``content`` and
``tool_calls`` (and every field of a stream chunk) of the wrong type are a
:class:`~agentkit.chat.ModelCallError` of kind ``model_bad_response`` naming
what is wrong, never a Python exception's text. Texts (content, reasoning,
each tool call's arguments) longer than the client's ``max_reply_chars`` are
cut to it, and each cut is reported in :attr:`ChatResponse.cuts`; a streamed
reply is never held past the cap.
"""

from __future__ import annotations

from typing import Any

import attrs

from agentkit._errors import ValidationError
from agentkit._limits import json_type
from agentkit._reasoning import message_reasoning
from agentkit._tokens import ChatTokens, ChoiceTokens
from agentkit._usage import Usage
from agentkit.chat._errors import ModelCallError
from agentkit.chat._tokens import completion_tokens

__all__ = ["ChatResponse", "StreamReader", "read_completion"]


@attrs.frozen(kw_only=True)
class ChatResponse:
    """One model call: the assistant's message and everything known about the call.

    - ``message``: the assistant message as a transcript records it:
      ``role``, ``content`` (text, a list of parts, or None when the reply
      has only tool calls) and ``tool_calls`` (OpenAI's format, without null
      fields) when the model asked for tools;
    - ``finish_reason``, ``id``: as the server sent them (None when absent);
    - ``usage``: this call's tokens (``requests=1``);
    - ``reasoning``: the model's thinking, when the server sent one: vLLM's
      ``reasoning`` (``reasoning_content`` in older vLLM and other servers:
      either name is read, see :data:`~agentkit.chat.REASONING_FIELDS`);
    - ``prompt_token_ids``, ``token_ids``, ``logprobs``: vLLM's token fields
      (the prompt's ids, the completion's ids, their logprobs) when the
      server returned them (see :class:`~agentkit.chat.TokenTrace`);
    - ``token_gap``: why those ``token_ids`` are not all the completion's, when
      the answer says otherwise (``usage.completion_tokens``, its logprobs: see
      :func:`~agentkit.chat.completion_ids_gap`); None when nothing disagrees;
    - ``cuts``: the texts cut to the client's ``max_reply_chars``, each
      ``{"field": "content" | "reasoning" | "arguments", "chars": <its length>}``;
    - ``request``: the JSON body sent (the messages as they were then);
    - ``body``: the JSON body received; for a streamed call, the completion
      assembled from its chunks (``id``, ``object``, ``model``, ``choices``
      with the message, ``usage``, the token fields);
    - ``stream``: whether the call was streamed;
    - ``started_at``: when it was sent (a Unix time); ``ttft_s``: seconds to
      the first bytes of the answer's body (the first event of a stream);
      ``duration_s``: seconds from sending to the whole reply read.

    The fields are those a recorded call (``agentkit._calls.ModelCall``) keeps.
    """

    message: dict[str, Any]
    finish_reason: str | None = None
    id: str | None = None
    usage: Usage = attrs.field(factory=lambda: Usage(requests=1))
    reasoning: str | None = None
    prompt_token_ids: list[int] | None = None
    token_ids: list[int] | None = None
    logprobs: list[float] | None = None
    token_gap: str | None = None
    cuts: list[dict[str, Any]] = attrs.field(factory=list)
    request: dict[str, Any] = attrs.field(factory=dict)
    body: dict[str, Any] = attrs.field(factory=dict)
    stream: bool = False
    started_at: float = 0.0
    ttft_s: float | None = None
    duration_s: float = 0.0

    @property
    def content(self) -> Any:
        """The message's content: text, a list of parts, or None."""
        return self.message.get("content")

    @property
    def text(self) -> str:
        """The message's content as text (the parts' texts joined; "" when none)."""
        content = self.content
        if isinstance(content, list):
            return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
        return content if isinstance(content, str) else ""

    @property
    def tool_calls(self) -> list[dict[str, Any]]:
        """The tool calls the model asked for (empty when none)."""
        calls = self.message.get("tool_calls")
        return list(calls) if isinstance(calls, list) else []


def bad(message: str) -> ModelCallError:
    """A reply of the wrong shape."""
    return ModelCallError("model_bad_response", message)


def usage_of(usage: Any) -> Usage:
    """One call's usage from the ``usage`` object of a response or its last chunk;
    counts of the wrong type are a bad response naming the field."""
    try:
        return Usage.from_openai(usage)
    except ValidationError as exc:
        raise bad(f"the model response is malformed: {exc}") from None


def _copy(ids: list[int] | None) -> list[int] | None:
    return None if ids is None else list(ids)


def _str_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) else None


class Cap:
    """Texts kept up to ``limit`` characters (None: no limit); what was cut is noted."""

    def __init__(self, limit: int | None) -> None:
        self.limit = limit
        self.cuts: list[dict[str, Any]] = []

    def cut(self, text: Any, field: str) -> Any:
        """``text`` cut to the limit (noted in ``cuts``); anything else as it is."""
        if self.limit is not None and isinstance(text, str) and len(text) > self.limit:
            self.cuts.append({"field": field, "chars": len(text)})
            return text[: self.limit]
        return text


def read_completion(data: Any, cap: Cap) -> dict[str, Any]:
    """The fields of a :class:`ChatResponse` from a ``chat.completion`` body."""
    choices = data.get("choices") if isinstance(data, dict) else None
    if not choices or not isinstance(choices, list) or not isinstance(choices[0], dict):
        raise bad("the model response has no choices")
    choice: dict[str, Any] = choices[0]
    tokens = completion_tokens(data)
    first = tokens.first()
    raw = choice.get("message")
    if not isinstance(raw, dict):
        raise bad("the model response has no message")
    reasoning = cap.cut(message_reasoning(raw)[1], "reasoning")
    content = raw.get("content")
    if content is not None and not isinstance(content, (str, list)):
        raise bad(
            f"the model response's content is {json_type(content)}, not a string or a list of parts"
        )
    message: dict[str, Any] = {"role": "assistant", "content": cap.cut(content, "content")}
    calls = raw.get("tool_calls")
    if calls is not None and not isinstance(calls, list):
        raise bad(f"the model response's tool_calls is {json_type(calls)}, not a list")
    if calls:
        message["tool_calls"] = [_tool_call(c, cap) for c in calls]
    return {
        "message": message,
        "finish_reason": _str_or_none(choice.get("finish_reason")),
        "id": _str_or_none(data.get("id")),
        "usage": usage_of(data.get("usage")),
        "reasoning": _str_or_none(reasoning),
        "prompt_token_ids": _copy(tokens.prompt_ids),
        "token_ids": None if first is None else _copy(first.token_ids),
        "logprobs": None if first is None else first.logprobs,
        "token_gap": None if first is None else tokens.gap(first),
        "cuts": cap.cuts,
        "body": data,
    }


class StreamReader:
    """A streamed completion, chunk by chunk: the pieces joined, the usage of the last
    chunk that had one, the token fields; texts kept up to the cap."""

    def __init__(self, cap: Cap) -> None:
        self.cap = cap
        self.text = _CappedText("content", cap.limit)
        self.thought = _CappedText("reasoning", cap.limit)
        self.reasoning_field = "reasoning"  # the name the server sent it by
        self.calls: dict[int, dict[str, Any]] = {}
        self.arg_chars: dict[int, int] = {}  # characters of arguments sent, per tool call
        self.finish: str | None = None
        self.usage = Usage(requests=1)
        self.raw_usage: Any = None
        self.id: str | None = None
        self.model: Any = None
        self.seen = False
        self.tokens = ChatTokens(ChoiceTokens)

    def add(self, chunk: dict[str, Any]) -> None:
        """One chunk (a parsed ``data:`` payload)."""
        self.seen = True
        self.id = self.id or _str_or_none(chunk.get("id"))
        self.model = self.model or chunk.get("model")
        if chunk.get("usage") is not None:
            self.usage = usage_of(chunk["usage"])
            self.raw_usage = chunk["usage"]
        self.tokens.chunk(chunk)
        for choice in _typed(chunk.get("choices"), list, "a stream chunk's choices") or ():
            choice = _typed(choice, dict, "a stream chunk's choice")
            delta = _typed(choice.get("delta"), dict, "a stream chunk's delta") or {}
            content = _typed(delta.get("content"), str, "a stream chunk's content")
            if content:
                self.text.append(content)
            name, reasoning = message_reasoning(delta)
            if isinstance(reasoning, str):
                self.thought.append(reasoning)
                self.reasoning_field = name or self.reasoning_field
            parts = _typed(delta.get("tool_calls"), list, "a stream chunk's tool_calls")
            for part in parts or ():
                self._tool_call_part(_typed(part, dict, "a stream chunk's tool call"))
            finish = choice.get("finish_reason")
            if finish and isinstance(finish, str):
                self.finish = finish

    def _tool_call_part(self, part: dict[str, Any]) -> None:
        index = part.get("index", 0)
        if not isinstance(index, int) or isinstance(index, bool):
            raise bad(f"a stream chunk's tool call index is {json_type(index)}, not an integer")
        call = self.calls.setdefault(
            index, {"id": "", "type": "function", "function": {"name": "", "arguments": ""}}
        )
        if part.get("id"):
            call["id"] = part["id"]
        function = _typed(part.get("function"), dict, "a stream chunk's function")
        if function is not None:
            name = _typed(function.get("name"), str, "a stream chunk's function name")
            if name:
                call["function"]["name"] += name
            piece = _typed(function.get("arguments"), str, "a stream chunk's function arguments")
            if piece:
                self.arg_chars[index] = self.arg_chars.get(index, 0) + len(piece)
                kept = call["function"]["arguments"]
                limit = self.cap.limit
                if limit is None:
                    call["function"]["arguments"] = kept + piece
                elif len(kept) < limit:
                    call["function"]["arguments"] = (kept + piece)[:limit]

    def finish_reading(self) -> dict[str, Any]:
        """The fields of a :class:`ChatResponse` once the stream has ended."""
        if not self.seen:
            raise bad("the model stream ended without any chunk")
        cap = self.cap
        reasoning = self.thought.value(cap)
        for chars in self.arg_chars.values():
            if cap.limit is not None and chars > cap.limit:
                cap.cuts.append({"field": "arguments", "chars": chars})
        message: dict[str, Any] = {"role": "assistant", "content": self.text.value(cap)}
        if self.calls:
            message["tool_calls"] = [self.calls[i] for i in sorted(self.calls)]
        elif message["content"] is None:
            message["content"] = ""
        tokens = self.tokens
        first = tokens.first()
        prompt_ids = tokens.prompt_ids
        token_ids = None if first is None else first.token_ids
        logprobs = None if first is None else first.sampled_logprobs()
        choice: dict[str, Any] = {"index": 0, "message": message, "finish_reason": self.finish}
        if reasoning is not None:
            choice["message"] = {**message, self.reasoning_field: reasoning}
        if token_ids is not None:
            choice["token_ids"] = token_ids
        body: dict[str, Any] = {
            "id": self.id,
            "object": "chat.completion",
            "model": self.model,
            "choices": [choice],
            "usage": self.raw_usage,
        }
        if prompt_ids is not None:
            body["prompt_token_ids"] = prompt_ids
        return {
            "message": message,
            "finish_reason": self.finish,
            "id": self.id,
            "usage": self.usage,
            "reasoning": reasoning,
            "prompt_token_ids": prompt_ids,
            "token_ids": token_ids,
            "logprobs": logprobs,
            "token_gap": None if first is None else tokens.gap(first),
            "cuts": cap.cuts,
            "body": body,
        }


def _without_nulls(value: Any) -> Any:
    """A JSON value without its null object members (as the SDK's ``exclude_none``)."""
    if isinstance(value, dict):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_nulls(v) for v in value]
    return value


def _typed(value: Any, kind: type[Any], what: str) -> Any:
    """``value`` when it is null or a ``kind`` (a JSON object, list or string); anything
    else is a bad response naming ``what``."""
    if value is None or isinstance(value, kind):
        return value
    names: dict[type[Any], str] = {dict: "an object", list: "a list", str: "a string"}
    expected = names.get(kind, kind.__name__)
    raise bad(f"{what} is {json_type(value)}, not {expected}")


def _tool_call(call: Any, cap: Cap) -> dict[str, Any]:
    """One tool call of a reply, without nulls, its arguments cut to the cap."""
    if not isinstance(call, dict):
        raise bad(f"a tool call in the model response is {json_type(call)}")
    out: dict[str, Any] = _without_nulls(call)
    function = out.get("function")
    if isinstance(function, dict) and isinstance(function.get("arguments"), str):
        function["arguments"] = cap.cut(function["arguments"], "arguments")
    return out


class _CappedText:
    """Streamed text pieces, kept up to ``limit`` characters (the rest is counted, not kept)."""

    def __init__(self, field: str, limit: int | None) -> None:
        self.field = field
        self.limit = limit
        self.parts: list[str] = []
        self.kept = 0
        self.seen = 0

    def append(self, piece: str) -> None:
        self.seen += len(piece)
        if self.limit is None:
            self.parts.append(piece)
            return
        room = self.limit - self.kept
        if room > 0:
            kept = piece[:room]
            self.parts.append(kept)
            self.kept += len(kept)

    def value(self, cap: Cap) -> str | None:
        if self.limit is not None and self.seen > self.limit:
            cap.cuts.append({"field": self.field, "chars": self.seen})
        return "".join(self.parts) or None
