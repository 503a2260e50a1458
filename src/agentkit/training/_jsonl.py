"""JSONL: one record a line, every field as JSON (messages nested)."""

from __future__ import annotations

import os
from collections.abc import Iterable

from agentkit.training._files import write_lines
from agentkit.training._records import TrainingRecord

__all__ = ["write_jsonl"]


def write_jsonl(records: Iterable[TrainingRecord], out: str | os.PathLike[str]) -> int:
    """Write one JSON object per record; returns how many were written."""
    return write_lines((record.to_json() for record in records), out)
