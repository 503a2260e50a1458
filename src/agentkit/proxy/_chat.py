"""Chat completions (``POST .../chat/completions``) through the proxy, with vLLM's token fields.

With the run's ``token_ids`` on, the proxy adds ``return_token_ids: true``
(vLLM 0.10.2 or later) and ``logprobs: true`` (``top_logprobs`` as the agent
set it) when the agent did not, and takes out of the answer what the agent
did not ask for: ``prompt_token_ids`` (at the top of the completion, or of a
stream's first chunk), each choice's ``token_ids``, and its ``logprobs``
(null, as the server sends it unasked). A stream without
``stream_options.include_usage`` is asked for its usage too (recorded; the
usage chunk and the ``usage`` fields are taken out again). ``cache_salt`` is
added when the run gives one.

Recorded: the completion (streamed: assembled from the chunks), its usage
and finish reason, ``prompt_token_ids`` and the first choice's ``token_ids``
and sampled logprobs (``logprobs.content[].logprob``). Ids that are not all
the completion's (fewer than ``usage.completion_tokens``, or than the
logprobs: :func:`agentkit._tokens.completion_ids_gap`) are not recorded: the
call's ``token_note`` says what differs.

SGLang (its ``/v1/models`` says ``owned_by: sglang``, :data:`ENGINE` in the
route's memory) names its fields otherwise and refuses a stream that asks
for ``return_token_ids`` (HTTP 400): a whole completion is asked
``return_token_ids`` and read from its choice's ``prompt_token_ids`` and
``response_token_ids``; a stream is asked ``return_input_ids_in_sglext`` and
``return_output_ids_in_sglext`` instead, and read from the chunk whose
``sglext`` has ``input_ids`` and ``output_ids`` (taken out again when the
agent did not ask).
"""

from __future__ import annotations

from typing import Any, ClassVar

from agentkit._calls import WireProtocol
from agentkit._tokens import ChatTokens, ChoiceTokens
from agentkit.proxy._openai_wire import OpenAIWire
from agentkit.proxy._wire import Recorded, openai_usage

__all__ = ["ENGINE", "ChatWire"]

#: The route-memory key of the serving engine, when the proxy asked it (``sglang``, ``vllm``).
ENGINE = "engine"


class _Choice(ChoiceTokens):
    """One choice: its token fields (:class:`~agentkit._tokens.ChoiceTokens`) and, of a
    stream, its message assembled from the deltas."""

    __slots__ = ("content", "finish", "reasoning", "tools")

    def __init__(self) -> None:
        super().__init__()
        self.content: list[str] = []
        self.reasoning: list[str] = []
        self.tools: dict[int, dict[str, Any]] = {}
        self.finish: str | None = None

    def rest(self, choice: dict[str, Any]) -> None:
        """A stream chunk's choice's message part and finish reason (its tokens are read)."""
        delta = choice.get("delta")
        if isinstance(delta, dict):
            content = delta.get("content")
            if content.__class__ is str:
                self.content.append(content)
            reasoning = delta.get("reasoning_content")
            if reasoning is None:
                reasoning = delta.get("reasoning")
            if reasoning.__class__ is str:
                self.reasoning.append(reasoning)
            tools = delta.get("tool_calls")
            if isinstance(tools, list):
                for part in tools:
                    self.add_tool_part(part)
        finish = choice.get("finish_reason")
        if finish.__class__ is str:
            self.finish = finish

    def message(self) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": "".join(self.content) or None}
        if self.reasoning:
            message["reasoning_content"] = "".join(self.reasoning)
        if self.tools:
            message["tool_calls"] = [self.tools[i] for i in sorted(self.tools)]
        return message

    def add_tool_part(self, part: Any) -> None:
        if not isinstance(part, dict):
            return
        index = part.get("index", len(self.tools))
        index = index if type(index) is int else len(self.tools)
        call = self.tools.setdefault(
            index, {"id": "", "type": "function", "function": {"name": "", "arguments": ""}}
        )
        if isinstance(part.get("id"), str) and part["id"]:
            call["id"] = part["id"]
        function = part.get("function")
        if isinstance(function, dict):
            for key in ("name", "arguments"):
                piece = function.get(key)
                if isinstance(piece, str):
                    call["function"][key] += piece


