"""Anthropic Messages (``POST .../messages``) through the proxy.

Neither vLLM's nor SGLang's Messages endpoint returns token ids or logprobs,
so the proxy asks for nothing and each call's ``token_note`` says so (the
translation mode, to come, serves Messages from the server's chat
completions, which do). Recorded: the message (streamed: assembled from
``message_start``, the content blocks' deltas and ``message_delta``), its
usage (``input_tokens`` counts cache reads and writes too, as agentkit counts
every prompt token) and ``stop_reason``.
"""

from __future__ import annotations

import json
from typing import Any, ClassVar

from agentkit._calls import WireProtocol
from agentkit._usage import Usage
from agentkit.proxy._wire import Recorded, Wire

__all__ = ["MessagesWire", "anthropic_usage"]


def _count(block: dict[str, Any], name: str) -> int:
    value = block.get(name)
    return value if type(value) is int and value >= 0 else 0


def anthropic_usage(value: Any) -> Usage | None:
    """An Anthropic ``usage`` object as :class:`Usage` (None when absent)."""
    if not isinstance(value, dict):
        return None
    read = _count(value, "cache_read_input_tokens")
    written = _count(value, "cache_creation_input_tokens")
    return Usage(
        input_tokens=_count(value, "input_tokens") + read + written,
        output_tokens=_count(value, "output_tokens"),
        cached_tokens=read,
        requests=1,
    )


_DELTA_FIELDS = {
    "text_delta": "text",
    "thinking_delta": "thinking",
    "signature_delta": "signature",
}


class MessagesWire(Wire):
    """``/messages`` (not ``/messages/count_tokens``): Anthropic Messages."""

    protocol: ClassVar[WireProtocol] = "messages"
    endpoints: ClassVar[tuple[str, ...]] = ("/messages",)
    no_ids_note: ClassVar[str] = (
        "the Messages protocol returns no token ids (vLLM and SGLang give none on /messages); "
        "the proxy's translation mode (to come) serves Messages from chat completions, which do"
    )

    def __init__(
        self, request: dict[str, Any], settings: Any, memory: dict[str, Any] | None = None
    ) -> None:
        self._message: dict[str, Any] | None = None
        self._blocks: dict[int, dict[str, Any]] = {}
        self._json: dict[int, list[str]] = {}
        self._usage: dict[str, Any] = {}
        self._whole: Any = None
        super().__init__(request, settings, memory)

    @classmethod
    def matches(cls, path: str) -> bool:
        return path.endswith("/messages")

    def prepare(self) -> None:
        self.ids_asked = self.settings.token_ids

    def answer(self, data: Any) -> Any:
        self._message = data if isinstance(data, dict) else None
        if isinstance(data, dict) and isinstance(data.get("usage"), dict):
            self._usage = dict(data["usage"])
        self._whole = data
        return data

    def event(self, name: str | None, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        kind = data.get("type")
        if kind == "message_start" and isinstance(data.get("message"), dict):
            self._message = dict(data["message"])
            if isinstance(self._message.get("usage"), dict):
                self._usage.update(self._message["usage"])
        elif kind == "content_block_start" and isinstance(data.get("content_block"), dict):
            index = data.get("index")
            if type(index) is int:
                self._blocks[index] = dict(data["content_block"])
        elif kind == "content_block_delta" and isinstance(data.get("delta"), dict):
            self._delta(data.get("index"), data["delta"])
        elif kind == "content_block_stop":
            self._close_block(data.get("index"))
        elif kind == "message_delta":
            delta = data.get("delta")
            if isinstance(delta, dict) and self._message is not None:
                for key in ("stop_reason", "stop_sequence"):
                    if key in delta:
                        self._message[key] = delta[key]
            if isinstance(data.get("usage"), dict):
                self._usage.update({k: v for k, v in data["usage"].items() if v is not None})
        return data

    def _delta(self, index: Any, delta: dict[str, Any]) -> None:
        block = self._blocks.get(index) if type(index) is int else None
        if block is None:
            return
        kind = delta.get("type")
        if kind == "input_json_delta" and isinstance(delta.get("partial_json"), str):
            self._json.setdefault(index, []).append(delta["partial_json"])
            return
        field = _DELTA_FIELDS.get(str(kind))
        if field is not None and isinstance(delta.get(field), str):
            block[field] = str(block.get(field) or "") + delta[field]

    def _close_block(self, index: Any) -> None:
        parts = self._json.pop(index, None) if type(index) is int else None
        if parts is None:
            return
        text = "".join(parts)
        try:
            self._blocks[index]["input"] = json.loads(text) if text else {}
        except ValueError:
            self._blocks[index]["input"] = text

    def recorded(self) -> Recorded:
        message = self._message
        if self.stream and message is not None:
            for index in list(self._json):
                self._close_block(index)
            message = {
                **message,
                "content": [self._blocks[i] for i in sorted(self._blocks)],
                "usage": self._usage or message.get("usage"),
            }
        out = Recorded(
            response=message if message is not None else self._whole,
            usage=anthropic_usage(self._usage or None),
        )
        if isinstance(message, dict) and isinstance(message.get("stop_reason"), str):
            out.finish_reason = message["stop_reason"]
        out.token_note = self.token_note(out)
        return out

    def token_note(self, recorded: Recorded) -> str | None:
        return self.no_ids_note if self.settings.token_ids else super().token_note(recorded)
