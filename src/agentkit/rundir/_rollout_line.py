"""A line of ``rollouts.jsonl`` as the reader gives it: parsed whole, or its small fields
made a :class:`~agentkit.rundir._types.Rollout` without building a record."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agentkit._result import INFRA_ERROR_KINDS
from agentkit._usage import Usage
from agentkit.rundir._layout import RunDirError
from agentkit.rundir._record_check import RecordFieldError, check_record
from agentkit.rundir._types import Rollout, Timings

__all__ = ["checked", "could_not_run", "full_line", "rollout_of"]


def full_line(line: bytes, path: Path, number: int | Callable[[], int]) -> dict[str, Any]:
    """One line of rollouts.jsonl parsed whole; a bad one is a
    :class:`~agentkit.rundir.RunDirError` naming the file and the line's ``number`` (or
    what gives it, asked only then)."""
    try:
        data = json.loads(line)
    except ValueError:
        where = number if isinstance(number, int) else number()
        raise RunDirError(f"{path}: line {where} is not valid JSON ({line[:80]!r}...)") from None
    if not isinstance(data, dict) or "rollout_id" not in data:
        where = number if isinstance(number, int) else number()
        raise RunDirError(f"{path}: line {where} is not a rollout record ({line[:80]!r}...)")
    checked(data, path, number)
    return data


def checked(data: dict[str, Any], path: Path, number: int | Callable[[], int]) -> dict[str, Any]:
    """``data`` (a line of rollouts.jsonl, or its small fields) when each field it has is of
    its type, else a :class:`~agentkit.rundir.RunDirError` naming the file, the line and
    the field."""
    try:
        check_record(data, required=False)
    except RecordFieldError as exc:
        where = number if isinstance(number, int) else number()
        raise RunDirError(
            f"{path}: line {where} is not a rollout record as agentkit writes it: {exc}"
        ) from None
    return data


def could_not_run(data: dict[str, Any]) -> bool:
    """As is_infrastructure_failure() decides it, without building a RolloutRecord: the
    line's ``infra_error`` marker, or its kind on lines written before the marker."""
    marker = data.get("infra_error")
    if isinstance(marker, bool):
        return marker
    return data.get("status") == "failed" and data.get("error_kind") in INFRA_ERROR_KINDS


def rollout_of(data: dict[str, Any], load: Any) -> Rollout:
    usage = data.get("usage") or {}
    cost = usage.get("cost")
    timings = data.get("timings") or {}
    return Rollout(
        rollout_id=str(data["rollout_id"]),
        task_id=str(data.get("task_id", "")),
        example_id=str(data.get("example_id", "")),
        rollout_index=int(data.get("rollout_index", 0)),
        group=int(data.get("group", 0)),
        status=str(data.get("status", "")),
        reward=data.get("reward"),
        passed=data.get("passed"),
        advantage=data.get("advantage"),
        error=data.get("error"),
        error_kind=data.get("error_kind"),
        rewards=dict(data.get("rewards") or {}),
        usage=Usage(
            input_tokens=int(usage.get("input_tokens") or 0),
            output_tokens=int(usage.get("output_tokens") or 0),
            cached_tokens=int(usage.get("cached_tokens") or 0),
            reasoning_tokens=int(usage.get("reasoning_tokens") or 0),
            cost=float(cost) if isinstance(cost, (int, float)) else 0.0,
            requests=int(usage.get("requests") or 0),
        ),
        cost=float(cost) if isinstance(cost, (int, float)) else None,
        attempts=int(data.get("attempts", 1)),
        timings=Timings(**{k: timings.get(k) for k in _TIMING_FIELDS}),
        events=int(data.get("events", 0)),
        events_file=data.get("events_file"),
        calls=int(data.get("calls") or 0),
        calls_file=data.get("calls_file"),
        infrastructure=could_not_run(data),
        data=data,
        load=load,
    )


_TIMING_FIELDS = ("started_at", "finished_at", "duration_s", "harness_s", "scoring_s")
