"""The OpenAI Responses API (``POST .../responses``) through the proxy, with vLLM's token fields.

vLLM's Responses endpoint returns the tokens the model saw and wrote when
asked with ``enable_response_messages: true``: ``input_messages`` and
``output_messages``, each a list of ``{"type": "raw_message_tokens",
"message": TEXT, "tokens": [IDS]}`` (for models without harmony; gpt-oss
models return harmony messages, which carry no ids). With the run's
``token_ids`` on, the proxy asks for them and takes them out of the answer
again (the whole response, and the ``response`` of stream events such as
``response.completed``). Its logprobs (``include:
["message.output_text.logprobs"]``) cover only the output text, not
reasoning or tool calls, so they are not asked for: such a call records ids
without logprobs, and its ``token_note`` says so. ``cache_salt`` is added
when the run gives one.

Recorded: the response (streamed: the one ``response.completed``,
``response.incomplete`` or ``response.failed`` carries; else the output items
that were done), its usage, its status (``incomplete``: the reason, such as
``max_output_tokens``) as the finish reason, and the ids.
"""

from __future__ import annotations

from typing import Any, ClassVar

from agentkit._calls import WireProtocol
from agentkit._tokens import int_list
from agentkit._usage import Usage
from agentkit.proxy._wire import Recorded, Wire

__all__ = ["ResponsesWire"]

_NO_LOGPROBS = (
    "token ids recorded without logprobs: the Responses endpoint gives logprobs only for "
    "output text, not for reasoning or tool calls"
)


def _count(block: Any, name: str) -> int:
    value = block.get(name) if isinstance(block, dict) else None
    return value if type(value) is int and value >= 0 else 0


def responses_usage(value: Any) -> Usage | None:
    """A Responses ``usage`` object as :class:`Usage` (None when absent)."""
    if not isinstance(value, dict):
        return None
    return Usage(
        input_tokens=_count(value, "input_tokens"),
        output_tokens=_count(value, "output_tokens"),
        cached_tokens=_count(value.get("input_tokens_details"), "cached_tokens"),
        reasoning_tokens=_count(value.get("output_tokens_details"), "reasoning_tokens"),
        requests=1,
    )


def _raw_tokens(messages: Any) -> list[int] | None:
    """The ids of vLLM's ``raw_message_tokens`` entries, joined (None: none, or not all)."""
    if not isinstance(messages, list) or not messages:
        return None
    out: list[int] = []
    for entry in messages:
        if not isinstance(entry, dict) or entry.get("type") != "raw_message_tokens":
            return None
        ids = int_list(entry.get("tokens"))
        if ids is None:
            return None
        out += ids
    return out


class ResponsesWire(Wire):
    """``/responses``: the OpenAI Responses API, vLLM's ``enable_response_messages``."""

    protocol: ClassVar[WireProtocol] = "responses"
    endpoints: ClassVar[tuple[str, ...]] = ("/responses",)
    no_ids_note: ClassVar[str] = (
        "the server returned no token ids (vLLM returns them as raw_message_tokens with "
        "enable_response_messages, for models without harmony)"
    )

    def __init__(
        self, request: dict[str, Any], settings: Any, memory: dict[str, Any] | None = None
    ) -> None:
        self._strip = False
        self._response: Any = None
        self._items: list[Any] = []
        super().__init__(request, settings, memory)

    @classmethod
    def matches(cls, path: str) -> bool:
        return path.endswith("/responses")

    def prepare(self) -> None:
        request = self.request
        self.ids_asked = request.get("enable_response_messages") is True
        if self.settings.token_ids and not self.ids_asked:
            self.ask("enable_response_messages", True)
            self._strip = self.ids_asked = True
        self.ask_cache_salt()

    def _take(self, response: dict[str, Any]) -> dict[str, Any]:
        self._response = dict(response)  # the record keeps the ids' source until read
        if self._strip:
            response.pop("input_messages", None)
            response.pop("output_messages", None)
        return response

    def answer(self, data: Any) -> Any:
        if isinstance(data, dict):
            return self._take(data)
        self._response = data
        return data

    def event(self, name: str | None, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        response = data.get("response")
        if isinstance(response, dict):
            self._take(response)
        if data.get("type") == "response.output_item.done" and isinstance(data.get("item"), dict):
            self._items.append(data["item"])
        return data

    def recorded(self) -> Recorded:
        response = self._response
        if self.stream and not (
            isinstance(response, dict) and response.get("status") not in (None, "in_progress")
        ):
            # the stream ended before its last event: what was done of it
            response = {**(response or {}), "output": self._items, "status": "incomplete"}
        out = Recorded(response=response)
        if isinstance(response, dict):
            # read, never changed: a call's record may be read more than once (whether
            # the server had finished, when the agent hangs up; then the record itself)
            prompt = _raw_tokens(response.get("input_messages"))
            completion = _raw_tokens(response.get("output_messages"))
            out.response = response = {
                k: v for k, v in response.items() if k not in ("input_messages", "output_messages")
            }
            if prompt is not None and completion is not None:
                out.prompt_token_ids, out.completion_token_ids = prompt, completion
            out.usage = responses_usage(response.get("usage"))
            status = response.get("status")
            details = response.get("incomplete_details")
            reason = details.get("reason") if isinstance(details, dict) else None
            out.finish_reason = reason if isinstance(reason, str) else status
        note = self.token_note(out)
        out.token_note = (
            _NO_LOGPROBS if note == "the server returned token ids but no logprobs" else note
        )
        return out
