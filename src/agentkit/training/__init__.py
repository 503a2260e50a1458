"""Training-ready data from rollouts: training sequences from the model calls, GRPO
advantages, DAPO overlong filtering, truncation that keeps the prompt, and export
to JSONL, parquet, SkyRL, Tinker, verifiers and SFT files.

>>> from agentkit import training
>>> records = training.from_run_dir("runs/2026-11-22")            # doctest: +SKIP
>>> records = training.prepare(records, normalize=True, max_seq_len=4096)  # doctest: +SKIP
>>> training.write_parquet(records, "train.parquet")              # doctest: +SKIP

The same pipeline runs on ``await env.generate(...)`` with :func:`from_groups`.
"""

from __future__ import annotations

from agentkit.training._advantages import (
    GroupBy,
    Normalize,
    assign_advantages,
    batch_normalize,
    group_advantages,
)
from agentkit.training._errors import ExportError
from agentkit.training._export import ExportSummary, export_run
from agentkit.training._formats import EXPORT_FORMATS, write_records
from agentkit.training._jsonl import write_jsonl
from agentkit.training._left_out import LeftOut
from agentkit.training._overlong import OVERLONG_STOP_REASONS, filter_overlong, is_overlong
from agentkit.training._parquet import write_parquet
from agentkit.training._pipeline import prepare
from agentkit.training._read import from_run_dir, rollout_tokens, token_fidelity
from agentkit.training._records import TrainingRecord, from_groups, from_rollouts, with_sequences
from agentkit.training._sequences import CallGap, RolloutTokens, TokenSequence, sequences_of
from agentkit.training._sft import chat_messages, sharegpt_record
from agentkit.training._skyrl import generator_output
from agentkit.training._tinker import datum_json
from agentkit.training._truncate import truncate, truncate_all
from agentkit.training._verifiers import trace_record

__all__ = [
    "EXPORT_FORMATS",
    "OVERLONG_STOP_REASONS",
    "CallGap",
    "ExportError",
    "ExportSummary",
    "GroupBy",
    "LeftOut",
    "Normalize",
    "RolloutTokens",
    "TokenSequence",
    "TrainingRecord",
    "assign_advantages",
    "batch_normalize",
    "chat_messages",
    "datum_json",
    "export_run",
    "filter_overlong",
    "from_groups",
    "from_rollouts",
    "from_run_dir",
    "generator_output",
    "group_advantages",
    "is_overlong",
    "prepare",
    "rollout_tokens",
    "sequences_of",
    "sharegpt_record",
    "token_fidelity",
    "trace_record",
    "truncate",
    "truncate_all",
    "with_sequences",
    "write_jsonl",
    "write_parquet",
    "write_records",
]
