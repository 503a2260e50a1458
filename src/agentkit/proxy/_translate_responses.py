"""The OpenAI Responses API served from the server's chat completions (translation mode).

The request: ``instructions`` becomes a system message, ``input`` (a string,
or items) chat messages: a ``message`` item by its role (``developer`` as
``system``; ``input_text``/``output_text`` parts as text, ``input_image`` as an
image part), ``function_call`` items the ``tool_calls`` of an assistant
message, ``function_call_output`` items ``tool`` messages, a ``reasoning``
item (its text, else its summary) the next assistant message's
``reasoning`` (and ``reasoning_content``: current vLLM reads the one, other
servers the other). ``tools`` of type ``function`` become chat function
tools, ``tool_choice`` its chat form, ``max_output_tokens`` ``max_tokens``,
``text.format`` (JSON schema) ``response_format``; ``temperature``,
``top_p``, ``parallel_tool_calls`` and ``stream`` are kept. The server keeps
no state: ``previous_response_id`` is served from the route's memory of the
responses this rollout attempt got (an id it did not give is refused with a
400); ``store``, ``include`` (encrypted reasoning), ``reasoning`` settings,
built-in and custom tools (web search, file search, ``local_shell``, freeform
``custom`` tools) are left out.

The answer: a ``response`` whose output is a ``reasoning`` item (the
completion's reasoning, as a summary), a ``message`` (one ``output_text``),
then a ``function_call`` per tool call; ``status`` ``completed``, or
``incomplete`` (``max_output_tokens``) when the completion hit its length;
the usage in Responses' words. Streamed, the events OpenAI documents, each
with its ``sequence_number``: ``response.created``, ``response.in_progress``,
per item ``response.output_item.added``, its deltas
(``response.reasoning_summary_*``, ``response.content_part.added``,
``response.output_text.delta``/``.done``, ``response.content_part.done``,
``response.function_call_arguments.delta``/``.done``) and
``response.output_item.done``, as the chat chunks arrive, then
``response.completed`` (or ``response.incomplete``) with the whole response.
"""

from __future__ import annotations

import itertools
import secrets
import time
from typing import Any, ClassVar

from agentkit._calls import WireProtocol
from agentkit._reasoning import with_reasoning
from agentkit._sse import json_event
from agentkit.proxy._chat_parts import ChatParts, Part, Step
from agentkit.proxy._responses import ResponsesWire
from agentkit.proxy._translate import ChatTranslation, arguments_text, chat_usage

__all__ = ["ResponsesFromChat"]

_RESPONSES = "responses"
#: How many responses a route keeps for ``previous_response_id`` (the newest).
KEPT_RESPONSES = 64


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = [p.get("text") for p in content if isinstance(p, dict)]
        return "".join(t for t in texts if isinstance(t, str))
    return ""


def _parts(content: Any) -> Any:
    """A message item's content as chat content: text, or parts when it has an image."""
    if not isinstance(content, list):
        return _text(content)
    parts: list[dict[str, Any]] = []
    for part in content:
        if not isinstance(part, dict):
            continue
        if isinstance(part.get("text"), str):
            parts.append({"type": "text", "text": part["text"]})
        elif part.get("type") == "input_image" and isinstance(part.get("image_url"), str):
            parts.append({"type": "image_url", "image_url": {"url": part["image_url"]}})
    if all(p["type"] == "text" for p in parts):
        return "".join(p["text"] for p in parts)
    return parts


def _reasoning_text(item: dict[str, Any]) -> str:
    text = _text(item.get("content"))
    return text or "".join(
        str(s.get("text", "")) for s in item.get("summary") or [] if isinstance(s, dict)
    )


#: The index of the part a reasoning item's or a message's events name (the one summary,
#: the one content part); a function call's events name none.
_PART_INDEX: dict[str, dict[str, int]] = {
    "reasoning": {"summary_index": 0},
    "text": {"content_index": 0},
}


