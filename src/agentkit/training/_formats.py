"""The export formats: one name, one writer.

Each format's writer lives in a module of its own (``_jsonl``, ``_parquet``,
``_skyrl``, ``_tinker``, ``_verifiers``, ``_sft``). A writer that needs more of a
rollout than its records (the verifiers format: each call's messages; the SFT
formats: the tools) says what it takes from the rollout's model calls
(:attr:`Format.keep`); :func:`~agentkit.training.export_run` takes it as it reads
each calls file, so a run's files are read once per export.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from typing import Any, Generic, Literal, TypeVar

import attrs

from agentkit._calls import ModelCall
from agentkit.training._errors import ExportError
from agentkit.training._jsonl import write_jsonl
from agentkit.training._parquet import require_pyarrow, write_parquet
from agentkit.training._records import TrainingRecord
from agentkit.training._sft import tools_of_calls, write_sft
from agentkit.training._skyrl import write_skyrl
from agentkit.training._tinker import write_tinker
from agentkit.training._verifiers import call_turns, write_verifiers

__all__ = [
    "EXPORT_FORMATS",
    "FORMATS",
    "CallsOf",
    "ExportFormat",
    "Format",
    "format_named",
    "write_records",
]

ExportFormat = Literal["jsonl", "parquet", "skyrl", "tinker", "verifiers", "sft-chat", "sharegpt"]

#: How a writer gets a rollout's model calls (None: it has no calls file).
CallsOf = Callable[[str], "list[ModelCall] | None"]

K = TypeVar("K")
Out = str | os.PathLike[str]


@attrs.frozen
class Format(Generic[K]):
    """One export format: its writer, and what the writer takes from a rollout's calls."""

    #: Writes the records to a file; returns how many lines, rows or records. Its third
    #: argument gives what :attr:`keep` took from a rollout's calls (None: nothing).
    write: Callable[[Iterable[TrainingRecord], Out, Callable[[str], K | None]], int]
    #: What the writer needs of a rollout's model calls, taken as they are read (None:
    #: its records are enough).
    keep: Callable[[list[ModelCall]], K] | None = None
    #: Checked before anything is read (None: nothing to check).
    check: Callable[[], object] | None = None


def _records_only(
    write: Callable[[Iterable[TrainingRecord], Out], int],
) -> Callable[[Iterable[TrainingRecord], Out, Callable[[str], None]], int]:
    return lambda records, out, _kept_of: write(records, out)


def _sft(sharegpt: bool) -> Format[list[dict[str, Any]] | None]:
    return Format(
        lambda records, out, tools_of: write_sft(records, out, tools_of, sharegpt=sharegpt),
        keep=tools_of_calls,
    )


#: The formats :func:`~agentkit.training.write_records` and ``agentkit export`` write.
FORMATS: dict[str, Format[Any]] = {
    "jsonl": Format(_records_only(write_jsonl)),
    "parquet": Format(_records_only(write_parquet), check=require_pyarrow),
    "skyrl": Format(_records_only(write_skyrl)),
    "tinker": Format(_records_only(write_tinker)),
    "verifiers": Format(write_verifiers, keep=call_turns),
    "sft-chat": _sft(sharegpt=False),
    "sharegpt": _sft(sharegpt=True),
}
#: The formats :func:`~agentkit.training.write_records` and ``agentkit export`` accept.
EXPORT_FORMATS: tuple[str, ...] = tuple(FORMATS)


def format_named(name: str) -> Format[Any]:
    """The format called ``name``, or an :class:`~agentkit.training.ExportError` listing
    those there are."""
    found = FORMATS.get(name)
    if found is None:
        raise ExportError(
            f"unknown export format {name!r}; expected one of: {', '.join(EXPORT_FORMATS)}"
        )
    return found


def write_records(
    records: Iterable[TrainingRecord],
    out: str | os.PathLike[str],
    *,
    format: ExportFormat,
    calls_of: CallsOf | None = None,
) -> int:
    """Write records in ``format`` (one of :data:`EXPORT_FORMATS`); returns how many
    lines, rows or records were written.

    ``calls_of`` gives a rollout's model calls (the ``verifiers`` format takes
    each call's messages from them; ``sft-chat`` and ``sharegpt`` the tools).
    """
    chosen = format_named(format)
    keep = chosen.keep

    def kept_of(rollout_id: str) -> Any:
        calls = calls_of(rollout_id) if calls_of is not None and keep is not None else None
        return None if calls is None or keep is None else keep(calls)

    return chosen.write(records, out, kept_of)
