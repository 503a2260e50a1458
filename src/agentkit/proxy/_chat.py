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
logprobs: :func:`agentkit.chat.completion_ids_gap`) are not recorded: the
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

from agentkit._calls import Protocol
from agentkit.chat._tokens import completion_ids_gap
from agentkit.proxy._wire import Recorded, Wire, float_list, int_list, openai_usage

__all__ = ["ENGINE", "ChatWire"]

#: The route-memory key of the serving engine, when the proxy asked it (``sglang``, ``vllm``).
ENGINE = "engine"


class _Choice:
    """One choice of a stream, assembled from its deltas."""

    __slots__ = (
        "broken",
        "content",
        "entries",
        "finish",
        "logprobs",
        "reasoning",
        "token_ids",
        "tools",
    )

    def __init__(self) -> None:
        self.content: list[str] = []
        self.reasoning: list[str] = []
        self.tools: dict[int, dict[str, Any]] = {}
        self.finish: str | None = None
        self.token_ids: list[int] | None = None
        self.logprobs: list[float] | None = None
        self.broken = False  # a chunk's logprobs could not be read: none are recorded
        self.entries: list[Any] | None = None  # the logprobs.content entries, one per token

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


class ChatWire(Wire):
    """``/chat/completions``: OpenAI chat completions, vLLM's token fields."""

    protocol: ClassVar[Protocol] = "chat"
    endpoints: ClassVar[tuple[str, ...]] = ("/chat/completions",)
    no_ids_note: ClassVar[str] = (
        "the server returned no token ids (vLLM returns them from 0.10.2 on; other servers may not)"
    )

    def __init__(
        self, request: dict[str, Any], settings: Any, memory: dict[str, Any] | None = None
    ) -> None:
        self._strip_ids = False
        self._strip_logprobs = False
        self._strip_usage = False
        self._top: dict[str, Any] = {}
        self._choices: dict[int, _Choice] = {}
        self._prompt_ids: list[int] | None = None
        self._usage: Any = None
        self._whole: Any = None
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
        if self.stream:
            options = request.get("stream_options")
            if not (isinstance(options, dict) and options.get("include_usage") is True):
                self.ask("stream_options", {**(options or {}), "include_usage": True})
                self._strip_usage = True
        if self.settings.cache_salt is not None and "cache_salt" not in request:
            self.ask("cache_salt", self.settings.cache_salt)

    # -- a whole completion ----------------------------------------------------
    def answer(self, data: Any) -> Any:
        if not isinstance(data, dict):
            self._whole = data
            return data
        self._prompt_ids = int_list(data.get("prompt_token_ids"))
        self._usage = data.get("usage")
        choices = data.get("choices")
        if isinstance(choices, list):
            for position, choice in enumerate(choices):
                if not isinstance(choice, dict):
                    continue
                index = choice.get("index", position)
                state = self._choices.setdefault(
                    index if type(index) is int else position, _Choice()
                )
                state.token_ids = int_list(choice.get("token_ids"))
                if state.token_ids is None:  # SGLang's names, on the choice
                    state.token_ids = int_list(choice.get("response_token_ids"))
                    if self._prompt_ids is None:
                        self._prompt_ids = int_list(choice.get("prompt_token_ids"))
                block = choice.get("logprobs")
                entries = block.get("content") if isinstance(block, dict) else None
                state.logprobs = float_list(entries)
                state.entries = entries if isinstance(entries, list) else None
                if isinstance(choice.get("finish_reason"), str):
                    state.finish = choice["finish_reason"]
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
        if "prompt_token_ids" in data:
            ids = int_list(data["prompt_token_ids"])
            if ids is not None:
                self._prompt_ids = ids
        if data.get("usage") is not None:
            self._usage = data["usage"]
        sglext = data.get("sglext")
        if isinstance(sglext, dict):  # SGLang's ids, once, after the choices' chunks
            ids = int_list(sglext.get("input_ids"))
            if ids is not None:
                self._prompt_ids = ids
            outputs = sglext.get("output_ids")
            if isinstance(outputs, list):
                for index, output in enumerate(outputs):
                    state = self._choices.setdefault(index, _Choice())
                    state.token_ids = int_list(output)
            if self._strip_ids:
                del data["sglext"]
                if data.get("choices") == [] and data.get("usage") is None:
                    return None  # the ids chunk the agent did not ask for
        choices = data.get("choices")
        if isinstance(choices, list):
            for position, choice in enumerate(choices):
                if isinstance(choice, dict):
                    self._feed_choice(position, choice)
                    if self._strip_ids or self._strip_logprobs:
                        self._strip_choice(choice)
        if self._strip_ids:
            data.pop("prompt_token_ids", None)
        if self._strip_usage:
            data.pop("usage", None)
            if choices == []:
                return None  # the usage chunk the agent did not ask for
        return data

    def _feed_choice(self, position: int, choice: dict[str, Any]) -> None:
        index = choice.get("index", position)
        if type(index) is not int:
            index = position
        state = self._choices.get(index)
        if state is None:
            state = self._choices[index] = _Choice()
        delta = choice.get("delta")
        if isinstance(delta, dict):
            content = delta.get("content")
            if content.__class__ is str:
                state.content.append(content)
            reasoning = delta.get("reasoning_content")
            if reasoning is None:
                reasoning = delta.get("reasoning")
            if reasoning.__class__ is str:
                state.reasoning.append(reasoning)
            tools = delta.get("tool_calls")
            if isinstance(tools, list):
                for part in tools:
                    state.add_tool_part(part)
        if "token_ids" in choice:
            ids = int_list(choice["token_ids"])
            if ids is not None:
                state.token_ids = (state.token_ids or []) + ids
        block = choice.get("logprobs")
        if isinstance(block, dict):
            entries = block.get("content")
            if isinstance(entries, list):
                state.entries = (state.entries or []) + entries
            values = float_list(entries)
            if values is None:
                state.broken = True
            else:
                state.logprobs = (state.logprobs or []) + values
        finish = choice.get("finish_reason")
        if finish.__class__ is str:
            state.finish = finish

    # -- the record ----------------------------------------------------------------
    def _gap(self, choice: _Choice, ids: list[int]) -> str | None:
        """Why ``choice``'s ids are not all its completion's (its usage counts one choice)."""
        usage = self._usage if isinstance(self._usage, dict) else {}
        counted = usage.get("completion_tokens") if len(self._choices) == 1 else None
        return completion_ids_gap(ids, completion_tokens=counted, logprobs=choice.entries)

    def recorded(self) -> Recorded:
        first = self._choices.get(min(self._choices)) if self._choices else None
        if self.stream and self._whole is None:
            response: Any = {
                **self._top,
                "object": "chat.completion",
                "choices": [
                    {"index": i, "message": c.message(), "finish_reason": c.finish}
                    for i, c in sorted(self._choices.items())
                ],
                "usage": self._usage,
            }
        else:
            response = self._whole
        out = Recorded(
            response=response,
            usage=openai_usage(self._usage),
            finish_reason=None if first is None else first.finish,
            prompt_token_ids=self._prompt_ids,
        )
        if first is not None and (self._prompt_ids is not None or first.token_ids):
            ids = first.token_ids
            gap = None if ids is None else self._gap(first, ids)
            if gap is not None:  # not all the completion's ids: none are taken for them
                out.token_note = gap
                return out
            out.completion_token_ids = ids
            logprobs = None if first.broken else first.logprobs
            if logprobs is not None and ids is not None and len(logprobs) == len(ids):
                out.completion_logprobs = logprobs
        out.token_note = self.token_note(out)
        if out.token_note is None and len(self._choices) > 1:
            out.token_note = f"{len(self._choices)} choices: the first one's tokens are recorded"
        return out
