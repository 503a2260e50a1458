"""Parquet: one typed column per field of a record (``pip install 'agentkit[parquet]'``).

The message lists and the per-metric rewards, whose shapes vary from harness to
harness, are stored as JSON text (``prompt``, ``completion``, ``rewards``,
``token_issues``), token ids as ``list<int64>`` columns, the mask as ``list<int8>``
and logprobs as ``list<float64>``.
"""

from __future__ import annotations

import importlib
import json
import os
from collections.abc import Iterable
from typing import Any

from agentkit._errors import missing_extra
from agentkit.training._errors import ExportError
from agentkit.training._files import writing
from agentkit.training._records import TrainingRecord

__all__ = ["parquet_schema", "require_pyarrow", "write_parquet"]


def require_pyarrow() -> Any:
    """pyarrow (with its parquet module), or an :class:`~agentkit.training.ExportError`
    saying how to install it."""
    try:
        pyarrow = importlib.import_module("pyarrow")
        importlib.import_module("pyarrow.parquet")
    except ImportError:
        raise ExportError(
            missing_extra("writing parquet", "pyarrow", "parquet", note="or pip install pyarrow")
        ) from None
    return pyarrow


def parquet_schema() -> Any:
    """The parquet schema of exported records (needs pyarrow)."""
    pa = require_pyarrow()
    return pa.schema(
        [
            ("rollout_id", pa.string()),
            ("task_id", pa.string()),
            ("example_id", pa.string()),
            ("rollout_index", pa.int64()),
            ("group", pa.int64()),
            ("status", pa.string()),
            ("prompt", pa.string()),
            ("completion", pa.string()),
            ("reward", pa.float64()),
            ("rewards", pa.string()),
            ("advantage", pa.float64()),
            ("stop_reason", pa.string()),
            ("overlong", pa.bool_()),
            ("loss_mask", pa.float64()),
            ("truncated", pa.bool_()),
            ("prompt_token_ids", pa.list_(pa.int64())),
            ("completion_token_ids", pa.list_(pa.int64())),
            ("completion_mask", pa.list_(pa.int8())),
            ("completion_logprobs", pa.list_(pa.float64())),
            ("passed", pa.bool_()),
            ("sequence", pa.int64()),
            ("calls", pa.list_(pa.int64())),
            ("sequence_start", pa.string()),
            ("token_source", pa.string()),
            ("token_issues", pa.string()),
            ("prefix_id", pa.string()),
            ("branch_step", pa.int64()),
            ("prefix_messages", pa.int64()),
            ("prefix_tokens", pa.int64()),
        ]
    )


_JSON_COLUMNS = ("prompt", "completion", "rewards", "token_issues")


def write_parquet(records: Iterable[TrainingRecord], out: str | os.PathLike[str]) -> int:
    """Write the records as one parquet file (``pip install 'agentkit[parquet]'``)."""
    pa = require_pyarrow()
    schema = parquet_schema()
    rows = []
    for record in records:
        row = record.to_json()
        for name in _JSON_COLUMNS:
            row[name] = json.dumps(row[name], ensure_ascii=False, allow_nan=False)
        rows.append(row)
    table = pa.Table.from_pylist(rows, schema=schema)
    with writing(out) as fh:
        pa.parquet.write_table(table, fh)
    return len(rows)
