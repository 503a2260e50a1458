"""Reading a rollout's model calls (``calls/<rollout_id>.jsonl``) for training export.

The one place :mod:`agentkit.training` reads calls files. Each line is one
:class:`~agentkit._calls.ModelCall` as the model proxy writes it (through
``agentkit._convert.unstructure``). The reader checks what export relies on
(the index, the token ids and logprobs, the parent) and builds the record
without structuring every token through the strict converter, which would
cost seconds per thousand calls; a malformed line is an :class:`ExportError`
naming the file, the line and the field.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import attrs

from agentkit._calls import PROTOCOLS, ModelCall
from agentkit._errors import AgentkitError
from agentkit._rundir import CALLS_DIR
from agentkit._usage import Usage

__all__ = ["ExportError", "calls_path", "read_calls"]


class ExportError(AgentkitError):
    """A run directory could not be read, or records could not be written."""


_FIELDS = {f.name for f in attrs.fields(ModelCall)}


def calls_path(run_dir: Path, rollout_id: str) -> Path:
    """Where a rollout's calls file is: ``RUN_DIR/calls/<rollout_id>.jsonl``."""
    return run_dir / CALLS_DIR / f"{rollout_id}.jsonl"


def read_calls(run_dir: Path, rollout_id: str) -> list[ModelCall] | None:
    """The rollout's model calls in order of ``index``; None when it has no calls file.

    A half-written last line (the run was killed while writing it) is left out.
    """
    path = calls_path(run_dir, rollout_id)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ExportError(f"{path}: cannot read: {exc.strerror or exc}") from None
    lines = data.split(b"\n")
    complete = lines[:-1]  # the text after the last newline is a torn line, or empty
    calls = [_call(line, path, n) for n, line in enumerate(complete, start=1) if line.strip()]
    calls.sort(key=lambda c: c.index)
    return calls


def _ids(value: Any, where: str) -> list[int] | None:
    # sum() is exact and fast in C for lists of ints: a float anywhere makes the
    # total a float, a string or null raises TypeError; either is a malformed file
    if value is None:
        return None
    if isinstance(value, list):
        try:
            if type(sum(value)) is int:
                return value
        except TypeError:
            pass
    raise ExportError(f"{where}: expected a list of integer token ids or null")


def _floats(value: Any, where: str) -> list[float] | None:
    if value is None:
        return None
    if isinstance(value, list):
        try:
            sum(value)
            return value
        except TypeError:
            pass
    raise ExportError(f"{where}: expected a list of numbers (logprobs) or null")


def _call(line: bytes, path: Path, number: int) -> ModelCall:
    where = f"{path}: line {number}"
    try:
        data = json.loads(line)
    except ValueError as exc:
        raise ExportError(f"{where}: not valid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise ExportError(f"{where}: expected a JSON object (one model call)")
    fields = {k: v for k, v in data.items() if k in _FIELDS}
    index = fields.get("index")
    if type(index) is not int or index < 0:
        raise ExportError(f"{where}.index: expected a whole number >= 0")
    parent = fields.get("parent")
    if parent is not None and (type(parent) is not int or parent < 0):
        raise ExportError(f"{where}.parent: expected a call index or null")
    if fields.get("protocol") not in PROTOCOLS:
        raise ExportError(f"{where}.protocol: expected one of {', '.join(PROTOCOLS)}")
    if not isinstance(fields.get("rollout_id"), str):
        raise ExportError(f"{where}.rollout_id: expected a string")
    for name in ("prompt_token_ids", "completion_token_ids"):
        fields[name] = _ids(fields.get(name), f"{where}.{name}")
    fields["completion_logprobs"] = _floats(
        fields.get("completion_logprobs"), f"{where}.completion_logprobs"
    )
    usage = fields.get("usage")
    if isinstance(usage, dict):
        try:
            fields["usage"] = Usage(**usage)
        except TypeError:
            fields["usage"] = None
    elif usage is not None:
        fields["usage"] = None
    forwarded = fields.get("forwarded")
    if not isinstance(forwarded, dict):
        fields["forwarded"] = {}
    try:
        return ModelCall(**fields)
    except (TypeError, ValueError) as exc:
        raise ExportError(f"{where}: not a model call ({exc})") from None
