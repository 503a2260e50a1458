"""Writing a split for training stacks: ``train.parquet`` and ``validation.parquet``.

Columns (what SkyRL-style loaders read): ``prompt`` (chat messages: one user
message), ``env_class`` (``fleet_task``), ``task_key``, ``data_source`` (the
env_key, ``unknown`` without one): Fleet's ``prepare_dataset.py`` columns; and
the environment fields ``env_key``, ``env_version``,
``data_key``, ``data_version``, ``task_modality``, ``env_variables`` (JSON
text) and ``verifier_code``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from agentkit import AgentkitError, missing_extra
from agentkit_fleet.records import FleetRecord
from agentkit_fleet.split import env_group

__all__ = ["ENV_CLASS", "split_rows", "write_parquet", "write_split"]

ENV_CLASS = "fleet_task"


def split_rows(records: Iterable[FleetRecord]) -> list[dict[str, Any]]:
    """One row per record, with the training columns."""
    return [
        {
            "prompt": [{"role": "user", "content": r.prompt}],
            "env_class": ENV_CLASS,
            "task_key": r.task_key,
            "data_source": env_group(r.env_key),
            "env_key": r.env_key or "",
            "env_version": r.env_version or "",
            "data_key": r.data_key or "",
            "data_version": r.data_version or "",
            "task_modality": r.task_modality,
            "env_variables": json.dumps(r.env_variables, sort_keys=True),
            "verifier_code": r.verifier_code or "",
        }
        for r in records
    ]


def write_parquet(rows: list[dict[str, Any]], path: Path) -> None:
    """Write ``rows`` with a fixed schema (an empty split still has every column)."""
    try:
        import pyarrow as pa  # type: ignore[import-untyped]
        import pyarrow.parquet as pq  # type: ignore[import-untyped]
    except ImportError:
        raise AgentkitError(missing_extra("writing parquet", "pyarrow")) from None
    message = pa.struct([("role", pa.string()), ("content", pa.string())])
    fields = [("prompt", pa.list_(message)), ("env_class", pa.string())]
    fields += [
        (name, pa.string())
        for name in (
            "task_key",
            "data_source",
            "env_key",
            "env_version",
            "data_key",
            "data_version",
            "task_modality",
            "env_variables",
            "verifier_code",
        )
    ]
    schema = pa.schema(fields)
    table = pa.Table.from_pylist(rows, schema=schema)
    pq.write_table(table, path)


def write_split(
    train: list[FleetRecord], evals: list[FleetRecord], out: str | Path
) -> tuple[Path | None, Path | None]:
    """``out/train.parquet`` and ``out/validation.parquet``, rows in the given order.

    A side without records gets no file (as Fleet's dataset preparation), and
    a file of that name left by an earlier split is removed, so that the
    directory never mixes two splits. Returns the paths written (None for an
    empty side).
    """
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    written: list[Path | None] = []
    for records, name in ((train, "train.parquet"), (evals, "validation.parquet")):
        path = out / name
        if records:
            write_parquet(split_rows(records), path)
            written.append(path)
        else:
            path.unlink(missing_ok=True)
            written.append(None)
    return written[0], written[1]
