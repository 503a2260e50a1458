"""Token ids and logprobs of a multi-turn rollout, from what the model server returned.

vLLM returns, when asked (``"return_token_ids": true``, ``"logprobs": true``),
``prompt_token_ids`` beside a chat completion and ``token_ids`` and
``logprobs`` on its choice (:class:`~agentkit.chat.ChatResponse` carries them
as ``prompt_token_ids``, ``token_ids`` and ``logprobs``). A harness hands each
call's to a :class:`TokenTrace`; at the end :meth:`TokenTrace.to_raw` gives
the fields :mod:`agentkit.training` reads from ``HarnessResult.raw``:

- ``prompt_token_ids``: the first call's prompt;
- ``completion_token_ids``: everything after it up to the end of the last
  response: each response's tokens, and between two responses the tokens the
  next prompt adds (the observation, the chat template's markers);
- ``completion_mask``: 1 for the model's tokens, 0 for the others;
- ``completion_logprobs``: the sampled tokens' logprobs, 0.0 elsewhere (only
  when every response carried them).

This needs each prompt to extend the previous prompt and response, as chat
templates do. When one does not (a template that rewrites earlier turns), or
some responses carried no token ids, or ids that are not all of the
completion's (:func:`~agentkit.chat.completion_ids_gap`), nothing is recorded but
``token_ids_note`` saying why.

The token fields are read, a completion's ids held against its usage and
logprobs (:func:`~agentkit.chat.completion_ids_gap`), and the calls stitched
into one sequence (``SequenceBuilder``) by :mod:`agentkit._tokens`, as the
model proxy reads them and training export stitches a recorded rollout's
calls.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agentkit._tokens import ChatTokens, ChoiceTokens, SequenceBuilder

__all__ = ["TokenTrace", "completion_tokens", "response_tokens"]


def completion_tokens(data: Mapping[str, Any]) -> ChatTokens[ChoiceTokens]:
    """The token fields of a whole chat completion body (vLLM's or SGLang's names)."""
    tokens = ChatTokens(ChoiceTokens)
    if isinstance(data, dict):
        tokens.whole(data)
    return tokens


def response_tokens(
    data: Mapping[str, Any],
) -> tuple[list[int] | None, list[int] | None, list[float] | None]:
    """``(prompt_token_ids, token_ids, logprobs)`` of a chat completion body: its
    prompt's ids, its first choice's ids and their logprobs (vLLM's fields, or SGLang's
    ``prompt_token_ids`` and ``response_token_ids`` on the choice), each a new list."""
    tokens = completion_tokens(data)
    first = tokens.first()
    prompt = tokens.prompt_ids
    ids = first.token_ids if first is not None else None
    logprobs = first.logprobs if first is not None else None
    return (
        None if prompt is None else list(prompt),
        None if ids is None else list(ids),
        logprobs,
    )


class TokenTrace:
    """The token-level record of one rollout, built one model response at a time."""

    def __init__(self) -> None:
        self._turns: list[tuple[list[int] | None, list[int] | None, list[float] | None]] = []
        self._gaps: dict[int, str] = {}  # call index -> why its ids are not exact

    def add(
        self,
        prompt_ids: list[int] | None,
        completion_ids: list[int] | None,
        logprobs: list[float] | None = None,
        *,
        gap: str | None = None,
    ) -> None:
        """One model call: its prompt's ids, its response's ids and their logprobs;
        ``gap`` says why those ids are not all the completion's, when they are not
        (:attr:`ChatResponse.token_gap <agentkit.chat.ChatResponse.token_gap>`):
        then the rollout records no token-level data, and says why."""
        if gap is not None:
            self._gaps[len(self._turns)] = gap
        self._turns.append((prompt_ids, completion_ids, logprobs))

    def add_response(self, data: Mapping[str, Any]) -> None:
        """One model call, read from its chat completion body (its ids held against
        its usage and logprobs: :func:`~agentkit.chat.completion_ids_gap`)."""
        tokens = completion_tokens(data)
        first = tokens.first()
        if first is None:
            self.add(tokens.prompt_ids, None, None)
        else:
            self.add(tokens.prompt_ids, first.token_ids, first.logprobs, gap=tokens.gap(first))

    def to_raw(self) -> dict[str, Any]:
        """The fields for ``HarnessResult.raw`` (empty when no response had token ids)."""
        if not self._turns or all(p is None and c is None for p, c, _ in self._turns):
            return {}
        if self._gaps:
            first = min(self._gaps)
            gap = self._gaps[first]
            return {"token_ids_note": f"model call {first + 1}: {gap}: no token-level data"}
        for index, (prompt, completion, _) in enumerate(self._turns):
            if prompt is None or completion is None:
                return {
                    "token_ids_note": f"model call {index + 1} returned no prompt or "
                    "completion token ids: no token-level data"
                }
        first_prompt = self._turns[0][0] or []
        sequence = SequenceBuilder(first_prompt)
        for index, (prompt, completion, lps) in enumerate(self._turns):
            assert prompt is not None and completion is not None
            if not sequence.extends(prompt):
                return {
                    "token_ids_note": f"the prompt of model call {index + 1} does not extend "
                    "the previous prompt and response: no token-level data"
                }
            sequence.add(prompt, completion, lps)
        raw: dict[str, Any] = {
            "prompt_token_ids": sequence.prompt,
            "completion_token_ids": sequence.completion,
            "completion_mask": sequence.mask,
        }
        if sequence.logprobs is not None:
            raw["completion_logprobs"] = sequence.logprobs
        return raw
