"""Anthropic Messages served from the server's chat completions (the proxy's translation mode).

The request: ``system`` (a string or text blocks, joined by a blank line)
becomes a system message; each message's blocks become chat messages: a
user's ``tool_result`` blocks one ``tool`` message each (in order, before the
user's text), its ``text`` and ``image`` blocks the user message; a system
turn amid the messages a system message; an
assistant's ``text`` its content, its ``thinking`` its ``reasoning`` (and
``reasoning_content``: current vLLM reads the one, other servers the other),
its ``tool_use`` blocks its ``tool_calls`` (the arguments the model wrote,
from the route's memory). ``tools`` (``input_schema``) become function tools,
``tool_choice`` (``auto``, ``any``, ``tool``, ``none``;
``disable_parallel_tool_use``) its chat form, ``stop_sequences`` ``stop``;
``max_tokens``, ``temperature``, ``top_p``, ``top_k`` and ``stream`` are kept.
What chat completions cannot say is left out: ``cache_control``, Anthropic's
server tools (web search, code execution...), ``thinking`` settings, citations,
``redacted_thinking`` and ``metadata``.

The answer: a ``message`` whose content is a ``thinking`` block (the
completion's reasoning), a ``text`` block, then a ``tool_use`` block per tool
call; the finish reason becomes ``stop_reason`` (``stop``: ``end_turn``, or
``stop_sequence`` when vLLM's ``stop_reason`` names one of the request's;
``tool_calls``: ``tool_use``; ``length``: ``max_tokens``), the usage
Anthropic's (``input_tokens`` without the cached ones, which are
``cache_read_input_tokens``). Streamed: ``message_start`` (its
``input_tokens`` counted from vLLM's prompt ids when the server sent them),
``ping``, then per block ``content_block_start``, its deltas
(``thinking_delta``, ``text_delta``, ``input_json_delta``) and
``content_block_stop``, each as the chat chunks arrive, then ``message_delta``
(stop reason and usage) and ``message_stop``. An error answer gets
Anthropic's error shape.
"""

from __future__ import annotations

import json
import secrets
from typing import Any, ClassVar

from agentkit._calls import WireProtocol
from agentkit._reasoning import with_reasoning
from agentkit._sse import json_event
from agentkit.proxy._chat_parts import ChatParts, Part, Step
from agentkit.proxy._errors import ANTHROPIC_ERROR_TYPES
from agentkit.proxy._messages import MessagesWire
from agentkit.proxy._translate import ChatTranslation, arguments_text, chat_usage

__all__ = ["MessagesFromChat"]

_STOP = {"stop": "end_turn", "tool_calls": "tool_use", "length": "max_tokens"}
#: The signature a translated thinking block carries (chat completions give none).
SIGNATURE = "agentkit-proxy-translated"


def _text(content: Any, joiner: str = "\n") -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = [b.get("text") for b in content if isinstance(b, dict)]
        return joiner.join(t for t in texts if isinstance(t, str))
    return ""


def _image(block: dict[str, Any]) -> dict[str, Any] | None:
    source = block.get("source")
    if not isinstance(source, dict):
        return None
    if source.get("type") == "base64":
        url = f"data:{source.get('media_type', 'image/png')};base64,{source.get('data', '')}"
    elif source.get("type") == "url" and isinstance(source.get("url"), str):
        url = source["url"]
    else:
        return None
    return {"type": "image_url", "image_url": {"url": url}}


def _tool_result(block: dict[str, Any]) -> dict[str, Any]:
    content = block.get("content")
    if isinstance(content, list):
        texts = []
        for part in content:
            if isinstance(part, dict) and part.get("type") == "text":
                texts.append(str(part.get("text", "")))
            elif isinstance(part, dict) and part.get("type") == "image":
                texts.append("[image]")
        content = "\n".join(texts)
    return {
        "role": "tool",
        "tool_call_id": str(block.get("tool_use_id", "")),
        "content": content if isinstance(content, str) else "",
    }


def _user(content: Any) -> list[dict[str, Any]]:
    if not isinstance(content, list):
        return [{"role": "user", "content": _text(content)}]
    out: list[dict[str, Any]] = []
    parts: list[dict[str, Any]] = []
    for block in content:
        if not isinstance(block, dict):
            continue
        kind = block.get("type")
        if kind == "tool_result":
            out.append(_tool_result(block))
        elif kind == "text" and isinstance(block.get("text"), str):
            parts.append({"type": "text", "text": block["text"]})
        elif kind == "image" and (image := _image(block)) is not None:
            parts.append(image)
    if parts:
        if all(p["type"] == "text" for p in parts) and len(parts) == 1:
            out.append({"role": "user", "content": parts[0]["text"]})
        else:
            out.append({"role": "user", "content": parts})
    return out


