"""A finished group's training records, in the trainer's format: the export's own code.

The records are those ``agentkit export`` writes for the same rollouts
(:func:`~agentkit.training.from_rollouts`, one record per training sequence
of each rollout's model calls with :func:`~agentkit.training.with_sequences`,
then :func:`~agentkit.training.prepare`: GRPO advantages over the group,
overlong filtering, truncation); the formats are the export's writers' own
objects before they are written: SkyRL's ``GeneratorOutput``
(:func:`~agentkit.training.generator_output`), Tinker ``Datum``s
(:func:`~agentkit.training.datum_json`), verifiers' trace records
(:func:`~agentkit.training.trace_record`), or the JSONL export's lines.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import attrs

from agentkit.env import RolloutRecord
from agentkit.training import (
    TrainingRecord,
    datum_json,
    from_rollouts,
    generator_output,
    prepare,
    sequences_of,
    trace_record,
    with_sequences,
)

__all__ = ["TRAINER_FORMATS", "RecordOptions", "TrainerFormat", "in_format", "training_records"]

#: The formats a group is handed over in: SkyRL's ``GeneratorOutput`` (a dict), a list
#: of Tinker ``Datum`` JSON objects, a list of verifiers trace records, or a list of the
#: JSONL export's lines.
TrainerFormat = Literal["skyrl", "tinker", "verifiers", "jsonl"]
TRAINER_FORMATS: tuple[TrainerFormat, ...] = ("skyrl", "tinker", "verifiers", "jsonl")


@attrs.frozen(kw_only=True)
class RecordOptions:
    """How a group's records are prepared, as ``agentkit export`` takes them:
    ``normalize`` (GRPO advantages divided by the group's standard deviation),
    ``filter_overlong`` and ``eos_token_id`` (DAPO's overlong filter), ``max_seq_len``
    (truncation that keeps the prompt)."""

    normalize: bool = False
    filter_overlong: bool = True
    eos_token_id: int | None = None
    max_seq_len: int | None = None


def training_records(
    rollouts: Sequence[RolloutRecord], options: RecordOptions
) -> list[TrainingRecord]:
    """The training records of one group's rollouts (their model calls on the records)."""
    calls = {r.rollout_id: r.model_calls for r in rollouts}
    records: list[TrainingRecord] = []
    for record in from_rollouts(rollouts):
        records.extend(with_sequences(record, sequences_of(calls.get(record.rollout_id, []))))
    return prepare(
        records,
        normalize=options.normalize,
        filter_overlong=options.filter_overlong,
        eos_token_id=options.eos_token_id,
        max_seq_len=options.max_seq_len,
    )


def in_format(
    records: Sequence[TrainingRecord], rollouts: Sequence[RolloutRecord], format: TrainerFormat
) -> Any:
    """``records`` as the trainer takes them (see :data:`TrainerFormat`)."""
    if format == "skyrl":
        return generator_output(records)
    if format == "tinker":
        return [d for d in map(datum_json, records) if d is not None]
    if format == "verifiers":
        calls = {r.rollout_id: r.model_calls for r in rollouts}
        by_rollout: dict[str, list[TrainingRecord]] = {}
        for record in records:
            by_rollout.setdefault(record.rollout_id, []).append(record)
        return [
            trace_record(batch, calls.get(rid))
            for rid, batch in by_rollout.items()
            if any(r.has_tokens for r in batch)
        ]
    return [r.to_json() for r in records]
