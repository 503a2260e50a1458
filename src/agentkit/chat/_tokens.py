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
completion's (:func:`completion_ids_gap`), nothing is recorded but
``token_ids_note`` saying why.

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
from typing import Any

__all__ = ["TokenTrace", "completion_ids_gap", "response_gap", "response_tokens"]


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


def response_gap(data: Mapping[str, Any], ids: list[int] | None) -> str | None:
    """:func:`completion_ids_gap` of a chat completion body's first choice."""
    if ids is None:
        return None
    choices = data.get("choices")
    usage = data.get("usage")
    counted = usage.get("completion_tokens") if isinstance(usage, Mapping) else None
    if not isinstance(choices, list) or len(choices) != 1:
        counted = None  # the usage counts every choice's tokens
    choice = choices[0] if isinstance(choices, list) and choices else {}
    block = choice.get("logprobs") if isinstance(choice, Mapping) else None
    content = block.get("content") if isinstance(block, Mapping) else None
    return completion_ids_gap(
        ids, completion_tokens=counted, logprobs=content if isinstance(content, list) else None
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
        its usage and logprobs: :func:`completion_ids_gap`)."""
        prompt, ids, logprobs = response_tokens(data)
        self.add(prompt, ids, logprobs, gap=response_gap(data, ids))

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
            added = prompt[len(seen) :]  # what the prompt adds: observation, markers
            ids += added + completion
            mask += [0] * len(added) + [1] * len(completion)
            if logprobs is not None and lps is not None and len(lps) == len(completion):
                logprobs += [0.0] * len(added) + lps
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
