"""Reading a run directory and writing training records to JSONL or parquet.

JSONL keeps every field as JSON (messages nested). Parquet has one typed
column per field; the message lists and the per-metric rewards, whose shapes
vary from harness to harness, are stored as JSON text (``prompt``,
``completion``, ``rewards``), token ids as ``list<int64>`` columns, the mask
as ``list<int8>`` and logprobs as ``list<float64>``.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, Literal

from agentkit._errors import AgentkitError
from agentkit.env._store import RunStore
from agentkit.training._pipeline import prepare
from agentkit.training._records import TrainingRecord, from_rollouts

__all__ = [
    "EXPORT_FORMATS",
    "export_run",
    "from_run_dir",
    "write_jsonl",
    "write_parquet",
    "write_records",
]

ExportFormat = Literal["jsonl", "parquet"]
#: The formats :func:`write_records` and ``agentkit export`` accept.
EXPORT_FORMATS: tuple[str, ...] = ("jsonl", "parquet")


class ExportError(AgentkitError):
    """A run directory could not be read, or records could not be written."""


def from_run_dir(run_dir: str | os.PathLike[str]) -> list[TrainingRecord]:
    """Training records for every rollout stored in ``RUN_DIR/rollouts.jsonl``.

    A half-written last line (an interrupted run) is skipped; the file is not
    modified. Advantages are those stored; :func:`~agentkit.training.prepare`
    recomputes them.
    """
    path = Path(run_dir)
    store = RunStore(path)
    if not store.rollouts_path.is_file():
        raise ExportError(
            f"{store.rollouts_path}: no such file; expected a run directory written by "
            "'agentkit run' or AgentEnv.evaluate(run_dir=...)"
        )
    rollouts, _note = store.load_rollouts(repair=False)
    return from_rollouts(rollouts)


@contextlib.contextmanager
def _replacing(path: Path) -> Iterator[Path]:
    """A temporary file beside ``path`` that replaces it on success.

    On failure the temporary file is removed and an :class:`ExportError`
    names ``path`` (not the temporary file).
    """
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        yield tmp
        os.replace(tmp, path)
    except OSError as exc:
        reason = (exc.strerror or str(exc)).replace(str(tmp), str(path))
        raise ExportError(f"{path}: cannot write: {reason}") from None
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink()


def write_jsonl(records: Iterable[TrainingRecord], out: str | os.PathLike[str]) -> int:
    """Write one JSON object per record; returns how many were written."""
    count = 0
    path = Path(out)
    with _replacing(path) as tmp, open(tmp, "w", encoding="utf-8") as fh:
        for record in records:
            fh.write(json.dumps(record.to_json(), ensure_ascii=False, allow_nan=False))
            fh.write("\n")
            count += 1
    return count


def _pyarrow() -> Any:
    import importlib

    try:
        pyarrow = importlib.import_module("pyarrow")
        importlib.import_module("pyarrow.parquet")
    except ImportError:
        raise ExportError(
            "writing parquet needs the 'pyarrow' package: pip install 'agentkit[parquet]' "
            "(or pip install pyarrow)"
        ) from None
    return pyarrow


def parquet_schema() -> Any:
    """The parquet schema of exported records (needs pyarrow)."""
    pa = _pyarrow()
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
        ]
    )


_JSON_COLUMNS = ("prompt", "completion", "rewards")


def write_parquet(records: Iterable[TrainingRecord], out: str | os.PathLike[str]) -> int:
    """Write the records as one parquet file (``pip install 'agentkit[parquet]'``)."""
    pa = _pyarrow()
    schema = parquet_schema()
    rows = []
    for record in records:
        row = record.to_json()
        for name in _JSON_COLUMNS:
            row[name] = json.dumps(row[name], ensure_ascii=False, allow_nan=False)
        rows.append(row)
    table = pa.Table.from_pylist(rows, schema=schema)
    with _replacing(Path(out)) as tmp:
        pa.parquet.write_table(table, tmp)
    return len(rows)


def write_records(
    records: Iterable[TrainingRecord], out: str | os.PathLike[str], *, format: ExportFormat
) -> int:
    """Write records as ``jsonl`` or ``parquet``; returns how many were written."""
    if format == "jsonl":
        return write_jsonl(records, out)
    if format == "parquet":
        return write_parquet(records, out)
    raise ExportError(f"unknown export format {format!r}; expected one of: jsonl, parquet")


def export_run(
    run_dir: str | os.PathLike[str],
    out: str | os.PathLike[str],
    *,
    format: ExportFormat = "jsonl",
    normalize: bool | Literal["group", "batch"] = False,
    eps: float | None = None,
    filter_overlong: bool = True,
    eos_token_id: int | None = None,
    max_seq_len: int | None = None,
    drop_unscored: bool = False,
) -> int:
    """Read a run directory, :func:`~agentkit.training.prepare` it, write ``out``."""
    if format not in EXPORT_FORMATS:
        raise ExportError(f"unknown export format {format!r}; expected one of: jsonl, parquet")
    if format == "parquet":
        _pyarrow()  # fail before reading anything
    records = prepare(
        from_run_dir(run_dir),
        normalize=normalize,
        eps=eps,
        filter_overlong=filter_overlong,
        eos_token_id=eos_token_id,
        max_seq_len=max_seq_len,
        drop_unscored=drop_unscored,
    )
    return write_records(records, out, format=format)
