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
some responses carried no token ids, nothing is recorded but
``token_ids_note`` saying why.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["TokenTrace", "response_tokens"]


def _ints(value: Any) -> list[int] | None:
    if isinstance(value, list) and all(
        isinstance(v, int) and not isinstance(v, bool) for v in value
    ):
        return list(value)
    return None


def response_tokens(
    data: Mapping[str, Any],
) -> tuple[list[int] | None, list[int] | None, list[float] | None]:
    """``(prompt_token_ids, token_ids, logprobs)`` of a chat completion body (vLLM's fields)."""
    choices = data.get("choices")
    choice = choices[0] if isinstance(choices, list) and choices else {}
    choice = choice if isinstance(choice, Mapping) else {}
    logprobs: list[float] | None = None
    block = choice.get("logprobs")
    content = block.get("content") if isinstance(block, Mapping) else None
    if isinstance(content, list):
        values = [
            float(v)
            for c in content
            if isinstance(c, Mapping)
            and isinstance(v := c.get("logprob"), (int, float))
            and not isinstance(v, bool)
        ]
        if len(values) == len(content):
            logprobs = values
    return _ints(data.get("prompt_token_ids")), _ints(choice.get("token_ids")), logprobs


class TokenTrace:
    """The token-level record of one rollout, built one model response at a time."""

    def __init__(self) -> None:
        self._turns: list[tuple[list[int] | None, list[int] | None, list[float] | None]] = []

    def add(
        self,
        prompt_ids: list[int] | None,
        completion_ids: list[int] | None,
        logprobs: list[float] | None = None,
    ) -> None:
        """One model call: its prompt's ids, its response's ids and their logprobs."""
        self._turns.append((prompt_ids, completion_ids, logprobs))

    def add_response(self, data: Mapping[str, Any]) -> None:
        """One model call, read from its chat completion body."""
        self.add(*response_tokens(data))

    def to_raw(self) -> dict[str, Any]:
        """The fields for ``HarnessResult.raw`` (empty when no response had token ids)."""
        if not self._turns or all(p is None and c is None for p, c, _ in self._turns):
            return {}
        for index, (prompt, completion, _) in enumerate(self._turns):
            if prompt is None or completion is None:
                return {
                    "token_ids_note": f"model call {index + 1} returned no prompt or "
                    "completion token ids: no token-level data"
                }
        first_prompt = self._turns[0][0] or []
        ids: list[int] = []
        mask: list[int] = []
        logprobs: list[float] | None = []
        seen = list(first_prompt)
        for index, (prompt, completion, lps) in enumerate(self._turns):
            assert prompt is not None and completion is not None
            if prompt[: len(seen)] != seen:
                return {
                    "token_ids_note": f"the prompt of model call {index + 1} does not extend "
                    "the previous prompt and response: no token-level data"
                }
            gap = prompt[len(seen) :]
            ids += gap + completion
            mask += [0] * len(gap) + [1] * len(completion)
            if logprobs is not None and lps is not None and len(lps) == len(completion):
                logprobs += [0.0] * len(gap) + lps
            else:
                logprobs = None
            seen = prompt + completion
        raw: dict[str, Any] = {
            "prompt_token_ids": list(first_prompt),
            "completion_token_ids": ids,
            "completion_mask": mask,
        }
        if logprobs is not None:
            raw["completion_logprobs"] = logprobs
        return raw
