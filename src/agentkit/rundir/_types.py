"""What the run directory's reader returns: a run's settings, its rollouts, steps, tasks
and metrics (public as :mod:`agentkit.runs`' types)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import attrs

from agentkit._usage import Usage

__all__ = [
    "LiveRollout",
    "Metric",
    "Rollout",
    "RunInfo",
    "RunState",
    "Step",
    "TaskInfo",
    "Timings",
]

#: What a run is doing: ``running`` (a process holds its lock), ``complete``
#: (every planned rollout finished and ran), ``incomplete`` (every planned
#: rollout finished, but some could not run: infrastructure failures, which
#: ``agentkit run --resume`` runs again), ``stopped`` (a run limit ended it
#: early), ``interrupted`` (Ctrl-C, a signal or a kill before its last rollout).
RunState = Literal["running", "complete", "incomplete", "stopped", "interrupted"]


@attrs.frozen(kw_only=True)
class RunInfo:
    """What a run is: its settings, from ``manifest.json``.

    ``manifest`` is the whole document (see docs/run-directory.md) for
    anything not given a field here.
    """

    path: Path
    schema_version: int
    created_at: float
    resumed_at: list[float]
    agentkit_version: str | None
    taskset: str | None
    taskset_options: dict[str, Any]
    harness: str | None
    harness_options: dict[str, Any]
    model: str | None
    base_url: str | None
    api_key_env: str | None
    sampling_args: dict[str, Any]
    headers: dict[str, str]
    limits: dict[str, Any]
    rollouts_per_task: int
    task_ids: list[str]
    sandbox: str | None
    pricing: dict[str, Any] | None
    options: dict[str, Any]
    manifest: dict[str, Any] = attrs.field(repr=False)

    @property
    def planned(self) -> int:
        """Rollouts planned: tasks × rollouts per task."""
        return len(self.task_ids) * self.rollouts_per_task


@attrs.frozen(kw_only=True)
class Timings:
    """When a rollout ran and how long its parts took (seconds)."""

    started_at: float | None = None
    finished_at: float | None = None
    duration_s: float | None = None
    harness_s: float | None = None
    scoring_s: float | None = None


@attrs.frozen(kw_only=True)
class Step:
    """One step of a rollout: an event of its trace (``model.request``, ``tool.call``...)."""

    seq: int
    type: str
    timestamp: float
    data: dict[str, Any]


@attrs.frozen(kw_only=True)
class TaskInfo:
    """A planned task as the run recorded it (``tasks.jsonl``)."""

    task_id: str
    example_id: str
    group: int
    input: Any
    target: Any
    metadata: dict[str, Any]


@attrs.frozen(kw_only=True)
class Metric:
    """One reward function of the compiled rubric and its mean over the scored rollouts."""

    name: str
    weight: float
    origin: str
    description: str
    mean: float | None
    count: int


@attrs.frozen(kw_only=True)
class LiveRollout:
    """A rollout that is running now (or was when its run was interrupted).

    Read from ``live/<rollout_id>.jsonl``, which the runner writes while a
    rollout runs and removes once its line is in ``rollouts.jsonl``.
    """

    rollout_id: str
    task_id: str
    rollout_index: int
    group: int
    #: The attempt running now (1, or more after retries).
    attempt: int
    started_at: float | None
    #: Events written so far (all attempts).
    events: int


@attrs.define(kw_only=True, eq=False)
class Rollout:
    """One finished rollout (the last ``rollouts.jsonl`` line of its id).

    The small fields are read when the rollout is listed; ``output``,
    ``messages``, ``raw``, ``retries`` and ``scoring_errors`` are read from
    the file the first time they are used.
    """

    rollout_id: str
    task_id: str
    example_id: str
    rollout_index: int
    group: int
    status: str
    reward: float | None
    passed: bool | None
    advantage: float | None
    error: str | None
    error_kind: str | None
    rewards: dict[str, float]
    usage: Usage
    cost: float | None
    attempts: int
    timings: Timings
    events: int
    events_file: str | None
    #: Model calls the proxy recorded (:meth:`~agentkit.runs.Run.calls` reads them), and their
    #: file.
    calls: int = 0
    calls_file: str | None = None
    #: It could not run (an infrastructure failure, the record's ``infra_error``): no
    #: reward, in no mean or pass@k, and ``agentkit run --resume`` runs it again.
    infrastructure: bool
    _data: dict[str, Any] = attrs.field(repr=False)
    _load: Callable[[], dict[str, Any]] = attrs.field(repr=False)
    _full: bool = attrs.field(default=False, repr=False)

    def _field(self, name: str, default: Any) -> Any:
        if name not in self._data and not self._full:
            self._data = self._load()
            self._full = True
        return self._data.get(name, default)

    @property
    def ok(self) -> bool:
        """The harness completed and every reward function ran."""
        return self.status == "completed" and not self.scoring_errors and self.reward is not None

    @property
    def output(self) -> str | None:
        """The harness's final output."""
        value: str | None = self._field("output", None)
        return value

    @property
    def messages(self) -> list[dict[str, Any]]:
        """The transcript: messages, tool calls and tool results."""
        value: list[dict[str, Any]] = self._field("messages", [])
        return value

    @property
    def raw(self) -> dict[str, Any]:
        """Provider-specific fields of the harness result (a verifier's output, say)."""
        value: dict[str, Any] = self._field("raw", {})
        return value

    @property
    def retries(self) -> list[dict[str, Any]]:
        """Earlier attempts: their ``error``, ``error_kind`` and ``delay_s``."""
        value: list[dict[str, Any]] = self._field("retries", [])
        return value

    @property
    def scoring_errors(self) -> list[dict[str, str]]:
        """``{"metric", "error"}`` for each reward function that raised."""
        value: list[dict[str, str]] = self._field("scoring_errors", [])
        return value

    @property
    def calls_without_tokens(self) -> list[dict[str, Any]]:
        """The calls that carry no token ids, grouped by why: ``{"note", "calls": [index,
        ...]}`` per reason (empty: every call has them, or there were none)."""
        value: list[dict[str, Any]] = self._field("calls_without_tokens", [])
        return value

    @property
    def reason(self) -> str:
        """One line saying why the rollout did not pass (empty when it did)."""
        if self.error:
            first = self.error.strip().splitlines()[0] if self.error.strip() else ""
            return f"{self.error_kind or self.status}: {first}"[:300]
        if self.scoring_errors:
            err = self.scoring_errors[0]
            return f"scoring_error: {err.get('metric')}: {err.get('error')}"[:300]
        if self.status != "completed":
            return self.status
        if self.passed is False:
            return f"scored {self.reward:g}" if self.reward is not None else "not scored"
        return ""

    def to_json(self) -> dict[str, Any]:
        """The whole stored line (reads it when only the small fields were read)."""
        if not self._full:
            self._data = self._load()
            self._full = True
        return dict(self._data)
