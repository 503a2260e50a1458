"""A branching run's shared prefixes in the training export (docs/branching.md).

A leaf of a branching run is exported whole: its records (one per training
sequence) hold its prefix and its continuation, and ``prefix_tokens`` says
how many leading completion tokens of each are the prefix's. The prefix's own
record (status ``branched``) is not exported; its sequences are read here to
count them: from its calls file when it has one, else from its ``raw``.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from agentkit.rundir import RolloutRecord
from agentkit.training._callfiles import ForeignCallsError, read_calls
from agentkit.training._errors import ExportError
from agentkit.training._records import (
    PrefixSequences,
    TrainingRecord,
    prefix_tokens_of,
    raw_sequences,
)
from agentkit.training._sequences import sequences_of

__all__ = ["Prefixes"]


class Prefixes:
    """A branching run's shared prefixes, for its leaves' ``prefix_tokens``: each
    sequence of a leaf is matched against its prefix's sequences (from the prefix's
    calls file, else its ``raw``), read once per prefix. ``run_id``: the run's (see
    :func:`~agentkit.training._callfiles.read_calls`)."""

    def __init__(
        self, run_dir: Path, rollouts: Iterable[RolloutRecord], *, run_id: str | None
    ) -> None:
        self.run_dir = run_dir
        self.run_id = run_id
        self.rollouts = {r.rollout_id: r for r in rollouts}
        self.sequences: dict[str, PrefixSequences] = {}
        #: A prefix's calls file that could not be read (damaged, or leading outside the
        #: run): its leaves are exported without ``prefix_tokens``; one line each.
        self.unread: list[str] = []

    def count(self, records: list[TrainingRecord]) -> list[TrainingRecord]:
        """One leaf's records (its sequences) with ``prefix_tokens`` counted on each."""
        prefix_id = records[0].prefix_id or ""
        parent = self.rollouts.get(prefix_id)
        if parent is None:  # the prefix's line was not read: no lengths
            return records
        if prefix_id not in self.sequences:
            try:
                calls = read_calls(
                    self.run_dir, prefix_id, run_id=self.run_id, calls_file=parent.calls_file
                )
            except ForeignCallsError:  # not the prefix's calls: no lengths
                return records
            except ExportError as exc:  # a damaged file: no lengths, said once
                self.unread.append(
                    f"{exc}; the rollouts forked from {prefix_id} are exported without "
                    "prefix_tokens"
                )
                self.sequences[prefix_id] = []
            else:
                self.sequences[prefix_id] = (
                    raw_sequences(parent)
                    if calls is None
                    else [
                        (s.prompt_token_ids, s.completion_token_ids)
                        for s in sequences_of(calls).sequences
                    ]
                )
        prefix = self.sequences[prefix_id]
        return [r.evolve(prefix_tokens=prefix_tokens_of(r, prefix)) for r in records]
