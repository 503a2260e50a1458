"""The types of a ``rollouts.jsonl`` line's fields, checked as it is read.

A run directory can be hostile (a hand edit, a file from elsewhere): a line whose
``messages`` is a string or whose ``reward`` is a list must be refused where it is
read, with the field and what was expected, not reach the code that uses it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["RecordFieldError", "check_event", "check_record"]


class RecordFieldError(ValueError):
    """A field of a rollout line is not of the type a rollout record holds."""


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _integer(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _text(v: Any) -> bool:
    return isinstance(v, str)


def _flag(v: Any) -> bool:
    return isinstance(v, bool)


def _object(v: Any) -> bool:
    return isinstance(v, dict)


def _objects(v: Any) -> bool:
    return isinstance(v, list) and all(isinstance(x, dict) for x in v)


def _texts(v: Any) -> bool:
    return isinstance(v, list) and all(isinstance(x, str) for x in v)


def _numbers_by_name(v: Any) -> bool:
    return isinstance(v, dict) and all(x is None or _number(x) for x in v.values())


def _usage(v: Any) -> bool:
    return isinstance(v, dict) and all(
        v.get(k) is None or _number(v.get(k)) for k in _USAGE_NUMBERS
    )


_USAGE_NUMBERS = (
    "input_tokens",
    "output_tokens",
    "cached_tokens",
    "reasoning_tokens",
    "cost",
    "requests",
)

#: field: (is it of the right type, may it be null, what is expected)
_FIELDS: dict[str, tuple[Callable[[Any], bool], bool, str]] = {
    "rollout_id": (_text, False, "a string"),
    "task_id": (_text, False, "a string"),
    "example_id": (_text, False, "a string"),
    "rollout_index": (_integer, False, "an integer"),
    "group": (_integer, False, "an integer"),
    "status": (_text, False, "a string"),
    "output": (_text, True, "a string or null"),
    "messages": (_objects, False, "a list of objects"),
    "usage": (_usage, False, "an object of token counts and cost (numbers)"),
    "rewards": (_numbers_by_name, False, "an object of numbers (or null) by metric"),
    "reward": (_number, True, "a number or null"),
    "advantage": (_number, True, "a number or null"),
    "passed": (_flag, True, "true, false or null"),
    "error": (_text, True, "a string or null"),
    "error_kind": (_text, True, "a string or null"),
    "infra_error": (_flag, True, "true, false or null"),
    "scoring_errors": (_objects, False, "a list of objects"),
    "attempts": (_integer, False, "an integer"),
    "retries": (_objects, False, "a list of objects"),
    "timings": (_numbers_by_name, False, "an object of numbers (or null)"),
    "events": (_integer, False, "an integer"),
    "events_file": (_text, True, "a string or null"),
    "events_dropped": (_integer, False, "an integer"),
    "raw": (_object, False, "an object"),
    "worker": (_object, True, "an object or null"),
    "calls": (_integer, False, "an integer"),
    "calls_file": (_text, True, "a string or null"),
    "calls_without_tokens": (_objects, False, "a list of objects"),
    "parent_rollout_id": (_text, True, "a string or null"),
    "branch_step": (_integer, True, "an integer or null"),
    "children": (_texts, False, "a list of strings"),
}

#: The fields every rollout line has (the others have defaults).
REQUIRED = ("rollout_id", "task_id", "example_id", "rollout_index", "group", "status")


def check_record(data: Mapping[str, Any], *, required: bool = True) -> None:
    """Raise :class:`RecordFieldError` naming the first field of ``data`` (a parsed rollout
    line, or the small fields of one) that is missing (with ``required``) or not of its
    type. Keys it does not know (a newer writer's) are not checked."""
    for name in REQUIRED if required else ():
        if name not in data:
            raise RecordFieldError(f"field {name!r} is missing; expected {_FIELDS[name][2]}")
    for name, value in data.items():
        spec = _FIELDS.get(name)
        if spec is None:
            continue
        right, nullable, expected = spec
        if (value is None and nullable) or (value is not None and right(value)):
            continue
        got = _shown(value)
        if got.split(" ")[1] == expected.split(" ")[1]:  # a list / an object, of wrong items
            got += " holding a value of another type"
        raise RecordFieldError(f"field {name!r}: expected {expected}, not {got}")


#: An events file's line (``events/<rollout_id>.jsonl``): field: as in _FIELDS.
_EVENT_FIELDS: dict[str, tuple[Callable[[Any], bool], bool, str]] = {
    "seq": (_integer, False, "an integer"),
    "type": (_text, False, "a string"),
    "timestamp": (_number, True, "a number or null"),
    "data": (_object, True, "an object or null"),
}


def check_event(data: Any) -> None:
    """Raise :class:`RecordFieldError` when ``data`` (a parsed line of an events file) is
    not an object, or a field the reader uses is not of its type."""
    if not isinstance(data, dict):
        raise RecordFieldError(f"expected an event (a JSON object), not {_shown(data)}")
    for name, (right, nullable, expected) in _EVENT_FIELDS.items():
        if name not in data or (data[name] is None and nullable) or right(data[name]):
            continue
        raise RecordFieldError(f"field {name!r}: expected {expected}, not {_shown(data[name])}")


def _shown(value: Any) -> str:
    """What a wrong value is, in JSON's words (never the value itself: it can be large)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number" if math.isfinite(value) else "NaN or an infinity"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__
