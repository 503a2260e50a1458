"""A rollout's model calls turned into training sequences, token for token.

The rules (``docs/training-data.md``, "Sequences"):

- Calls are taken in order of ``index``. A call continues its *predecessor*:
  the call named by its ``parent`` when the caller set one, else the call
  before it.
- A call **merges** into the sequence its predecessor ended in when its
  prompt's token ids start with that sequence's prompt and completion so far.
  The tokens its prompt adds (the tool result, the chat template's markers)
  join the completion with mask 0 and logprob 0.0; its sampled tokens follow
  with mask 1 and their logprobs. A call without a parent may also merge into
  any other open sequence whose tokens its prompt extends (the longest), so
  two agents whose calls interleave stay two sequences.
- Otherwise the call **starts a new sequence** of the same rollout: a
  *branch* when it has a parent (a sub-agent, a parallel call: the sampled
  tokens of the sequence it forked from are not trained twice), else a
  *prefix break* (a chat template that rewrote earlier turns, a compacted
  context).
- A call that returned no token ids cannot be trained on: it is listed in
  :attr:`RolloutTokens.gaps` with the reason the proxy recorded
  (``ModelCall.token_note``), and the sequence it would have continued ends
  there (the next call starts a new one, ``after_gap``).
- A call that did not complete (an error status, or an ``error``: it failed,
  broke off, was cut short) is never trained, whatever it had sampled, and is
  skipped as if it had not happened: the agent's retry of the same prompt
  continues the sequence the failed call would have. The rollout stays
  complete unless what the failed call had sampled reached the agent's next
  prompt (a later call's prompt ids start with the failed call's prompt and
  partial completion, ``ModelCall.partial_token_ids``): then the policy's
  tokens are in the training data as prompt, not as samples, and the failed
  call is a gap saying so.

Nothing is re-tokenized: every id is one the model server returned.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Literal

import attrs

from agentkit._calls import ModelCall, TokenSource
from agentkit._tokens import SequenceBuilder

__all__ = ["CallGap", "RolloutTokens", "SequenceStart", "TokenSequence", "sequences_of"]

#: Why a sequence starts: the rollout's first, a call whose prompt does not extend
#: the running sequence, a call with a parent that could not continue it, the
#: first call after one without token ids.
SequenceStart = Literal["first", "prefix_break", "branch", "after_gap"]


@attrs.frozen(kw_only=True)
class CallGap:
    """A model call whose tokens are not trained, and why: it has no token ids
    (``ModelCall.token_note``), or it failed after sampling tokens a later prompt holds."""

    call: int
    reason: str

    def to_json(self) -> dict[str, object]:
        """``{"call": index, "reason": ...}``."""
        return {"call": self.call, "reason": self.reason}


@attrs.frozen(kw_only=True)
class TokenSequence:
    """One training sequence: a prompt, then everything the calls added after it.

    ``completion_mask`` is 1 exactly on the tokens the model sampled;
    ``completion_logprobs`` holds their logprobs (0.0 elsewhere), or is None
    when a merged call returned none. ``calls`` are the indices of the merged
    calls, in order; ``stop_reason`` is the last one's ``finish_reason``.
    """

    calls: tuple[int, ...]
    start: SequenceStart
    prompt_token_ids: list[int]
    completion_token_ids: list[int]
    completion_mask: list[int]
    completion_logprobs: list[float] | None
    stop_reason: str | None = None
    token_source: TokenSource = "server"


@attrs.frozen(kw_only=True)
class RolloutTokens:
    """A rollout's training sequences and the calls whose tokens are missing."""

    sequences: tuple[TokenSequence, ...]
    gaps: tuple[CallGap, ...] = ()
    calls: int = 0

    @property
    def complete(self) -> bool:
        """True when every call that completed has its token ids, and no failed call's
        partial answer reached a later prompt."""
        return not self.gaps

    def describe(self) -> str:
        """One line: ``complete (N calls, M sequences)``, or which calls' tokens are not
        trained and why (no token ids; a failed call's tokens in a later prompt)."""
        counts = f"{self.calls} calls, {len(self.sequences)} sequences"
        if self.complete:
            return f"complete ({counts})"
        gaps = "; ".join(f"call {g.call}: {g.reason}" for g in self.gaps)
        return f"incomplete ({counts}): {len(self.gaps)} calls not trained ({gaps})"


class _Builder(SequenceBuilder):
    """A sequence being built (:class:`~agentkit._tokens.SequenceBuilder`: its tokens so
    far, prompt + completion, and masks), with the calls merged into it."""

    __slots__ = ("calls", "ends", "source", "start", "stop")

    def __init__(self, call: ModelCall, start: SequenceStart) -> None:
        super().__init__(call.prompt_token_ids or [])
        self.start = start
        self.calls: list[int] = []
        self.ends: list[tuple[int, int]] = []  # (call, where its prompt ends in full)
        self.source: TokenSource = "server"
        self.stop: str | None = None
        self.merge(call)

    def merge(self, call: ModelCall) -> None:
        """A call whose prompt extends the sequence: what the prompt adds, then its
        sampled tokens."""
        end = self.add(
            call.prompt_token_ids or [], call.completion_token_ids or [], call.completion_logprobs
        )
        self.ends.append((call.index, end))
        self.calls.append(call.index)
        if call.token_source == "tokenizer":
            self.source = "tokenizer"
        self.stop = call.finish_reason

    def holds_as_prompt(self, kept: list[int], sampled: int) -> int | None:
        """The call whose prompt brought in the last ``sampled`` ids of ``kept``, when
        this sequence starts with ``kept`` and holds them as context (mask 0); None when
        it does not start with them, or a call of its own sampled them (mask 1)."""
        n = len(kept)
        if len(self.full) < n or self.full[:n] != kept:
            return None
        for at in range(n - sampled, n):
            if at < self.prompt_len or self.mask[at - self.prompt_len] == 0:
                return next(call for call, end in self.ends if end > at)
        return None

    def build(self) -> TokenSequence:
        return TokenSequence(
            calls=tuple(self.calls),
            start=self.start,
            prompt_token_ids=self.prompt,
            completion_token_ids=self.completion,
            completion_mask=self.mask,
            completion_logprobs=self.logprobs,
            stop_reason=self.stop,
            token_source=self.source,
        )