class ChatWire(OpenAIWire):
    """``/chat/completions``: OpenAI chat completions, vLLM's token fields."""

    protocol: ClassVar[WireProtocol] = "chat"
    endpoints: ClassVar[tuple[str, ...]] = ("/chat/completions",)

    def __init__(
        self, request: dict[str, Any], settings: Any, memory: dict[str, Any] | None = None
    ) -> None:
        self._tokens = ChatTokens(_Choice)
        super().__init__(request, settings, memory)

    @classmethod
    def matches(cls, path: str) -> bool:
        return path.endswith("/chat/completions")

    def prepare(self) -> None:
        request = self.request
        self.ids_asked = request.get("return_token_ids") is True
        sglang_stream = self.stream and self.memory.get(ENGINE) == "sglang"
        if sglang_stream:
            self.ids_asked = request.get("return_output_ids_in_sglext") is True
        if self.settings.token_ids:
            if sglang_stream and not self.ids_asked:
                # SGLang answers a stream asked for return_token_ids with a 400
                self.ask("return_input_ids_in_sglext", True)
                self.ask("return_output_ids_in_sglext", True)
                self._strip_ids = self.ids_asked = True
            elif not self.ids_asked:
                self.ask("return_token_ids", True)
                self._strip_ids = self.ids_asked = True
            if request.get("logprobs") is not True:
                self.ask("logprobs", True)
                self._strip_logprobs = True
        self.ask_stream_usage()
        self.ask_cache_salt()

    # -- a whole completion ----------------------------------------------------
    def answer(self, data: Any) -> Any:
        if not isinstance(data, dict):
            self._whole = data
            return data
        tokens = self._tokens
        tokens.whole(data)
        choices = data.get("choices")
        if isinstance(choices, list):
            for position, choice in enumerate(choices):
                if not isinstance(choice, dict):
                    continue
                if isinstance(choice.get("finish_reason"), str):
                    tokens.choice(tokens.index_of(choice, position)).finish = choice[
                        "finish_reason"
                    ]
                self._strip_choice(choice)
        if self._strip_ids:
            data.pop("prompt_token_ids", None)
        self._whole = data
        return data

    def _strip_choice(self, choice: dict[str, Any]) -> None:
        if self._strip_ids:
            choice.pop("token_ids", None)
            choice.pop("response_token_ids", None)
            choice.pop("prompt_token_ids", None)
        if self._strip_logprobs and "logprobs" in choice:
            choice["logprobs"] = None

    # -- a stream --------------------------------------------------------------
    def event(self, name: str | None, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        if len(self._top) < 4:
            for key in ("id", "model", "created", "system_fingerprint"):
                if key in data and key not in self._top:
                    self._top[key] = data[key]
        self._tokens.chunk(data)  # read before the fields the agent did not ask for go
        if self._strip_ids and isinstance(data.get("sglext"), dict):
            del data["sglext"]
            if data.get("choices") == [] and data.get("usage") is None:
                return None  # the ids chunk the agent did not ask for
        if self._strip_ids or self._strip_logprobs:
            choices = data.get("choices")
            if isinstance(choices, list):
                for choice in choices:
                    if isinstance(choice, dict):
                        self._strip_choice(choice)
        if self._strip_ids:
            data.pop("prompt_token_ids", None)
        if self._strip_usage:
            data.pop("usage", None)
            if data.get("choices") == []:
                return None  # the usage chunk the agent did not ask for
        return data

    # -- the record ----------------------------------------------------------------
    def recorded(self) -> Recorded:
        tokens = self._tokens
        first = tokens.first()
        if self.stream and self._whole is None:
            response: Any = {
                **self._top,
                "object": "chat.completion",
                "choices": [
                    {"index": i, "message": c.message(), "finish_reason": c.finish}
                    for i, c in sorted(tokens.choices.items())
                ],
                "usage": tokens.usage,
            }
        else:
            response = self._whole
        out = Recorded(
            response=response,
            usage=openai_usage(tokens.usage),
            finish_reason=None if first is None else first.finish,
            prompt_token_ids=tokens.prompt_ids,
        )
        if first is not None and (tokens.prompt_ids is not None or first.token_ids):
            gap = tokens.gap(first)
            if gap is not None:  # not all the completion's ids: none are taken for them
                out.token_note = gap
                return out
            out.completion_token_ids = first.token_ids
            out.completion_logprobs = first.sampled_logprobs()
        out.token_note = self.token_note(out)
        if out.token_note is None and len(tokens.choices) > 1:
            out.token_note = f"{len(tokens.choices)} choices: the first one's tokens are recorded"
        return out
