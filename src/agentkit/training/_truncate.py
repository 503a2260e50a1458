"""Truncation to a maximum sequence length that always keeps the prompt.

Only the completion is cut (its token ids, their mask and logprobs together); a prompt
longer than the limit is kept whole and the completion becomes empty, because
a training example without its prompt would teach the wrong thing. Records
without token ids have no length to cut and are returned unchanged.
"""

from __future__ import annotations

from collections.abc import Iterable

from agentkit._errors import ValidationError
from agentkit.training._records import TrainingRecord

__all__ = ["truncate", "truncate_all"]


def truncate(record: TrainingRecord, max_seq_len: int) -> TrainingRecord:
    """``record`` cut to at most ``max_seq_len`` tokens (or the prompt, if longer)."""
    if max_seq_len < 1:
        raise ValidationError("max_seq_len", f"must be at least 1, got {max_seq_len}")
    prompt, completion = record.prompt_token_ids, record.completion_token_ids
    if prompt is None or completion is None:
        return record
    room = max(0, max_seq_len - len(prompt))
    if len(completion) <= room:
        return record
    mask = None if record.completion_mask is None else record.completion_mask[:room]
    logprobs = None if record.completion_logprobs is None else record.completion_logprobs[:room]
    prefix = None if record.prefix_tokens is None else min(record.prefix_tokens, room)
    return record.evolve(
        completion_token_ids=completion[:room],
        completion_mask=mask,
        completion_logprobs=logprobs,
        truncated=True,
        prefix_tokens=prefix,
    )


def truncate_all(records: Iterable[TrainingRecord], max_seq_len: int) -> list[TrainingRecord]:
    """:func:`truncate` applied to every record."""
    return [truncate(r, max_seq_len) for r in records]
