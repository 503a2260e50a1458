"""DAPO overlong filtering: no gradient from responses cut off by the length limit.

A response is *overlong* when its stop reason says the model hit its token
limit (``length`` in OpenAI's API, ``max_tokens`` in Anthropic's), or, with
``eos_token_id``, when its completion token ids do not end with that token
(SkyRL's ``apply_overlong_filtering``, which the Tinker loop uses too).
Overlong responses get loss mask 0 (and a zero per-token mask); every other
record is returned unchanged.
"""

from __future__ import annotations

from collections.abc import Iterable

from agentkit.training._records import TrainingRecord

__all__ = ["OVERLONG_STOP_REASONS", "filter_overlong", "is_overlong"]

#: Stop reasons meaning "the response did not end on its own: it hit the length limit".
OVERLONG_STOP_REASONS: frozenset[str] = frozenset({"length", "max_tokens", "max_output_tokens"})


def is_overlong(record: TrainingRecord, *, eos_token_id: int | None = None) -> bool:
    """True when the record's response was cut off.

    Without ``eos_token_id``: its stop reason is a length limit. With it:
    its completion token ids are empty or do not end with ``eos_token_id``
    (a record without token ids falls back to the stop reason).
    """
    if eos_token_id is not None and record.completion_token_ids is not None:
        ids = record.completion_token_ids
        return not ids or ids[-1] != eos_token_id
    return record.stop_reason in OVERLONG_STOP_REASONS


def filter_overlong(
    records: Iterable[TrainingRecord], *, eos_token_id: int | None = None
) -> list[TrainingRecord]:
    """Zero the loss mask of overlong responses; leave every other record as it is."""
    out: list[TrainingRecord] = []
    for record in records:
        if is_overlong(record, eos_token_id=eos_token_id):
            mask = None if record.completion_mask is None else [0] * len(record.completion_mask)
            record = record.evolve(overlong=True, loss_mask=0.0, completion_mask=mask)
        out.append(record)
    return out
