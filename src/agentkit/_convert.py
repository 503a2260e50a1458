"""One strict converter between agentkit's data classes and JSON.

Strict means: unknown keys are rejected, ``"10"`` is never turned into ``10``
nor ``"true"`` into ``True``, a number is finite (``NaN`` and infinities are
not JSON, in a typed field or anywhere in a free-form object), and every
error carries the path of the bad value (``tasks[3].metadata.model``). cattrs
is imported on first use so that ``import agentkit`` stays fast.
"""

from __future__ import annotations

import functools
import math
import re
import typing
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

import attrs

from agentkit._errors import ValidationError
from agentkit._limits import check_finite
from agentkit._options import _matches, _type_name

if TYPE_CHECKING:
    import cattrs

__all__ = ["converter", "structure", "unstructure"]

T = TypeVar("T")

_TYPE_NAMES = {int: "an integer", float: "a number", str: "a string", bool: "a boolean"}


def _strict_scalar(expected: type[Any]) -> Any:
    def hook(value: Any, _type: Any) -> Any:
        ok = isinstance(value, expected) and not (expected is not bool and isinstance(value, bool))
        if expected is float and isinstance(value, int) and not isinstance(value, bool):
            return float(value)
        if not ok:
            raise ValidationError("", f"expected {_TYPE_NAMES[expected]}, got {_describe(value)}")
        if expected is float and not math.isfinite(value):
            raise ValidationError("", f"expected a finite number, got {value!r}")
        return value

    return hook


def _describe(value: Any) -> str:
    text = repr(value)
    if len(text) > 60:
        text = text[:57] + "..."
    return f"{type(value).__name__} {text}"


@functools.cache
def converter() -> cattrs.Converter:
    """Return the process-wide strict converter (built on first use)."""
    import cattrs

    conv = cattrs.Converter(forbid_extra_keys=True, detailed_validation=True)
    for scalar in (int, float, str, bool):
        conv.register_structure_hook(scalar, _strict_scalar(scalar))
    conv.register_structure_hook_func(_is_any_dict, _structure_any_dict)
    conv.register_structure_hook_func(_is_list, _structure_list)
    conv.register_structure_hook_func(_is_plain_union, _structure_union)
    conv.register_structure_hook_func(_is_literal, _structure_literal)
    conv.register_structure_hook_factory(attrs.has, lambda cls: _attrs_hook(conv, cls))
    return conv


def _attrs_hook(conv: cattrs.Converter, cls: type[Any]) -> Callable[[Any, Any], Any]:
    """cattrs' generated hook for ``cls``, refusing anything but a JSON object first."""
    from cattrs.gen import make_dict_structure_fn

    inner = make_dict_structure_fn(cls, conv)

    def hook(value: Any, tp: Any) -> Any:
        if not isinstance(value, Mapping):
            raise ValidationError("", f"expected an object, got {_describe(value)}")
        return inner(value, tp)

    return hook


def _is_any_dict(tp: Any) -> bool:
    if tp is dict:
        return True
    return typing.get_origin(tp) is dict and typing.get_args(tp) == (str, Any)


def _structure_any_dict(value: Any, _type: Any) -> Any:
    if not isinstance(value, dict):
        raise ValidationError("", f"expected an object, got {_describe(value)}")
    for key in value:
        if not isinstance(key, str):
            raise ValidationError("", f"expected string keys, got {_describe(key)}")
    check_finite(value, "")  # JSON has no NaN or Infinity, nor does any agentkit setting
    return value


def _is_list(tp: Any) -> bool:
    return tp is list or typing.get_origin(tp) is list


def _structure_list(value: Any, tp: Any) -> list[Any]:
    """Lists stay lists: a dict, a string or a tuple is not silently iterated."""
    if not isinstance(value, list):
        raise ValidationError("", f"expected a list, got {_describe(value)}")
    (item,) = typing.get_args(tp) or (Any,)
    if item is Any:
        check_finite(value, "")
        return list(value)
    out = []
    for i, element in enumerate(value):
        try:
            out.append(converter().structure(element, item))
        except Exception as exc:
            raise _first_error(exc).with_prefix(f"[{i}]") from None
    return out


