"""The rollout record: one finished rollout, a line of ``rollouts.jsonl``."""

from __future__ import annotations

from typing import Any

import attrs

from agentkit.rundir._layout import RUN_SCHEMA_VERSION
from agentkit.rundir._record_check import check_record

__all__ = ["PREFIX_STATUS", "RolloutRecord", "branch_point_id"]

#: The ``status`` of a rollout record that is a shared prefix (docs/branching.md): an
#: episode run to its branch point and forked there; its children carry on from it and
#: are the scored leaves.
PREFIX_STATUS = "branched"


def branch_point_id(parent_rollout_id: str, step: int) -> str:
    """The id of the point where ``parent_rollout_id`` forked after ``step`` replies."""
    return f"{parent_rollout_id}@{step}"


@attrs.define(slots=True, kw_only=True)
class RolloutRecord:
    """One finished rollout as stored in ``rollouts.jsonl`` (see docs/run-directory.md)."""

    rollout_id: str
    task_id: str
    example_id: str
    rollout_index: int
    group: int
    status: str
    output: str | None = None
    messages: list[dict[str, Any]] = attrs.field(factory=list)
    usage: dict[str, Any] = attrs.field(factory=dict)
    rewards: dict[str, float] = attrs.field(factory=dict)
    reward: float | None = None
    advantage: float | None = None
    passed: bool | None = None
    error: str | None = None
    error_kind: str | None = None
    #: The rollout could not run (``INFRA_ERROR_KINDS``); None on lines written before
    #: this field existed.
    infra_error: bool | None = None
    scoring_errors: list[dict[str, str]] = attrs.field(factory=list)
    attempts: int = 1
    retries: list[dict[str, Any]] = attrs.field(factory=list)
    timings: dict[str, float] = attrs.field(factory=dict)
    events: int = 0
    events_file: str | None = None
    events_dropped: int = 0
    raw: dict[str, Any] = attrs.field(factory=dict)
    #: Where the rollout ran when not in the driver's process (the Ray executor):
    #: ``node_ip``, ``node_id`` and ``sandbox_dir`` (its kept sandbox files, on that node).
    worker: dict[str, Any] | None = None
    #: Model calls the proxy recorded, and their file (``calls/<rollout_id>.jsonl``).
    calls: int = 0
    calls_file: str | None = None
    #: Calls without token ids, grouped by why: ``{"note", "calls": [index, ...]}``.
    calls_without_tokens: list[dict[str, Any]] = attrs.field(factory=list)
    #: The recorded calls themselves (:class:`~agentkit.runs.ModelCall`), kept in memory
    #: only by a run without a run directory (``env.generate()``); never written here.
    model_calls: list[Any] = attrs.field(factory=list, repr=False)
    #: Branching runs (``AgentEnv.branch``, docs/branching.md): the rollout this one was
    #: forked from (None: a root), the step it was forked at (the parent's replies it
    #: shares), and the rollouts forked from this one. None / empty in other runs.
    parent_rollout_id: str | None = None
    branch_step: int | None = None
    children: list[str] = attrs.field(factory=list)

    @property
    def branch_point(self) -> str | None:
        """The id of the branch point this rollout continues from (``<parent>@<step>``),
        or None when it was not forked: the GRPO group key of a branching run."""
        if self.parent_rollout_id is None or self.branch_step is None:
            return None
        return branch_point_id(self.parent_rollout_id, self.branch_step)

    @property
    def ok(self) -> bool:
        """True when the harness completed and every reward function ran."""
        return self.status == "completed" and not self.scoring_errors and self.reward is not None

    def to_json(self) -> dict[str, Any]:
        """The ``rollouts.jsonl`` line (``"type": "rollout"``)."""
        # small fields first, then the large ones (output, messages, raw): a
        # reader can parse the part before ``"output"`` to list rollouts fast
        return {
            "type": "rollout",
            "schema_version": RUN_SCHEMA_VERSION,
            "rollout_id": self.rollout_id,
            "task_id": self.task_id,
            "example_id": self.example_id,
            "rollout_index": self.rollout_index,
            "group": self.group,
            "status": self.status,
            "reward": self.reward,
            "passed": self.passed,
            "advantage": self.advantage,
            "error_kind": self.error_kind,
            "infra_error": self.infra_error,
            "error": self.error,
            "rewards": self.rewards,
            "usage": self.usage,
            "scoring_errors": self.scoring_errors,
            "attempts": self.attempts,
            "retries": self.retries,
            "timings": self.timings,
            "events": self.events,
            "events_file": self.events_file,
            "events_dropped": self.events_dropped,
            "calls": self.calls,
            "calls_file": self.calls_file,
            "calls_without_tokens": self.calls_without_tokens,
            "worker": self.worker,
            "parent_rollout_id": self.parent_rollout_id,
            "branch_step": self.branch_step,
            "children": self.children,
            "output": self.output,
            "messages": self.messages,
            "raw": self.raw,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RolloutRecord:
        """Read a stored line back (unknown keys from newer writers are ignored).

        A field missing or not of its type is a :class:`ValueError` naming it and what
        was expected (``RecordFieldError``): a hostile line never reaches the code that
        uses the record.
        """
        check_record(data)
        names = {a.name for a in attrs.fields(cls)} - {"model_calls"}
        return cls(**{k: v for k, v in data.items() if k in names})