class _History:
    """Responses input items as chat messages."""

    def __init__(self, memory: dict[str, Any]) -> None:
        self.memory = memory
        self.messages: list[dict[str, Any]] = []
        self.reasoning: list[str] = []

    def _assistant(self) -> dict[str, Any]:
        last = self.messages[-1] if self.messages else None
        if last is None or last.get("role") != "assistant" or self.reasoning:
            last = {"role": "assistant", "content": None}
            self.messages.append(last)
        if self.reasoning:
            with_reasoning(last, "".join(self.reasoning))
            self.reasoning = []
        return last

    def add(self, item: Any) -> None:
        if not isinstance(item, dict):
            return
        kind = item.get("type", "message")
        if kind == "message":
            role = item.get("role")
            if role == "assistant":
                message = self._assistant()
                if message.get("tool_calls"):  # text after calls: a message of its own
                    message = {"role": "assistant", "content": None}
                    self.messages.append(message)
                message["content"] = (message.get("content") or "") + _text(item.get("content"))
            elif role in ("user", "system", "developer"):
                role = "system" if role == "developer" else role
                self.messages.append({"role": role, "content": _parts(item.get("content"))})
        elif kind == "function_call":
            call_id = str(item.get("call_id", ""))
            arguments = arguments_text(self.memory, call_id, item.get("arguments", ""))
            self._assistant().setdefault("tool_calls", []).append(
                {
                    "id": call_id,
                    "type": "function",
                    "function": {"name": str(item.get("name", "")), "arguments": arguments},
                }
            )
        elif kind == "function_call_output":
            output = item.get("output")
            self.messages.append(
                {
                    "role": "tool",
                    "tool_call_id": str(item.get("call_id", "")),
                    "content": output if isinstance(output, str) else _text(output),
                }
            )
        elif kind == "reasoning":
            self.reasoning.append(_reasoning_text(item))


def _tools(tools: Any) -> list[dict[str, Any]]:
    out = []
    for tool in tools if isinstance(tools, list) else []:
        if isinstance(tool, dict) and tool.get("type") == "function":
            function = {
                k: tool[k] for k in ("name", "description", "parameters", "strict") if k in tool
            }
            out.append({"type": "function", "function": function})
    return out