def _assistant(content: Any, memory: dict[str, Any]) -> dict[str, Any]:
    if not isinstance(content, list):
        return {"role": "assistant", "content": _text(content)}
    texts: list[str] = []
    thinking: list[str] = []
    calls: list[dict[str, Any]] = []
    for block in content:
        if not isinstance(block, dict):
            continue
        kind = block.get("type")
        if kind == "text" and isinstance(block.get("text"), str):
            texts.append(block["text"])
        elif kind == "thinking" and isinstance(block.get("thinking"), str):
            thinking.append(block["thinking"])
        elif kind == "tool_use":
            call_id = str(block.get("id", ""))
            arguments = arguments_text(memory, call_id, block.get("input", {}))
            calls.append(
                {
                    "id": call_id,
                    "type": "function",
                    "function": {"name": str(block.get("name", "")), "arguments": arguments},
                }
            )
    message: dict[str, Any] = {"role": "assistant", "content": "".join(texts) or None}
    if thinking:
        with_reasoning(message, "".join(thinking))
    if calls:
        message["tool_calls"] = calls
    elif message["content"] is None:
        message["content"] = ""
    return message


def _tools(tools: Any) -> list[dict[str, Any]]:
    out = []
    for tool in tools if isinstance(tools, list) else []:
        # a tool of the caller's own has an input_schema; Anthropic's server tools
        # (web_search_*, code_execution_*, bash_* ...) have a type and none
        if isinstance(tool, dict) and isinstance(tool.get("input_schema"), dict):
            function: dict[str, Any] = {
                "name": tool.get("name"),
                "parameters": tool["input_schema"],
            }
            if isinstance(tool.get("description"), str):
                function["description"] = tool["description"]
            out.append({"type": "function", "function": function})
    return out


def _tool_choice(choice: Any, body: dict[str, Any]) -> None:
    if not isinstance(choice, dict):
        return
    kind = choice.get("type")
    if kind == "auto":
        body["tool_choice"] = "auto"
    elif kind == "any":
        body["tool_choice"] = "required"
    elif kind == "none":
        body["tool_choice"] = "none"
    elif kind == "tool" and isinstance(choice.get("name"), str):
        body["tool_choice"] = {"type": "function", "function": {"name": choice["name"]}}
    if choice.get("disable_parallel_tool_use") is True:
        body["parallel_tool_calls"] = False