def _is_literal(tp: Any) -> bool:
    return typing.get_origin(tp) is typing.Literal


def _structure_literal(value: Any, tp: Any) -> Any:
    choices = typing.get_args(tp)
    if value in choices and type(value) in {type(c) for c in choices}:
        return value
    raise ValidationError(
        "", f"expected one of {', '.join(map(repr, choices))}, got {_describe(value)}"
    )


def _is_plain_union(tp: Any) -> bool:
    import types

    if typing.get_origin(tp) not in (typing.Union, types.UnionType):
        return False
    args = [a for a in typing.get_args(tp) if a is not type(None)]
    return not any(attrs.has(a) for a in args) or len(args) > 1


def _structure_union(value: Any, tp: Any) -> Any:
    """Strict unions of plain JSON types: the value must already be one of them."""
    check_finite(value, "")
    for arg in typing.get_args(tp):
        if attrs.has(arg) and isinstance(value, dict):
            return converter().structure(value, arg)
        if not attrs.has(arg) and _matches(value, arg):
            return float(value) if arg is float and isinstance(value, int) else value
    raise ValidationError("", f"expected {_type_name(tp)}, got {_describe(value)}")


def structure(data: Any, cls: type[T], *, source: str | None = None, path: str = "") -> T:
    """Build ``cls`` from JSON-like ``data`` or raise one :class:`ValidationError`.

    The error names ``source`` (a file or spec) and the path of the first bad
    value below ``path``.
    """
    try:
        return converter().structure(data, cls)
    except Exception as exc:  # cattrs raises exception groups with notes
        err = _first_error(exc)
        if path:
            err = err.with_prefix(path)
        if source:
            err = err.with_source(source)
        raise err from None


def unstructure(obj: Any) -> Any:
    """Turn a data class into plain JSON-compatible values."""
    return converter().unstructure(obj)


_NOTE_ATTR = re.compile(r"Structuring class \S+ @ attribute (\w+)")
_NOTE_INDEX = re.compile(r"Structuring \S+ @ index (\d+)")
_NOTE_KEY = re.compile(r"Structuring mapping value @ key '?(.*?)'?$")


def _first_error(exc: BaseException, path: str = "") -> ValidationError:
    """Walk a cattrs exception tree down to the first leaf and build its path."""
    import cattrs

    if isinstance(exc, cattrs.ForbiddenExtraKeysError):
        extras = sorted(exc.extra_fields)
        if len(extras) == 1:
            return ValidationError(_join(path, extras[0]), "unknown key")
        return ValidationError(path, "unknown keys: " + ", ".join(extras))
    if isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        sub = exc.exceptions[0]
        step = _step_from_notes(getattr(sub, "__notes__", []))
        return _first_error(sub, _join(path, step) if step else path)
    if isinstance(exc, ValidationError):
        return exc.with_prefix(path) if path else exc
    if isinstance(exc, KeyError):
        return ValidationError(path, "required key is missing")
    if isinstance(exc, TypeError) and "required" in str(exc) and "argument" in str(exc):
        names = re.findall(r"'(\w+)'", str(exc))
        return ValidationError(path, "missing required key(s): " + ", ".join(names))
    if isinstance(exc, (TypeError, ValueError)):
        return ValidationError(path, str(exc) or type(exc).__name__)
    return ValidationError(path, f"{type(exc).__name__}: {exc}")


def _step_from_notes(notes: list[str]) -> str:
    for note in notes:
        if m := _NOTE_ATTR.search(note):
            return m.group(1)
        if m := _NOTE_INDEX.search(note):
            return f"[{m.group(1)}]"
        if m := _NOTE_KEY.search(note):
            return m.group(1)
    return ""


def _join(path: str, step: str) -> str:
    if not path:
        return step
    if step.startswith("["):
        return path + step
    return f"{path}.{step}"
