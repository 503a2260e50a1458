"""Input caps: how deep JSON may nest, how JSON task files and replies are read.

A hostile or broken task file must cost one clear error naming the file, never a
``RecursionError`` that aborts the whole load or a silently odd value. JSON is read
strictly: duplicate keys and ``NaN``/``Infinity`` (not JSON, though Python's parser
takes them) are errors, and so is nesting deeper than :data:`MAX_NESTING_DEPTH`.

JSON another program sends (a model server's reply, a stream event, an error
body) is read with :func:`loads_bounded`: as leniently as ``json.loads``, but a
body nested deeper than :data:`MAX_NESTING_DEPTH` is a :class:`NestingError`
(a ``ValueError``, like any malformed body) with our message, whether Python's
parser gave up on it (200,000 levels: ``RecursionError``) or it parsed and would
break whatever walks it next (redaction, the rollout record). Every JSON file
agentkit writes is written by :func:`dumps_finite`: strict JSON, never ``NaN``
(a number that is not finite, from such a reply say, is written as ``null``).
See docs/security.md for every cap.
"""

from __future__ import annotations

import json
import logging
import math
import os
from collections.abc import Callable, Mapping
from typing import Any

from agentkit._errors import SpecError, ValidationError

__all__ = [
    "MAX_CELLS",
    "MAX_NESTING_DEPTH",
    "MAX_ROLLOUTS",
    "NestingError",
    "check_finite",
    "check_nesting",
    "check_rollouts",
    "dumps_finite",
    "json_type",
    "load_json",
    "loads_bounded",
    "max_cells",
    "max_rollouts",
    "nesting_depth",
    "non_finite",
]

#: How many levels of objects and arrays task data and replies may nest (a chat
#: transcript with tool calls uses about ten; a chat completion with logprobs six).
#: Deeper data is refused when it is loaded: the code that reads it back
#: (validation, conversion, redaction, JSON writing) is recursive.
MAX_NESTING_DEPTH = 100

_log = logging.getLogger("agentkit")


