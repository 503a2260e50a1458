"""The proxy's translation mode: a protocol served from the server's chat completions.

With ``ProxySettings.translate_to_chat``, a call in Anthropic Messages or the
OpenAI Responses API is translated to a chat completions request (which vLLM
answers with token ids and logprobs), sent to the server's
``.../chat/completions``, and its answer translated back, event by event for a
stream, into what the agent's protocol returns. :class:`ChatTranslation` is
the base of both translating handlers: the chat request is handled by a
:class:`~agentkit.proxy._chat.ChatWire` as any chat call is (token ids asked
for, usage asked for, ``cache_salt``), which records the token ids; the
subclass turns the request into chat (:meth:`ChatTranslation.to_chat`) and
the chat answer into its own (whole: :meth:`ChatTranslation.render`; streamed:
:meth:`ChatTranslation.steps`, from :class:`~agentkit.proxy._chat_parts.ChatParts`).

A tool call's arguments come back from the agent as an object (Messages'
``tool_use.input``) or as text it may have re-serialised; the exact text the
model wrote is kept in the route's memory by call id and sent back in its
place while it still parses to the same object, so the next prompt's tokens
extend the previous ones as the model sampled them.
"""

from __future__ import annotations

import json
import re
from typing import Any, ClassVar

from agentkit._calls import WireProtocol
from agentkit._proxy_settings import ProxySettings
from agentkit._sse import SseEvent
from agentkit.proxy._chat import ChatWire
from agentkit.proxy._chat_parts import ChatParts, Step, whole_parts
from agentkit.proxy._wire import Recorded, Wire

__all__ = ["ChatTranslation", "arguments_text"]

_MODEL_PATH = re.compile(r"/(messages|responses)$")
_ARGUMENTS = "tool_arguments"


def arguments_text(memory: dict[str, Any], call_id: str, arguments: Any) -> str:
    """A tool call's arguments as the model wrote them when the route remembers them
    (and they still mean ``arguments``), else ``arguments`` as JSON text."""
    kept = memory.get(_ARGUMENTS, {}).get(call_id)
    if isinstance(arguments, str):
        if kept is not None and _same(kept, arguments):
            return str(kept)
        return arguments
    if kept is not None and _parsed(kept) == arguments:
        return str(kept)
    return json.dumps(arguments, ensure_ascii=False)


def _parsed(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


def _same(kept: str, text: str) -> bool:
    return kept == text or _parsed(kept) == _parsed(text)


class ChatTranslation(Wire):
    """A call in the agent's protocol, served from the server's chat completions."""

    upstream_protocol: ClassVar[WireProtocol | None] = "chat"

    def __init__(
        self,
        request: dict[str, Any],
        settings: ProxySettings,
        memory: dict[str, Any] | None = None,
    ) -> None:
        self.chat: ChatWire | None = None
        self.parts = ChatParts()
        self.started = False
        self.ended = False
        self._whole: Any = None
        super().__init__(request, settings, memory)

    def prepare(self) -> None:
        chat = ChatWire(self.to_chat(), self.settings)
        self.chat = chat
        self.body = chat.body
        self.forwarded = chat.forwarded
        self.ids_asked = chat.ids_asked

    def to_chat(self) -> dict[str, Any]:
        """The chat completions request for the agent's :attr:`request`."""
        raise NotImplementedError

    @classmethod
    def chat_message(cls, response: Any) -> dict[str, Any] | None:
        """The chat assistant message an answer in the agent's protocol stands for (a
        recorded call's ``response``, as the agent received it), for exports that speak
        chat; None when this translation cannot say."""
        return None

    def upstream_path_for(self, path: str) -> str:
        """``.../messages`` or ``.../responses`` becomes ``.../chat/completions`` (the
        query, the agent's protocol's own, is left out)."""
        return _MODEL_PATH.sub("/chat/completions", path.partition("?")[0].rstrip("/"))

    @property
    def rewrites(self) -> bool:
        return True

    # -- the answer --------------------------------------------------------------
    def answer(self, data: Any) -> Any:
        assert self.chat is not None
        if not isinstance(data, dict):
            return data
        self.chat.answer(data)
        self.parts = whole_parts(data)
        self._remember()
        self._whole = self.render(self.parts)
        return self._whole

    def stream_event(self, event: SseEvent, data: Any) -> bytes:
        assert self.chat is not None
        steps = self.parts.feed(data)  # before the chat wire takes the token fields out
        self.chat.event(event.name, data)
        out = b""
        if not self.started:
            self.started = True
            out += self.opening()
        return out + self.steps(steps)

    def stream_other(self, event: SseEvent) -> bytes:
        if event.data is not None and event.data.startswith("[DONE]"):
            return self.stream_end()
        return b""  # not JSON: nothing the agent's protocol has

    def stream_end(self) -> bytes:
        if self.ended:
            return b""
        self.ended = True
        out = b"" if self.started else self.opening()
        self.started = True
        out += self.steps(self.parts.close())
        self._remember()
        return out + self.closing()

    def _remember(self) -> None:
        kept = self.memory.setdefault(_ARGUMENTS, {})
        for part in self.parts.parts:
            if part.kind == "tool" and part.call_id:
                kept[part.call_id] = part.text

    # -- what subclasses write ---------------------------------------------------
    def render(self, parts: ChatParts) -> dict[str, Any]:
        """The whole answer in the agent's protocol."""
        raise NotImplementedError

    def opening(self) -> bytes:
        """The events a stream starts with."""
        raise NotImplementedError

    def steps(self, steps: list[Step]) -> bytes:
        """The events for the parts' steps."""
        raise NotImplementedError

    def closing(self) -> bytes:
        """The events a stream ends with (its usage and stop reason known)."""
        raise NotImplementedError

    def response(self) -> Any:
        """What the agent got, as one object (a stream's: assembled)."""
        return self._whole if self._whole is not None else self.render(self.parts)

    def finish(self) -> str | None:
        """The answer's finish reason in the agent's protocol's words."""
        return self.parts.finish_reason

    def recorded(self) -> Recorded:
        assert self.chat is not None
        chat = self.chat.recorded()
        started = self.started or self._whole is not None
        return Recorded(
            response=self.response() if started else None,
            usage=chat.usage,
            finish_reason=self.finish() if started else None,
            prompt_token_ids=chat.prompt_token_ids,
            completion_token_ids=chat.completion_token_ids,
            completion_logprobs=chat.completion_logprobs,
            token_note=chat.token_note,
        )


def chat_usage(usage: dict[str, Any] | None) -> tuple[int, int, int]:
    """``(prompt, cached, completion)`` tokens of a chat ``usage`` object (0 when absent)."""

    def count(block: Any, name: str) -> int:
        value = block.get(name) if isinstance(block, dict) else None
        return value if type(value) is int and value >= 0 else 0

    usage = usage or {}
    return (
        count(usage, "prompt_tokens"),
        count(usage.get("prompt_tokens_details"), "cached_tokens"),
        count(usage, "completion_tokens"),
    )
