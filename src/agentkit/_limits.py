"""Input caps: how deep task data may nest, how JSON task files are read.

A hostile or broken task file must cost one clear error naming the file, never a
``RecursionError`` that aborts the whole load or a silently odd value. JSON is read
strictly: duplicate keys and ``NaN``/``Infinity`` (not JSON, though Python's parser
takes them) are errors, and so is nesting deeper than :data:`MAX_NESTING_DEPTH`.
See docs/security.md for every cap.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from typing import Any

from agentkit._errors import ValidationError

__all__ = [
    "MAX_NESTING_DEPTH",
    "check_finite",
    "check_nesting",
    "load_json",
    "nesting_depth",
]

#: How many levels of objects and arrays task data may nest (a chat transcript with
#: tool calls uses about ten). Deeper data is refused when it is loaded: the code
#: that reads it back (validation, conversion, JSON writing) is recursive.
MAX_NESTING_DEPTH = 100


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


def check_finite(value: Any, path: str, source: str | None = None) -> None:
    """Raise :class:`ValidationError` when ``value`` holds a NaN or infinite number."""
    stack: list[tuple[Any, str]] = [(value, path)]
    while stack:
        item, where = stack.pop()
        if isinstance(item, float) and not math.isfinite(item):
            raise ValidationError(where, f"expected a finite number, got {item!r}", source)
        if isinstance(item, Mapping):
            stack.extend((v, f"{where}.{k}") for k, v in item.items())
        elif isinstance(item, (list, tuple)):
            stack.extend((v, f"{where}[{i}]") for i, v in enumerate(item))


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ValidationError("", f"duplicate key {key!r} in one object")
        out[key] = value
    return out


def _no_constant(name: str) -> Any:
    raise ValidationError("", f"{name} is not a JSON number")


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
        data = json.loads(text, object_pairs_hook=hook, parse_constant=_no_constant)
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