class NestingError(ValueError):
    """JSON from another program nested deeper than :data:`MAX_NESTING_DEPTH` (or
    ``limit``): a malformed body, so a ``ValueError``."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"it is nested more than {limit} levels deep (MAX_NESTING_DEPTH)")
        self.limit = limit


def nesting_depth(value: Any, limit: int = MAX_NESTING_DEPTH) -> int:
    """How deep ``value`` nests (a scalar is 0, ``[]`` is 1), counted up to ``limit + 1``.

    Iterative, so any depth is measured without recursion; it stops early
    once the depth is past ``limit``.
    """
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, Mapping):
            children: Any = item.values()
        elif isinstance(item, (list, tuple)):
            children = item
        else:
            continue
        depth += 1
        if depth > deepest:
            deepest = depth
            if deepest > limit:
                return deepest
        stack.extend((child, depth) for child in children)
    return deepest


def check_nesting(
    value: Any, path: str = "", source: str | None = None, limit: int = MAX_NESTING_DEPTH
) -> None:
    """Raise :class:`ValidationError` when ``value`` nests deeper than ``limit``."""
    if nesting_depth(value, limit) > limit:
        raise ValidationError(path, f"nested more than {limit} levels deep", source)


#: The most rollouts one run plans (selected tasks × rollouts per task); more is
#: refused before anything is allocated for them. ``AGENTKIT_MAX_ROLLOUTS`` raises it.
MAX_ROLLOUTS = 1_000_000
#: The most cells one job has (the cross product less exclusions, plus ``[[cells]]``);
#: more is refused before any cell is made. ``AGENTKIT_MAX_CELLS`` raises it.
MAX_CELLS = 10_000


def _cap(variable: str, default: int) -> int:
    text = os.environ.get(variable)
    if text is None or not text.strip():
        return default
    try:
        value = int(text.strip().replace("_", ""))
    except ValueError:
        value = 0
    if value < 1:
        raise SpecError(f"{variable}={text!r}: expected a whole number of at least 1")
    return value


def max_rollouts() -> int:
    """The most rollouts one run may plan: ``AGENTKIT_MAX_ROLLOUTS``, else
    :data:`MAX_ROLLOUTS`."""
    return _cap("AGENTKIT_MAX_ROLLOUTS", MAX_ROLLOUTS)


def max_cells() -> int:
    """The most cells one job may have: ``AGENTKIT_MAX_CELLS``, else :data:`MAX_CELLS`."""
    return _cap("AGENTKIT_MAX_CELLS", MAX_CELLS)


def check_rollouts(
    tasks: int, rollouts_per_task: int, *, left: int | None = None, of: str = ""
) -> None:
    """Refuse a plan of more than :func:`max_rollouts` rollouts (``tasks`` selected tasks,
    at least, × ``rollouts_per_task``) with one :class:`~agentkit.SpecError` naming the
    settings and the limit; counted, never allocated. ``left``: what remains of the
    limit when other runs of this process planned some (a job's cells), ``of`` says which.
    """
    limit = max_rollouts()
    most = limit if left is None else left
    total = tasks * rollouts_per_task
    if total <= most:
        return
    each = "task" if tasks == 1 else "tasks"
    than = f"{limit:,}, MAX_ROLLOUTS" + (f"; {of}" if left is not None and of else "")
    raise SpecError(
        f"the run would plan {total:,} rollouts ({tasks:,} {each} × {rollouts_per_task:,} "
        f"rollouts per task), more than one process plans ({than}): lower "
        "rollouts_per_task (-n) or the tasks (--limit, --task), or raise the limit with the "
        "environment variable AGENTKIT_MAX_ROLLOUTS"
    )


def non_finite(value: Any, path: str = "") -> tuple[str, float] | None:
    """The path and value of the first NaN or infinite number in ``value`` (a number,
    or JSON-like data: mappings, lists, tuples), or None when every number is finite."""
    stack: list[tuple[Any, str]] = [(value, path)]
    while stack:
        item, where = stack.pop()
        if type(item) is float:
            if not math.isfinite(item):
                return where, item
        elif isinstance(item, Mapping):
            stack.extend((v, f"{where}.{k}" if where else str(k)) for k, v in item.items())
        elif isinstance(item, (list, tuple)):
            stack.extend((v, f"{where}[{i}]") for i, v in enumerate(item))
        elif isinstance(item, float) and not math.isfinite(item):  # a float subclass
            return where, item
    return None


def check_finite(value: Any, path: str, source: str | None = None) -> None:
    """Raise :class:`ValidationError` when ``value`` holds a NaN or infinite number
    (JSON has none; a setting, a task or a record must not either)."""
    found = non_finite(value, path)
    if found is not None:
        where, number = found
        raise ValidationError(where, f"expected a finite number, got {number!r}", source)


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ValidationError("", f"duplicate key {key!r} in one object")
        out[key] = value
    return out


def _no_constant(name: str) -> Any:
    raise ValidationError("", f"{name} is not a JSON number")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValidationError("", f"the number {text[:40]} is too large for a float")
    return value


def load_json(
    text: str | bytes,
    source: str | None = None,
    *,
    limit: int = MAX_NESTING_DEPTH,
    hook: Callable[[list[tuple[str, Any]]], Any] = _no_duplicates,
) -> Any:
    """Parse JSON strictly: one :class:`ValidationError` for anything wrong with it.

    Invalid JSON, a duplicate key, ``NaN``/``Infinity`` and nesting deeper
    than ``limit`` are errors located in ``source`` (a leading UTF-8
    byte-order mark is allowed, as most editors write one).
    """
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            reason = f"not UTF-8 ({exc.reason} at byte {exc.start})"
            raise ValidationError("", reason, source) from None
    text = text.removeprefix("\ufeff")
    try:
        data = json.loads(
            text, object_pairs_hook=hook, parse_constant=_no_constant, parse_float=_finite_float
        )
    except ValidationError as exc:
        raise exc.with_source(source) if source else exc from None
    except json.JSONDecodeError as exc:
        where = f"column {exc.colno}"
        if exc.lineno > 1:
            where = f"line {exc.lineno}, {where}"
        raise ValidationError("", f"invalid JSON: {exc.msg} ({where})", source) from None
    except RecursionError:
        raise ValidationError("", f"nested more than {limit} levels deep", source) from None
    check_nesting(data, "", source, limit)
    return data


def loads_bounded(
    data: str | bytes, *, limit: int = MAX_NESTING_DEPTH, finite: bool = False
) -> Any:
    """``json.loads(data)`` for JSON another program sent, refusing deep nesting.

    Raises ``ValueError`` for text that is not JSON (``json.JSONDecodeError``)
    and :class:`NestingError` for a document nested deeper than ``limit``. A
    document with no more opening brackets than ``limit`` cannot be that deep
    and is not walked again (the common case: a reply has a few dozen).
    ``finite``: ``NaN``, ``Infinity`` and a number too large for a float (which
    Python's parser reads as infinite) are a :class:`ValidationError` (a
    ``ValueError``) too, as JSON has none (each number with a fraction or an
    exponent is checked as it is read: a model call's request holds a few).
    """
    try:
        if finite:
            value = json.loads(data, parse_constant=_no_constant, parse_float=_finite_float)
        else:
            value = json.loads(data)
    except RecursionError:
        raise NestingError(limit) from None
    opens = (
        data.count(b"[") + data.count(b"{")
        if isinstance(data, bytes)
        else data.count("[") + data.count("{")
    )
    if opens > limit and _json_depth(value, limit) > limit:
        raise NestingError(limit)
    return value


def dumps_finite(data: Any) -> str:
    """Compact JSON text of ``data`` (not ASCII-escaped; objects JSON cannot hold as their
    ``str``), as every file agentkit writes holds it: strict JSON, never ``NaN`` or
    ``Infinity``.

    Settings, tasks and replies are checked to be finite where they are read; a
    number that still is not (a plugin's record holding ``float("nan")``) is written
    as ``null`` with a warning on the ``agentkit`` logger naming its place, never as
    text a JSON parser refuses.
    """
    try:
        return json.dumps(
            data, ensure_ascii=False, separators=(",", ":"), default=str, allow_nan=False
        )
    except ValueError:
        found = non_finite(data)
        if found is None:
            raise
    _log.warning(
        "agentkit: %s at %s is not a finite number; JSON has none, so it is written as null",
        found[1],
        found[0] or "the top level",
    )
    return json.dumps(
        _finite_copy(data), ensure_ascii=False, separators=(",", ":"), default=str, allow_nan=False
    )


def _finite_copy(value: Any) -> Any:
    """A copy of JSON-like data with every NaN or infinite number replaced by None."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {k: _finite_copy(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite_copy(v) for v in value]
    return value


def _json_depth(value: Any, limit: int) -> int:
    """:func:`nesting_depth` of parsed JSON, whose containers are exactly dicts and lists
    (checked by type, not through the ``Mapping`` ABC: a long answer's logprobs are
    hundreds of thousands of small objects)."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 1)] if type(value) in (dict, list) else []
    while stack:
        item, depth = stack.pop()
        if depth > deepest:
            deepest = depth
            if deepest > limit:
                return deepest
        for child in item.values() if type(item) is dict else item:
            kind = type(child)
            if kind is dict or kind is list:
                stack.append((child, depth + 1))
    return deepest


def json_type(value: Any) -> str:
    """A parsed JSON value's type, for messages: ``an object``, ``a string``, ``null``..."""
    if value is None:
        return "null"
    names: dict[type[Any], str] = {
        dict: "an object",
        list: "a list",
        str: "a string",
        bool: "a boolean",
        int: "an integer",
        float: "a number",
    }
    return names.get(type(value), f"a {type(value).__name__}")
