"""A token-in/token-out sampler: the :class:`Sampler` protocol, and Tinker's sampling
client as one (:class:`TinkerSampler`)."""

from __future__ import annotations

from typing import Any, Literal, Protocol

import attrs

__all__ = ["Sampled", "Sampler", "SamplingRequest", "TinkerSampler"]


@attrs.frozen(kw_only=True)
class SamplingRequest:
    """What to sample: after ``prompt_ids`` (the rendered conversation), at most
    ``max_tokens`` tokens (None: the sampler's limit), at ``temperature`` and
    ``top_p``, stopping after any of ``stop_token_ids`` (the chat template's end of
    turn); ``seed`` when the caller gave one."""

    prompt_ids: list[int]
    max_tokens: int | None = None
    temperature: float = 1.0
    top_p: float = 1.0
    stop_token_ids: list[int] = attrs.field(factory=list)
    seed: int | None = None


@attrs.frozen(kw_only=True)
class Sampled:
    """What a sampler returned: the sampled ``token_ids`` (a stop token included, as
    sampled), each one's ``logprobs`` under the policy that sampled it, and why it
    stopped (``stop``: a stop token or the model's end; ``length``: ``max_tokens``)."""

    token_ids: list[int]
    logprobs: list[float]
    finish_reason: Literal["stop", "length"]

    def __attrs_post_init__(self) -> None:
        if len(self.token_ids) != len(self.logprobs):
            raise ValueError(
                f"a sampler returned {len(self.token_ids)} token ids and "
                f"{len(self.logprobs)} logprobs: one logprob per token is expected"
            )


class Sampler(Protocol):
    """Anything that samples tokens after a prompt of token ids."""

    async def sample(self, request: SamplingRequest) -> Sampled:
        """The tokens sampled after ``request.prompt_ids``, with their logprobs."""
        ...


@attrs.define
class TinkerSampler:
    """Tinker's sampling client (``tinker.SamplingClient``, or anything with its
    ``sample(prompt=, num_samples=, sampling_params=)``) as a :class:`Sampler`: one
    sequence per request, with its logprobs."""

    client: Any

    async def sample(self, request: SamplingRequest) -> Sampled:
        """One sequence from the client, its ``SampledSequence`` as :class:`Sampled`."""
        import tinker  # deferred: Tinker's SDK, for this sampler only

        params = tinker.SamplingParams(
            max_tokens=request.max_tokens,
            temperature=request.temperature,
            top_p=request.top_p,
            seed=request.seed,
            stop=list(request.stop_token_ids) or None,
        )
        response = await self.client.sample(
            prompt=tinker.ModelInput.from_ints(list(request.prompt_ids)),
            num_samples=1,
            sampling_params=params,
        )
        (sequence,) = response.sequences
        tokens = list(sequence.tokens)
        logprobs = sequence.logprobs
        if logprobs is None:
            raise ValueError("Tinker's sampling client returned no logprobs for the sequence")
        reason: Literal["stop", "length"] = "length" if sequence.stop_reason == "length" else "stop"
        return Sampled(token_ids=tokens, logprobs=list(logprobs), finish_reason=reason)
