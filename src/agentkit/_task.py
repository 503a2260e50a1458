"""Task: a portable task reference and payload.

A task never carries model or provider settings: those belong to the run
(:class:`~agentkit.RunContext`). Reserved keys anywhere in ``metadata`` are
rejected when the task is built.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from agentkit._convert import structure, unstructure
from agentkit._errors import TaskReferenceError, ValidationError
from agentkit._limits import check_finite, check_nesting

__all__ = [
    "RESERVED_AGENT_KEYS",
    "Task",
    "TaskInput",
    "check_no_reserved_keys",
    "is_reserved_key",
]

#: Keys that configure an agent, not a task: rejected anywhere in task metadata.
RESERVED_AGENT_KEYS: frozenset[str] = frozenset(
    {
        "model",
        "model_name",
        "provider",
        "api_key",
        "api_base",
        "base_url",
        "temperature",
        "top_p",
        "top_k",
        "max_tokens",
        "seed",
        "sampling_args",
        "sampling_params",
        "llm",
    }
)

_SEPARATORS = str.maketrans("", "", "-_ .")
_RESERVED_NORMALIZED = frozenset(k.translate(_SEPARATORS) for k in RESERVED_AGENT_KEYS)


def is_reserved_key(key: object) -> bool:
    """True for a key that configures an agent, in any case or spelling.

    ``model``, ``Model``, ``API_KEY``, ``api-key``, ``apiKey`` and
    ``base.url`` are all reserved: case and the separators ``-``, ``_``,
    ``.`` and space are ignored.
    """
    return isinstance(key, str) and key.lower().translate(_SEPARATORS) in _RESERVED_NORMALIZED


TaskInput = str | list[dict[str, Any]] | dict[str, Any]
"""Prompt text, chat messages (``[{"role": ..., "content": ...}]``) or structured data."""


def _check_id_part(part: str, what: str, full: str) -> None:
    if not part:
        raise ValidationError("task_id", f"{what} is empty in {full!r} (expected 'taskset:item')")
    for ch in part:
        if ch.isspace():
            raise ValidationError("task_id", f"{what} contains whitespace in {full!r}")
        if unicodedata.category(ch) in ("Cc", "Cf", "Cs", "Co", "Cn"):
            raise ValidationError(
                "task_id", f"{what} contains control character {ch!r} in {full!r}"
            )


def check_no_reserved_keys(value: Any, path: str = "metadata") -> None:
    """Raise :class:`ValidationError` if a reserved agent key occurs anywhere in ``value``."""
    if isinstance(value, Mapping):
        for key, item in value.items():
            sub = f"{path}.{key}"
            if is_reserved_key(key):
                raise ValidationError(
                    sub,
                    "reserved agent key (model and sampling settings belong to the run "
                    "context, not the task)",
                )
            check_no_reserved_keys(item, sub)
    elif isinstance(value, Sequence) and not isinstance(value, (str, bytes)):
        for i, item in enumerate(value):
            check_no_reserved_keys(item, f"{path}[{i}]")


def _validate_task_id(_inst: Any, _attr: Any, value: str) -> None:
    if not isinstance(value, str):
        raise ValidationError("task_id", f"expected a string, got {type(value).__name__}")
    Task.parse_task_id(value)


def _validate_metadata(_inst: Any, _attr: Any, value: dict[str, Any]) -> None:
    if not isinstance(value, dict):
        raise ValidationError("metadata", f"expected an object, got {type(value).__name__}")
    check_nesting(value, "metadata")
    check_finite(value, "metadata")
    check_no_reserved_keys(value)


def _validate_target(_inst: Any, _attr: Any, value: Any) -> None:
    check_nesting(value, "target")
    check_finite(value, "target")


def _validate_nesting(_inst: Any, attr: Any, value: Any) -> None:
    check_nesting(value, attr.name)
    check_finite(value, attr.name)


def _validate_input(_inst: Any, _attr: Any, value: Any) -> None:
    check_nesting(value, "input")
    check_finite(value, "input")
    if value is None or isinstance(value, (str, dict)):
        return
    if isinstance(value, list):
        for i, msg in enumerate(value):
            if not isinstance(msg, dict) or "role" not in msg:
                raise ValidationError(
                    f"input[{i}]", "expected a chat message object with a 'role' key"
                )
            calls = msg.get("tool_calls")
            if calls is not None and not isinstance(calls, list):
                raise ValidationError(
                    f"input[{i}].tool_calls",
                    f"expected a list of tool calls, got {type(calls).__name__}",
                )
            if calls is not None and not all(isinstance(c, dict) for c in calls):
                raise ValidationError(f"input[{i}].tool_calls", "expected tool call objects")
        return
    raise ValidationError(
        "input", f"expected text, chat messages or an object, got {type(value).__name__}"
    )


@attrs.frozen(kw_only=True)
class Task:
    """A task: canonical id plus the payload a harness needs.

    ``Task(task_id="ts:item")`` without ``input`` is only a *reference*; load
    the payload from its taskset with ``taskset.get_task(task_id)``.
    """

    task_id: str = attrs.field(validator=_validate_task_id)
    input: TaskInput | None = attrs.field(default=None, validator=_validate_input)
    target: Any = attrs.field(default=None, validator=_validate_target)
    metadata: dict[str, Any] = attrs.field(factory=dict, validator=_validate_metadata)
    grading_spec: dict[str, Any] | None = attrs.field(default=None, validator=_validate_nesting)

    @property
    def taskset_id(self) -> str:
        """The part of ``task_id`` before the first ``:``."""
        return self.task_id.split(":", 1)[0]

    @property
    def item_id(self) -> str:
        """The part of ``task_id`` after the first ``:``."""
        return self.task_id.split(":", 1)[1]

    @property
    def is_reference(self) -> bool:
        """True when the task has no payload and must be loaded from its taskset."""
        return self.input is None

    @staticmethod
    def parse_task_id(task_id: str) -> tuple[str, str]:
        """Split ``"taskset:item"`` into ``(taskset_id, item_id)``.

        The taskset id never contains ``:``; the item id may. Empty parts,
        whitespace and control characters are rejected.
        """
        if not isinstance(task_id, str) or ":" not in task_id:
            raise ValidationError(
                "task_id", f"{task_id!r} is not a task id (expected 'taskset:item')"
            )
        taskset_id, item_id = task_id.split(":", 1)
        _check_id_part(taskset_id, "taskset id", task_id)
        _check_id_part(item_id, "item id", task_id)
        return taskset_id, item_id

    @staticmethod
    def format_task_id(taskset_id: str, item_id: str) -> str:
        """Join a taskset id and an item id; the exact inverse of :meth:`parse_task_id`."""
        if ":" in taskset_id:
            raise ValidationError("task_id", f"taskset id {taskset_id!r} must not contain ':'")
        full = f"{taskset_id}:{item_id}"
        _check_id_part(taskset_id, "taskset id", full)
        _check_id_part(item_id, "item id", full)
        return full

    def require_payload(self) -> Task:
        """Return ``self``, or raise a clear error if this is only a reference."""
        if self.is_reference:
            raise TaskReferenceError(
                f"task {self.task_id!r} is only a reference (it has no input); load it from "
                f"taskset {self.taskset_id!r} first, for example "
                f"taskset.get_task({self.task_id!r}) with a taskset from "
                "agentkit.registry.resolve_taskset('PROVIDER:ARGUMENT')"
            )
        return self

    def to_json(self) -> dict[str, Any]:
        """The task as plain JSON."""
        data: dict[str, Any] = unstructure(self)
        return data

    @classmethod
    def from_json(cls, data: Any, *, source: str | None = None, path: str = "") -> Task:
        """Build a task from JSON, strictly (see :mod:`agentkit._convert`)."""
        return structure(data, cls, source=source, path=path)
