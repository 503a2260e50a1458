"""Training-ready data from rollouts: GRPO advantages, DAPO overlong filtering,
truncation that keeps the prompt, and export to JSONL or parquet.

>>> from agentkit import training
>>> records = training.from_run_dir("runs/2026-11-22")            # doctest: +SKIP
>>> records = training.prepare(records, normalize=True, max_seq_len=4096)  # doctest: +SKIP
>>> training.write_parquet(records, "train.parquet")              # doctest: +SKIP

The same pipeline runs on ``await env.generate(...)`` with :func:`from_groups`.
"""

from __future__ import annotations

from agentkit.training._advantages import (
    Normalize,
    assign_advantages,
    batch_normalize,
    group_advantages,
)
from agentkit.training._export import (
    EXPORT_FORMATS,
    export_run,
    from_run_dir,
    write_jsonl,
    write_parquet,
    write_records,
)
from agentkit.training._overlong import OVERLONG_STOP_REASONS, filter_overlong, is_overlong
from agentkit.training._pipeline import prepare
from agentkit.training._records import TrainingRecord, from_groups, from_rollouts
from agentkit.training._truncate import truncate, truncate_all

__all__ = [
    "EXPORT_FORMATS",
    "OVERLONG_STOP_REASONS",
    "Normalize",
    "TrainingRecord",
    "assign_advantages",
    "batch_normalize",
    "export_run",
    "filter_overlong",
    "from_groups",
    "from_rollouts",
    "from_run_dir",
    "group_advantages",
    "is_overlong",
    "prepare",
    "truncate",
    "truncate_all",
    "write_jsonl",
    "write_parquet",
    "write_records",
]