class ResponsesFromChat(ChatTranslation):
    """``/responses`` served from ``/chat/completions`` (translation mode)."""

    protocol: ClassVar[WireProtocol] = "responses"

    @classmethod
    def matches(cls, path: str) -> bool:
        return ResponsesWire.matches(path)

    def __init__(
        self, request: dict[str, Any], settings: Any, memory: dict[str, Any] | None = None
    ) -> None:
        self._id = f"resp_{secrets.token_hex(12)}"
        self._created = int(time.time())
        self._numbers = itertools.count()
        self._items: list[dict[str, Any]] = []
        self._history: list[dict[str, Any]] = []
        super().__init__(request, settings, memory)

    @classmethod
    def chat_message(cls, response: Any) -> dict[str, Any] | None:
        """A ``response``'s output items as one chat assistant message: its text, its
        reasoning as ``reasoning_content``, its function calls as ``tool_calls``."""
        if not isinstance(response, dict) or not isinstance(response.get("output"), list):
            return None
        history = _History({})
        for item in response["output"]:
            history.add(item)
        found = [m for m in history.messages if m.get("role") == "assistant"]
        if not found:
            return None
        texts = [m["content"] for m in found if isinstance(m.get("content"), str)]
        reasoning = [m["reasoning_content"] for m in found if m.get("reasoning_content")]
        calls = [c for m in found for c in m.get("tool_calls") or []]
        message: dict[str, Any] = {"role": "assistant", "content": "".join(texts) or None}
        if reasoning:
            message["reasoning_content"] = "".join(reasoning)
        if calls:
            message["tool_calls"] = calls
        return message

    def to_chat(self) -> dict[str, Any]:
        request = self.request
        history = _History(self.memory)
        previous = request.get("previous_response_id")
        if previous is not None:
            kept = self.memory.get(_RESPONSES, {}).get(previous)
            if kept is None:
                self.refusal = (400, _error(f"previous_response_id {previous!r}: the proxy's "
                    "translation mode keeps only the responses this rollout got; send the "
                    "whole conversation as input"))  # fmt: skip
            else:
                history.messages = [dict(m) for m in kept]
        items = request.get("input")
        if isinstance(items, str):
            history.messages.append({"role": "user", "content": items})
        elif isinstance(items, list):
            for item in items:
                history.add(item)
        self._history = history.messages
        messages = list(history.messages)
        instructions = request.get("instructions")
        if isinstance(instructions, str) and instructions:
            messages.insert(0, {"role": "system", "content": instructions})
        body: dict[str, Any] = {"model": request.get("model"), "messages": messages}
        for key in ("temperature", "top_p", "parallel_tool_calls", "stream"):
            if key in request:
                body[key] = request[key]
        if isinstance(request.get("max_output_tokens"), int):
            body["max_tokens"] = request["max_output_tokens"]
        tools = _tools(request.get("tools"))
        if tools:
            body["tools"] = tools
            choice = request.get("tool_choice")
            if choice in ("auto", "none", "required"):
                body["tool_choice"] = choice
            elif isinstance(choice, dict) and choice.get("type") == "function":
                body["tool_choice"] = {"type": "function", "function": {"name": choice.get("name")}}
        text = request.get("text")
        form = text.get("format") if isinstance(text, dict) else None
        if isinstance(form, dict) and form.get("type") == "json_schema":
            schema = {k: form[k] for k in ("name", "schema", "strict", "description") if k in form}
            body["response_format"] = {"type": "json_schema", "json_schema": schema}
        elif isinstance(form, dict) and form.get("type") == "json_object":
            body["response_format"] = {"type": "json_object"}
        return body

    # -- items ---------------------------------------------------------------------
    def _item(self, part: Part, index: int, done: bool) -> dict[str, Any]:
        status = "completed" if done else "in_progress"
        if part.kind == "reasoning":
            summary = [{"type": "summary_text", "text": part.text}] if done else []
            return {"type": "reasoning", "id": f"rs_{self._id[5:]}_{index}", "summary": summary}
        if part.kind == "text":
            content = [_output_text(part.text)] if done else []
            return {
                "type": "message",
                "id": f"msg_{self._id[5:]}_{index}",
                "status": status,
                "role": "assistant",
                "content": content,
            }
        if not part.call_id:
            part.call_id = f"call_{secrets.token_hex(12)}"
        return {
            "type": "function_call",
            "id": f"fc_{self._id[5:]}_{index}",
            "call_id": part.call_id,
            "name": part.name,
            "arguments": part.text if done else "",
            "status": status,
        }

    def _status(self) -> tuple[str, dict[str, Any] | None]:
        finish = self.parts.finish_reason
        if finish == "length":
            return "incomplete", {"reason": "max_output_tokens"}
        if finish == "content_filter":
            return "incomplete", {"reason": "content_filter"}
        return "completed", None

    def _usage(self, parts: ChatParts) -> dict[str, Any]:
        prompt, cached, completion = chat_usage(parts.usage)
        return {
            "input_tokens": prompt,
            "input_tokens_details": {"cached_tokens": cached},
            "output_tokens": completion,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": prompt + completion,
        }

    def _response(self, status: str, output: list[dict[str, Any]]) -> dict[str, Any]:
        request = self.request
        tools = request.get("tools")
        incomplete = self._status()[1] if status == "incomplete" else None
        return {
            "id": self._id,
            "object": "response",
            "created_at": self._created,
            "status": status,
            "error": None,
            "incomplete_details": incomplete,
            "instructions": request.get("instructions"),
            "metadata": {},
            "model": self.parts.model or self.model or "",
            "output": output,
            "parallel_tool_calls": bool(request.get("parallel_tool_calls", True)),
            "previous_response_id": request.get("previous_response_id"),
            "temperature": request.get("temperature"),
            "tool_choice": request.get("tool_choice", "auto"),
            "tools": tools if isinstance(tools, list) else [],
            "top_p": request.get("top_p"),
            "usage": None if status == "in_progress" else self._usage(self.parts),
        }

    def render(self, parts: ChatParts) -> dict[str, Any]:
        self._keep()
        output = [self._item(p, i, True) for i, p in enumerate(parts.parts)]
        return self._response(self._status()[0], output)

    def finish(self) -> str | None:
        status, details = self._status()
        return str(details["reason"]) if details else status

    def _keep(self) -> None:
        """Remember the conversation with this answer, for a ``previous_response_id``."""
        message: dict[str, Any] = {"role": "assistant", "content": None}
        for part in self.parts.parts:
            if part.kind == "reasoning":
                message["reasoning_content"] = part.text
            elif part.kind == "text":
                message["content"] = (message["content"] or "") + part.text
            else:
                message.setdefault("tool_calls", []).append(
                    {
                        "id": part.call_id,
                        "type": "function",
                        "function": {"name": part.name, "arguments": part.text},
                    }
                )
        kept: dict[str, Any] = self.memory.setdefault(_RESPONSES, {})
        kept[self._id] = [*self._history, message]
        while len(kept) > KEPT_RESPONSES:
            kept.pop(next(iter(kept)))

    # -- the stream ------------------------------------------------------------------
    def _event(self, kind: str, **fields: Any) -> bytes:
        return json_event({"type": kind, "sequence_number": next(self._numbers), **fields}, kind)

    def opening(self) -> bytes:
        started = self._response("in_progress", [])
        return self._event("response.created", response=started) + self._event(
            "response.in_progress", response=started
        )

    def steps(self, steps: list[Step]) -> bytes:
        out: list[bytes] = []
        for step in steps:
            part = step.part
            index = self.parts.parts.index(part)
            item = self._item(part, index, step.op == "close")
            # where a part's events point: its item, and its summary or content part
            at = {"item_id": item["id"], "output_index": index, **_PART_INDEX.get(part.kind, {})}
            if step.op == "open":
                out.append(self._event("response.output_item.added", output_index=index, item=item))
                if part.kind == "reasoning":
                    empty = {"type": "summary_text", "text": ""}
                    out.append(
                        self._event("response.reasoning_summary_part.added", **at, part=empty)
                    )
                elif part.kind == "text":
                    out.append(
                        self._event("response.content_part.added", **at, part=_output_text(""))
                    )
                continue
            if step.op == "delta":
                extra: dict[str, Any]
                if part.kind == "reasoning":
                    kind, extra = "response.reasoning_summary_text.delta", {}
                elif part.kind == "text":
                    kind, extra = "response.output_text.delta", {"logprobs": []}
                else:
                    kind, extra = "response.function_call_arguments.delta", {}
                out.append(self._event(kind, **at, **extra, delta=step.text))
                continue
            if part.kind == "reasoning":
                summary = item["summary"][0]
                out.append(
                    self._event("response.reasoning_summary_text.done", **at, text=part.text)
                )
                out.append(self._event("response.reasoning_summary_part.done", **at, part=summary))
            elif part.kind == "text":
                text = part.text
                out.append(self._event("response.output_text.done", **at, text=text, logprobs=[]))
                out.append(self._event("response.content_part.done", **at, part=_output_text(text)))
            else:
                done = "response.function_call_arguments.done"
                out.append(self._event(done, **at, name=part.name, arguments=part.text))
            self._items.append(item)
            out.append(self._event("response.output_item.done", output_index=index, item=item))
        return b"".join(out)

    def closing(self) -> bytes:
        self._keep()
        status = self._status()[0]
        kind = "response.completed" if status == "completed" else "response.incomplete"
        return self._event(kind, response=self._response(status, self._items))

    def response(self) -> Any:
        if self.started and not self.ended:  # the stream broke off: what was done of it
            return self._response("incomplete", self._items)
        return (
            super().response()
            if not self.started
            else self._response(self._status()[0], self._items)
        )


def _output_text(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def _error(message: str) -> dict[str, Any]:
    return {
        "error": {
            "message": message,
            "type": "invalid_request_error",
            "param": "previous_response_id",
            "code": "previous_response_not_found",
        }
    }
