"""Legacy completions (``POST .../completions``) through the proxy, with vLLM's token fields.

With the run's ``token_ids`` on, the proxy adds ``return_token_ids: true`` and,
when the agent gave no ``logprobs``, ``logprobs: 0`` (the sampled token's
logprob only); the answer loses each choice's ``prompt_token_ids``,
``token_ids`` and (unasked) ``logprobs`` again. Recorded: the completion
(streamed: the chunks' text joined), usage, finish reason, and the first
choice's ``prompt_token_ids``, ``token_ids`` and ``logprobs.token_logprobs``;
ids that are not all the completion's (fewer than ``usage.completion_tokens``
or than the logprobs: :func:`agentkit._tokens.completion_ids_gap`) are not
recorded, and the ``token_note`` says what differs.
"""

from __future__ import annotations

from typing import Any, ClassVar

from agentkit._calls import WireProtocol
from agentkit._tokens import ChoiceTokens, completion_ids_gap, int_list, numbers
from agentkit.proxy._openai_wire import OpenAIWire
from agentkit.proxy._wire import Recorded, openai_usage

__all__ = ["CompletionsWire"]


class CompletionsWire(OpenAIWire):
    """``/completions`` (not ``/chat/completions``): text completions, vLLM's token fields."""

    protocol: ClassVar[WireProtocol] = "completions"
    endpoints: ClassVar[tuple[str, ...]] = ("/completions",)

    def __init__(
        self, request: dict[str, Any], settings: Any, memory: dict[str, Any] | None = None
    ) -> None:
        self._text: list[str] = []
        self._finish: str | None = None
        self._prompt_ids: list[int] | None = None
        self._tokens = ChoiceTokens()  # the first choice's
        self._indices: set[Any] = set()  # the choices seen (the usage counts them all)
        self._usage: Any = None
        super().__init__(request, settings, memory)

    @classmethod
    def matches(cls, path: str) -> bool:
        return path.endswith("/completions") and not path.endswith("/chat/completions")

    def prepare(self) -> None:
        request = self.request
        self.ids_asked = request.get("return_token_ids") is True
        if self.settings.token_ids:
            if not self.ids_asked:
                self.ask("return_token_ids", True)
                self._strip_ids = self.ids_asked = True
            if request.get("logprobs") is None:
                self.ask("logprobs", 0)
                self._strip_logprobs = True
        self.ask_stream_usage()
        self.ask_cache_salt()

    def _choice(self, choice: dict[str, Any], first: bool) -> None:
        if first:
            ids = int_list(choice.get("prompt_token_ids"))
            if ids is not None:
                self._prompt_ids = ids
            tokens = self._tokens
            ids = int_list(choice.get("token_ids"))
            if ids is not None:
                tokens.token_ids = (tokens.token_ids or []) + ids
            block = choice.get("logprobs")
            if isinstance(block, dict):
                named = block.get("tokens")
                counted = block.get("token_logprobs")
                entries = None
                if isinstance(counted, list):
                    names = named if isinstance(named, list) else []
                    entries = [
                        {"token": names[i] if i < len(names) else None} for i in range(len(counted))
                    ]
                tokens.add_logprobs(entries, numbers(counted))
            if isinstance(choice.get("text"), str):
                self._text.append(choice["text"])
            if isinstance(choice.get("finish_reason"), str):
                self._finish = choice["finish_reason"]
        if self._strip_ids:
            choice.pop("prompt_token_ids", None)
            choice.pop("token_ids", None)
        if self._strip_logprobs and "logprobs" in choice:
            choice["logprobs"] = None

    def _choices(self, data: dict[str, Any]) -> list[Any] | None:
        choices = data.get("choices")
        if not isinstance(choices, list):
            return None
        for position, choice in enumerate(choices):
            if isinstance(choice, dict):
                index = choice.get("index", position)
                self._indices.add(index)
                self._choice(choice, first=index == 0)
        return choices

    def answer(self, data: Any) -> Any:
        if isinstance(data, dict):
            self._usage = data.get("usage")
            self._choices(data)
        self._whole = data
        return data

    def event(self, name: str | None, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        for key in ("id", "model", "created"):
            if key in data and key not in self._top:
                self._top[key] = data[key]
        if data.get("usage") is not None:
            self._usage = data["usage"]
        choices = self._choices(data)
        if self._strip_usage:
            data.pop("usage", None)
            if choices == []:
                return None
        return data

    def recorded(self) -> Recorded:
        if self.stream and self._whole is None:
            response: Any = {
                **self._top,
                "object": "text_completion",
                "choices": [
                    {"index": 0, "text": "".join(self._text), "finish_reason": self._finish}
                ],
                "usage": self._usage,
            }
        else:
            response = self._whole
        out = Recorded(
            response=response,
            usage=openai_usage(self._usage),
            finish_reason=self._finish,
            prompt_token_ids=self._prompt_ids,
            completion_token_ids=self._tokens.token_ids,
        )
        ids = self._tokens.token_ids
        if ids is not None:
            usage = self._usage if isinstance(self._usage, dict) else {}
            counted = usage.get("completion_tokens") if len(self._indices) == 1 else None
            gap = completion_ids_gap(ids, completion_tokens=counted, logprobs=self._tokens.entries)
            if gap is not None:  # not all the completion's ids: none are taken for them
                out.completion_token_ids = None
                out.token_note = gap
                return out
        out.completion_logprobs = self._tokens.sampled_logprobs()
        out.token_note = self.token_note(out)
        return out
