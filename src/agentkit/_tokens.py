"""Token ids of model calls: the server's token fields, and the sequences calls stitch into.

One definition, below the chat client, the model proxy and the training
exports, which all use it:

- :func:`int_list`: a list of token ids (JSON integers), the one check;
- :class:`ChatTokens`: the token fields of one chat completion, whole or
  streamed, read from vLLM's names (``prompt_token_ids`` beside the
  completion, each choice's ``token_ids`` and ``logprobs.content``) and
  SGLang's (a whole completion's choice's ``prompt_token_ids`` and
  ``response_token_ids``; a stream's ``sglext`` with ``input_ids`` and
  ``output_ids``);
- :func:`completion_ids_gap`: whether a completion's ids are all of it;
- :class:`SequenceBuilder`: one token sequence, built call by call: a prompt,
  then each call's new prompt tokens (the observation, the chat template's
  markers: mask 0, logprob 0.0) and its sampled tokens (mask 1, their
  logprobs). :class:`~agentkit.chat.TokenTrace` (a harness's calls, into
  ``HarnessResult.raw``) and training export (a recorded rollout's calls) both
  build theirs with it.

**Gaps.** A server can return fewer completion ids than it sampled: vLLM's
tool parsers dropped whole streamed chunks, ids and all, before late 2025
(vllm-project/vllm#29074). :func:`completion_ids_gap` holds a completion's
ids against what else the answer says about them: ``usage.completion_tokens``
(the tokens the server sampled, for one choice), the number of
``logprobs.content`` entries (one per sampled token), and the ids those
entries name when their ``token`` is vLLM's ``token_id:N`` (a request with
``return_tokens_as_token_ids``). Ids that disagree are not exact, and are
never taken as if they were.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from operator import countOf
from typing import Any, Generic, TypeVar

__all__ = [
    "ChatTokens",
    "ChoiceTokens",
    "SequenceBuilder",
    "completion_ids_gap",
    "int_list",
    "logprob_values",
    "numbers",
]


def int_list(value: Any) -> list[int] | None:
    """``value`` itself when it is a list of integers (token ids), else None. JSON's
    ``true`` and ``false`` are not integers here, nor is ``1.0``."""
    # every item's type is int itself (counted in C: no bool, float or anything else)
    if type(value) is list and countOf(map(type, value), int) == len(value):
        return value
    return None


def numbers(value: Any) -> list[float] | None:
    """``value``'s items as floats when it is a list of numbers (not ``true``/``false``),
    else None."""
    if isinstance(value, list) and all(
        isinstance(v, (int, float)) and not isinstance(v, bool) for v in value
    ):
        return [float(v) for v in value]
    return None


def logprob_values(entries: Any) -> list[float] | None:
    """The ``logprob`` of every entry of ``logprobs.content`` (a list of objects), when
    each has a number there; else None."""
    if not isinstance(entries, list):
        return None
    out: list[float] = []
    for entry in entries:
        value = entry.get("logprob") if isinstance(entry, dict) else None
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            return None
        out.append(float(value))
    return out


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def completion_ids_gap(
    ids: Sequence[int], *, completion_tokens: Any = None, logprobs: Sequence[Any] | None = None
) -> str | None:
    """Why ``ids`` are not all of a completion's token ids, or None when nothing the
    answer says disagrees with them.

    ``completion_tokens``: the answer's ``usage.completion_tokens`` (its one choice's;
    anything but a whole number is not compared); ``logprobs``: its
    ``logprobs.content`` entries, one per sampled token (None: it had none).
    """
    n = len(ids)
    counted = _count(completion_tokens)
    if counted is not None and counted != n:
        return (
            f"the completion's token ids are not all there: {n} ids, but "
            f"usage.completion_tokens is {counted} (the server lost some, as vLLM's "
            "tool parsers did with streamed chunks)"
        )
    if logprobs is None:
        return None
    if len(logprobs) != n:
        return (
            f"the completion's token ids are not all there: {n} ids, but "
            f"{len(logprobs)} logprobs (one per sampled token)"
        )
    named = [e.get("token") if isinstance(e, Mapping) else None for e in logprobs]
    if named and all(isinstance(t, str) and t.startswith("token_id:") for t in named):
        try:
            by_name = [int(str(t)[len("token_id:") :]) for t in named]
        except ValueError:
            return None
        if by_name != list(ids):
            first = next(i for i, (a, b) in enumerate(zip(by_name, ids, strict=True)) if a != b)
            return (
                f"the completion's token ids are not the sampled ones: id {first} is "
                f"{ids[first]}, but its logprob names token_id:{by_name[first]}"
            )
    return None


# -- the token fields of a chat completion --------------------------------------------


class ChoiceTokens:
    """The token fields of one choice: its completion's ids, their logprobs and the
    ``logprobs.content`` entries (whole, or gathered from a stream's chunks)."""

    __slots__ = ("broken", "entries", "logprobs", "token_ids")

    def __init__(self) -> None:
        self.token_ids: list[int] | None = None
        self.logprobs: list[float] | None = None
        #: The ``logprobs.content`` entries, one per sampled token.
        self.entries: list[Any] | None = None
        #: A chunk's logprobs could not be read: none are taken.
        self.broken = False

    def whole(self, choice: dict[str, Any]) -> bool:
        """A whole completion's choice: vLLM's ``token_ids``, else SGLang's
        ``response_token_ids`` (then True: its prompt's ids are on the choice too)."""
        self.token_ids = int_list(choice.get("token_ids"))
        sglang = self.token_ids is None
        if sglang:
            self.token_ids = int_list(choice.get("response_token_ids"))
        block = choice.get("logprobs")
        entries = block.get("content") if isinstance(block, dict) else None
        self.logprobs = logprob_values(entries)
        self.entries = entries if isinstance(entries, list) else None
        return sglang

    def rest(self, choice: dict[str, Any]) -> None:
        """What else a stream chunk's choice says (its delta, its finish reason), for a
        subclass that keeps it (the model proxy's assembles the message); nothing here."""

    def add_logprobs(self, entries: list[Any] | None, values: list[float] | None) -> None:
        """A chunk's logprobs: its entries, one per sampled token (None: it has none), and
        their values (None: they cannot be read, and no logprobs are taken)."""
        if entries is not None:
            self.entries = (self.entries or []) + entries
        if values is None:
            self.broken = True
        else:
            self.logprobs = (self.logprobs or []) + values

    def sampled_logprobs(self) -> list[float] | None:
        """The logprobs of the completion's ids, when there is one for each."""
        ids, logprobs = self.token_ids, self.logprobs
        if self.broken or logprobs is None or ids is None or len(logprobs) != len(ids):
            return None
        return logprobs


C = TypeVar("C", bound=ChoiceTokens)


class ChatTokens(Generic[C]):
    """The token fields of one chat completion (vLLM's or SGLang's), read from the whole
    body (:meth:`whole`) or from each chunk of its stream (:meth:`chunk`). Never raises:
    a field of the wrong type is as if absent.

    ``choice`` makes the record of a new choice (a subclass of :class:`ChoiceTokens`
    may keep more of it: the model proxy's keeps its message).
    """

    def __init__(self, choice: type[C]) -> None:
        self._new = choice
        self.prompt_ids: list[int] | None = None
        #: The choices by index.
        self.choices: dict[int, C] = {}
        #: The answer's ``usage`` object (a stream's: the last one sent).
        self.usage: Any = None

    def choice(self, index: int) -> C:
        """The record of choice ``index`` (made when new)."""
        state = self.choices.get(index)
        if state is None:
            state = self.choices[index] = self._new()
        return state

    @staticmethod
    def index_of(choice: dict[str, Any], position: int) -> int:
        """A choice's ``index``, or its position in ``choices`` when it has none."""
        index = choice.get("index", position)
        return index if type(index) is int else position

    def whole(self, data: dict[str, Any]) -> None:
        """A whole ``chat.completion`` body."""
        self.prompt_ids = int_list(data.get("prompt_token_ids"))
        self.usage = data.get("usage")
        choices = data.get("choices")
        if not isinstance(choices, list):
            return
        for position, choice in enumerate(choices):
            if isinstance(choice, dict):
                sglang = self.choice(self.index_of(choice, position)).whole(choice)
                if sglang and self.prompt_ids is None:  # SGLang's names, on the choice
                    self.prompt_ids = int_list(choice.get("prompt_token_ids"))

    def chunk(self, data: dict[str, Any]) -> None:
        """One chunk of a stream (each choice's other fields go to its record's
        :meth:`ChoiceTokens.rest`)."""
        if "prompt_token_ids" in data:
            ids = int_list(data["prompt_token_ids"])
            if ids is not None:
                self.prompt_ids = ids
        usage = data.get("usage")
        if usage is not None:
            self.usage = usage
        sglext = data.get("sglext")
        if sglext is not None and isinstance(sglext, dict):
            # SGLang's ids, once, after the choices' chunks
            ids = int_list(sglext.get("input_ids"))
            if ids is not None:
                self.prompt_ids = ids
            outputs = sglext.get("output_ids")
            if isinstance(outputs, list):
                for index, output in enumerate(outputs):
                    self.choice(index).token_ids = int_list(output)
        choices = data.get("choices")
        if isinstance(choices, list):
            known = self.choices
            for position, choice in enumerate(choices):
                if isinstance(choice, dict):
                    index = choice.get("index", position)
                    if type(index) is not int:
                        index = position
                    state = known.get(index)
                    if state is None:
                        state = known[index] = self._new()
                    # its ids and logprobs follow the earlier chunks'
                    if "token_ids" in choice:
                        ids = int_list(choice["token_ids"])
                        if ids is not None:
                            state.token_ids = (state.token_ids or []) + ids
                    block = choice.get("logprobs")
                    if block is not None and isinstance(block, dict):
                        entries = block.get("content")
                        state.add_logprobs(
                            entries if isinstance(entries, list) else None, logprob_values(entries)
                        )
                    state.rest(choice)

    def first(self) -> C | None:
        """The first choice (the lowest index), whose tokens a call records."""
        return self.choices[min(self.choices)] if self.choices else None

    def gap(self, choice: ChoiceTokens) -> str | None:
        """Why ``choice``'s ids are not all its completion's (:func:`completion_ids_gap`;
        the usage is compared when it counts this one choice only)."""
        if choice.token_ids is None:
            return None
        usage = self.usage if isinstance(self.usage, dict) else {}
        counted = usage.get("completion_tokens") if len(self.choices) == 1 else None
        return completion_ids_gap(
            choice.token_ids, completion_tokens=counted, logprobs=choice.entries
        )


# -- one token sequence ----------------------------------------------------------------


class SequenceBuilder:
    """One token sequence being built: a prompt, then what each call adds.

    Each call's prompt must extend the tokens so far (:meth:`extends`); what it
    adds (the observation, the chat template's markers) joins the completion
    with mask 0 and logprob 0.0, then its sampled tokens with mask 1 and their
    logprobs. ``logprobs`` becomes None for good once a call has none for each
    of its sampled tokens. ``full`` is the prompt and the completion so far.
    """

    __slots__ = ("full", "logprobs", "mask", "prompt_len")

    def __init__(self, prompt: list[int]) -> None:
        self.full: list[int] = list(prompt)
        self.prompt_len = len(prompt)
        self.mask: list[int] = []
        self.logprobs: list[float] | None = []

    def extends(self, prompt: list[int]) -> bool:
        """Whether ``prompt`` starts with every token so far."""
        n = len(self.full)
        return len(prompt) >= n and prompt[:n] == self.full

    def add(self, prompt: list[int], completion: list[int], logprobs: list[float] | None) -> int:
        """One call (its prompt extends the tokens so far): what its prompt adds, then
        its ``completion``; returns where its prompt ends in :attr:`full`."""
        full = self.full
        added = len(prompt) - len(full)
        if added > 0:
            full.extend(prompt[len(full) :])
            self.mask.extend([0] * added)
            if self.logprobs is not None:
                self.logprobs.extend([0.0] * added)
        end = len(full)
        full.extend(completion)
        self.mask.extend([1] * len(completion))
        if self.logprobs is not None and logprobs is not None and len(logprobs) == len(completion):
            self.logprobs.extend(logprobs)
        else:
            self.logprobs = None
        return end

    @property
    def prompt(self) -> list[int]:
        """The first call's prompt."""
        return self.full[: self.prompt_len]

    @property
    def completion(self) -> list[int]:
        """Everything after the prompt."""
        return self.full[self.prompt_len :]