class MessagesFromChat(ChatTranslation):
    """``/messages`` served from ``/chat/completions`` (translation mode)."""

    protocol: ClassVar[WireProtocol] = "messages"

    @classmethod
    def matches(cls, path: str) -> bool:
        return MessagesWire.matches(path)

    def __init__(
        self, request: dict[str, Any], settings: Any, memory: dict[str, Any] | None = None
    ) -> None:
        self._index = -1
        self._message_id = f"msg_{secrets.token_hex(12)}"
        super().__init__(request, settings, memory)

    @classmethod
    def chat_message(cls, response: Any) -> dict[str, Any] | None:
        """A ``message``'s content blocks as a chat assistant message (its ``tool_use``
        inputs as JSON text: the route's memory of the text sampled is not kept)."""
        if not isinstance(response, dict) or not isinstance(response.get("content"), list):
            return None
        return _assistant(response["content"], {})

    def to_chat(self) -> dict[str, Any]:
        request = self.request
        messages: list[dict[str, Any]] = []
        system = _text(request.get("system"), "\n\n")
        if system:
            messages.append({"role": "system", "content": system})
        for message in request.get("messages") or []:
            if not isinstance(message, dict):
                continue
            role = message.get("role")
            if role == "assistant":
                messages.append(_assistant(message.get("content"), self.memory))
            elif role == "system":  # a system turn amid the conversation (Claude Code's)
                messages.append({"role": "system", "content": _text(message.get("content"))})
            else:
                messages += _user(message.get("content"))
        body: dict[str, Any] = {"model": request.get("model"), "messages": messages}
        for key in ("max_tokens", "temperature", "top_p", "top_k", "stream"):
            if key in request:
                body[key] = request[key]
        if isinstance(request.get("stop_sequences"), list) and request["stop_sequences"]:
            body["stop"] = request["stop_sequences"]
        tools = _tools(request.get("tools"))
        if tools:
            body["tools"] = tools
            _tool_choice(request.get("tool_choice"), body)
        return body

    # -- the whole answer ------------------------------------------------------
    def _stop(self, parts: ChatParts) -> tuple[str | None, str | None]:
        finish = parts.finish_reason
        if finish is None:
            return None, None
        stops = self.request.get("stop_sequences")
        matched = parts.stop_reason
        if finish == "stop" and isinstance(stops, list) and matched in stops:
            return "stop_sequence", str(matched)
        return _STOP.get(finish, "end_turn"), None

    def _usage(self, parts: ChatParts) -> dict[str, Any]:
        prompt, cached, completion = chat_usage(parts.usage)
        if parts.usage is None and parts.prompt_tokens is not None:
            prompt = parts.prompt_tokens
        return {
            "input_tokens": max(0, prompt - cached),
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": cached,
            "output_tokens": completion,
        }

    def _block(self, part: Part) -> dict[str, Any]:
        if part.kind == "reasoning":
            return {"type": "thinking", "thinking": part.text, "signature": SIGNATURE}
        if part.kind == "text":
            return {"type": "text", "text": part.text}
        try:
            value = json.loads(part.text) if part.text else {}
        except ValueError:
            value = None
        return {
            "type": "tool_use",
            "id": self._call_id(part),
            "name": part.name,
            "input": value if isinstance(value, dict) else {},
        }

    def _call_id(self, part: Part) -> str:
        if not part.call_id:
            part.call_id = f"toolu_{secrets.token_hex(12)}"
        return part.call_id

    def _envelope(self, parts: ChatParts) -> dict[str, Any]:
        return {
            "id": self._message_id,
            "type": "message",
            "role": "assistant",
            "model": parts.model or self.model or "",
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
        }

    def render(self, parts: ChatParts) -> dict[str, Any]:
        stop, sequence = self._stop(parts)
        return {
            **self._envelope(parts),
            "content": [self._block(p) for p in parts.parts],
            "stop_reason": stop,
            "stop_sequence": sequence,
            "usage": self._usage(parts),
        }

    def finish(self) -> str | None:
        return self._stop(self.parts)[0]

    # -- the stream ----------------------------------------------------------------
    def opening(self) -> bytes:
        usage = {**self._usage(ChatParts()), "input_tokens": self.parts.prompt_tokens or 0}
        message = {**self._envelope(self.parts), "usage": usage}
        return json_event({"type": "message_start", "message": message}, "message_start") + (
            json_event({"type": "ping"}, "ping")
        )

    def steps(self, steps: list[Step]) -> bytes:
        out: list[bytes] = []
        for step in steps:
            part = step.part
            if step.op == "open":
                self._index += 1
                start = self._block(Part(part.kind, "", part.call_id, part.name))
                if part.kind == "tool":
                    start = {**start, "id": self._call_id(part), "name": part.name, "input": {}}
                elif part.kind == "reasoning":
                    start["signature"] = ""
                out.append(self._event("content_block_start", content_block=start))
            elif step.op == "delta":
                delta: dict[str, Any]
                if part.kind == "reasoning":
                    delta = {"type": "thinking_delta", "thinking": step.text}
                elif part.kind == "text":
                    delta = {"type": "text_delta", "text": step.text}
                else:
                    delta = {"type": "input_json_delta", "partial_json": step.text}
                out.append(self._event("content_block_delta", delta=delta))
            else:
                if part.kind == "reasoning":
                    signed = {"type": "signature_delta", "signature": SIGNATURE}
                    out.append(self._event("content_block_delta", delta=signed))
                out.append(self._event("content_block_stop"))
        return b"".join(out)

    def _event(self, kind: str, **fields: Any) -> bytes:
        return json_event({"type": kind, "index": self._index, **fields}, kind)

    def closing(self) -> bytes:
        stop, sequence = self._stop(self.parts)
        delta = {
            "type": "message_delta",
            "delta": {"stop_reason": stop or "end_turn", "stop_sequence": sequence},
            "usage": self._usage(self.parts),
        }
        return json_event(delta, "message_delta") + json_event(
            {"type": "message_stop"}, "message_stop"
        )

    def error_answer(self, status: int, data: Any) -> Any:
        inner = data.get("error", data) if isinstance(data, dict) else None
        message = inner.get("message") if isinstance(inner, dict) else None
        if not isinstance(message, str):
            message = data if isinstance(data, str) else f"the model server answered {status}"
        kind = ANTHROPIC_ERROR_TYPES.get(
            status, "api_error" if status >= 500 else "invalid_request_error"
        )
        return {"type": "error", "error": {"type": kind, "message": message}}