def _failed(call: ModelCall) -> bool:
    """A call that did not complete (an error status, or an error): never trained."""
    return call.error is not None or (call.status is not None and call.status >= 400)


def _kept_tokens(call: ModelCall) -> list[int] | None:
    """A failed call's prompt and what it had sampled, when it had sampled anything
    (calls files of earlier versions kept that as its completion ids)."""
    sampled = call.partial_token_ids or call.completion_token_ids
    if not sampled or call.prompt_token_ids is None:
        return None
    return call.prompt_token_ids + sampled


def _reached(failed: ModelCall, by: int, sampled: int) -> CallGap:
    what = (failed.error or f"HTTP {failed.status}").split(":", 1)[0]
    return CallGap(
        call=failed.index,
        reason=(
            f"it did not complete ({what}), and the {sampled} tokens it had sampled reached "
            f"the agent's next prompt (call {by}): they are not trained"
        ),
    )


def sequences_of(calls: Iterable[ModelCall]) -> RolloutTokens:
    """The training sequences of one rollout's calls (see the module's rules)."""
    return _sequences_of(calls, {})


def _sequences_of(
    calls: Iterable[ModelCall], references: Mapping[int, tuple[int, int]]
) -> RolloutTokens:
    """:func:`sequences_of`, told by the calls file which prompts start with all the
    ids of an earlier call (``agentkit._calls.parse_calls``' ``references``): such a
    prompt continues the sequence that call ended without its ids compared again."""
    ordered = sorted(calls, key=lambda c: c.index)
    builders: list[_Builder] = []
    ended_in: dict[int, _Builder | None] = {}  # call index -> its sequence (None: no ids)
    gaps: list[CallGap] = []
    previous: int | None = None
    failures: list[tuple[ModelCall, list[int]]] = []  # failed calls that had sampled
    for call in ordered:
        if _failed(call):
            kept = _kept_tokens(call)
            if kept is not None:
                failures.append((call, kept))
            continue
        predecessor = call.parent if call.parent is not None else previous
        previous = call.index
        if not call.has_tokens:
            gaps.append(CallGap(call=call.index, reason=call.token_note or "no token ids recorded"))
            ended_in[call.index] = None
            if predecessor is not None and (closed := ended_in.get(predecessor)) is not None:
                ended_in[predecessor] = None  # the sequence ends at the call without ids
                for key, value in ended_in.items():
                    if value is closed:
                        ended_in[key] = None
            continue
        prompt = call.prompt_token_ids or []
        target = _continues(call, predecessor, prompt, ended_in, references.get(call.index))
        if target is not None:
            target.merge(call)
        else:
            after_gap = predecessor is not None and ended_in.get(predecessor, 0) is None
            start: SequenceStart = (
                "first"
                if not builders
                else "after_gap"
                if after_gap
                else "branch"
                if call.parent is not None
                else "prefix_break"
            )
            target = _Builder(call, start)
            builders.append(target)
        ended_in[call.index] = target
    for failed, kept in failures:
        # the failed call's tokens in a later sequence as context, not sampled again by the
        # agent's retry: the agent kept them
        sampled = len(kept) - len(failed.prompt_token_ids or [])
        for builder in builders:
            by = builder.holds_as_prompt(kept, sampled)
            if by is not None:
                gaps.append(_reached(failed, by, sampled))
                break
    return RolloutTokens(
        sequences=tuple(b.build() for b in builders),
        gaps=tuple(sorted(gaps, key=lambda g: g.call)),
        calls=len(ordered),
    )


def _continues(
    call: ModelCall,
    predecessor: int | None,
    prompt: list[int],
    ended_in: dict[int, _Builder | None],
    reference: tuple[int, int] | None,
) -> _Builder | None:
    """The open sequence ``call`` merges into, or None for a new one."""
    own = ended_in.get(predecessor) if predecessor is not None else None
    if own is not None and (
        # a sequence's tokens are its last call's prompt and completion: a prompt the
        # file rebuilt from all of that call's ids extends them, by construction
        (reference is not None and reference == (own.calls[-1], len(own.full)))
        or own.extends(prompt)
    ):
        return own
    if call.parent is not None or (predecessor is not None and own is None):
        return None  # the caller named its parent; or it follows a call without ids
    open_ones = {id(b): b for b in ended_in.values() if b is not None and b is not own}
    matches = [b for b in open_ones.values() if b.extends(prompt)]
    return max(matches, key=lambda b: len(b.full)) if matches else None
