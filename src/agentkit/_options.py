"""Typed plugin options, read from a factory's signature.

A plugin's options are the keyword parameters of what it registers (a class
``__init__`` or a factory function), with their annotations and defaults. A
factory that takes its options as ``**options`` and declares them as an attrs
class (its ``options_type``, as the built-in sandboxes do) has that class's
fields as its options instead, in their order, with their types and defaults.
The CLI's ``-H name=value`` / ``-T name=value`` strings are parsed by those
types; Python keyword arguments are checked against them without coercion.
"""

from __future__ import annotations

import inspect
import json
import math
import types
import typing
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, Literal

import attrs

from agentkit._errors import OptionError
from agentkit._limits import non_finite

__all__ = ["Option", "OptionSchema"]

_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off"}


@attrs.frozen
class Option:
    """One option: its name, type, default and whether it is required."""

    name: str
    annotation: Any
    default: Any
    required: bool

    @property
    def type_name(self) -> str:
        """A readable name of the option's type."""
        return _type_name(self.annotation)


def _type_name(tp: Any) -> str:
    if tp is Any or tp is inspect.Parameter.empty:
        return "any"
    origin = typing.get_origin(tp)
    if origin is Literal:
        return "|".join(repr(a) for a in typing.get_args(tp))
    if origin in (typing.Union, types.UnionType):
        return " | ".join(_type_name(a) for a in typing.get_args(tp))
    if origin is dict and typing.get_args(tp) in ((str, Any), ()):
        return "object"
    if origin is not None:
        args = ", ".join(_type_name(a) for a in typing.get_args(tp))
        return f"{getattr(origin, '__name__', str(origin))}[{args}]"
    if tp is type(None):
        return "None"
    return getattr(tp, "__name__", str(tp))


class OptionSchema:
    """The options a plugin factory accepts, with strict checking."""

    def __init__(self, owner: str, options: Iterable[Option], *, open_ended: bool = False) -> None:
        self.owner = owner
        self.options = {o.name: o for o in options}
        self.open_ended = open_ended

    @classmethod
    def from_callable(cls, owner: str, fn: Callable[..., Any], *, skip: int = 0) -> OptionSchema:
        """Read the schema from ``fn``'s signature, skipping its first ``skip`` parameters.

        A class without its own ``__init__`` takes no options; annotations
        written as strings (``from __future__ import annotations``) are
        resolved in the module that defines ``fn``.
        """
        target: Callable[..., Any] = fn.__init__ if inspect.isclass(fn) else fn
        if target is object.__init__:
            return cls(owner, ())
        try:
            sig = inspect.signature(target)
        except (TypeError, ValueError):
            return cls(owner, (), open_ended=True)
        hints = _resolve_hints(fn, target)
        params = [p for p in sig.parameters.values() if p.name not in ("self", "cls")]
        params = params[skip:]
        opts = []
        open_ended = False
        for p in params:
            if p.kind is inspect.Parameter.VAR_KEYWORD:
                declared = _declared_options(fn)
                if declared is None:
                    open_ended = True
                else:
                    opts += declared
                continue
            if p.kind is inspect.Parameter.VAR_POSITIONAL or p.name.startswith("_"):
                continue
            opts.append(
                Option(
                    name=p.name,
                    annotation=hints.get(p.name, Any),
                    default=None if p.default is inspect.Parameter.empty else p.default,
                    required=p.default is inspect.Parameter.empty,
                )
            )
        return cls(owner, opts, open_ended=open_ended)

    def describe(self) -> list[dict[str, Any]]:
        """JSON description of every option."""
        return [
            {
                "name": o.name,
                "type": o.type_name,
                "default": o.default if _jsonable(o.default) else repr(o.default),
                "required": o.required,
            }
            for o in self.options.values()
        ]

    def _unknown(self, name: str) -> OptionError:
        known = ", ".join(f"{o.name} ({o.type_name})" for o in self.options.values())
        return OptionError(
            f"unknown option {name!r} for {self.owner}; its options are: {known or 'none'}"
        )

    def parse_cli(self, pairs: Iterable[str], flag: str = "-H") -> dict[str, Any]:
        """Parse ``name=value`` strings from the command line into typed values."""
        out: dict[str, Any] = {}
        seen: set[str] = set()
        for pair in pairs:
            name, sep, text = pair.partition("=")
            name = name.strip().replace("-", "_")
            if not sep or not name:
                raise OptionError(f"{flag} {pair!r}: expected name=value (for {self.owner})")
            if name in seen:  # values are not echoed: the option may hold a secret
                raise OptionError(f"{flag} {name} given twice for {self.owner}; give it once")
            seen.add(name)
            opt = self.options.get(name)
            if opt is None:
                if not self.open_ended:
                    raise self._unknown(name)
                try:
                    out[name] = _parse_loose(text)
                except ValueError as exc:
                    raise OptionError(
                        f"{flag} {name}={text!r} for {self.owner}: expected {exc}"
                    ) from None
                continue
            try:
                out[name] = _parse_text(text, opt.annotation)
            except ValueError as exc:
                raise OptionError(
                    f"{flag} {name}={text!r} for {self.owner}: expected {opt.type_name} ({exc})"
                ) from None
        return out

    def validate(self, values: Mapping[str, Any]) -> dict[str, Any]:
        """Check Python keyword options strictly: known names, right types, no coercion."""
        for name, value in values.items():
            found = non_finite(value, name)
            if found is not None:  # whatever the option's type: no setting is NaN
                raise OptionError(
                    f"option {found[0]!r} for {self.owner}: expected a finite number, "
                    f"got {found[1]!r}"
                )
            opt = self.options.get(name)
            if opt is None:
                if self.open_ended:
                    continue
                raise self._unknown(name)
            if not _matches(value, opt.annotation):
                raise OptionError(
                    f"option {name!r} for {self.owner}: expected {opt.type_name}, "
                    f"got {type(value).__name__} {value!r}"
                )
        missing = [o.name for o in self.options.values() if o.required and o.name not in values]
        if missing:
            raise OptionError(f"{self.owner} needs option(s): {', '.join(missing)}")
        return dict(values)


def _declared_options(fn: Callable[..., Any]) -> list[Option] | None:
    """The options ``fn`` takes as ``**options`` when it declares them as an attrs class
    (``fn.options_type``): its fields, in order; None when it declares none."""
    declared = getattr(fn, "options_type", None)
    if not (inspect.isclass(declared) and attrs.has(declared)):
        return None
    hints = _resolve_hints(declared, declared)
    out = []
    for field in attrs.fields(declared):
        default = field.default
        if default is not attrs.NOTHING and callable(getattr(default, "factory", None)):
            default = None if default.takes_self else default.factory()  # an attrs.Factory
        out.append(
            Option(
                name=field.alias or field.name,
                annotation=hints.get(field.name, Any),
                default=None if default is attrs.NOTHING else default,
                required=default is attrs.NOTHING,
            )
        )
    return out


def _resolve_hints(fn: Callable[..., Any], target: Callable[..., Any]) -> dict[str, Any]:
    """Parameter annotations as types; one that cannot be resolved counts as ``Any``."""
    import sys

    module = sys.modules.get(getattr(fn, "__module__", "") or "")
    namespace = dict(vars(module)) if module is not None else {}
    # an inherited __init__ is written in its own module's names
    namespace.update(getattr(target, "__globals__", None) or {})
    try:
        return typing.get_type_hints(target, globalns=namespace)
    except Exception:
        pass
    raw = getattr(target, "__annotations__", {}) or {}
    hints: dict[str, Any] = {}
    for name, annotation in raw.items():
        if isinstance(annotation, str):
            try:
                annotation = eval(annotation, namespace)  # annotations are code by design
            except Exception:
                annotation = Any
        hints[name] = annotation
    return hints


def _jsonable(v: Any) -> bool:
    try:
        json.dumps(v)
    except (TypeError, ValueError):
        return False
    return True


def _parse_loose(text: str) -> Any:
    """JSON when ``text`` parses as JSON, else the text; a number that is not finite
    (``NaN``, ``Infinity``, ``1e999``) is a ValueError."""
    try:
        value = json.loads(text)
    except ValueError:
        return text
    if non_finite(value) is not None:
        raise ValueError("JSON without NaN or Infinity")
    return value


def _parse_text(text: str, tp: Any) -> Any:
    if tp is Any or tp is inspect.Parameter.empty:
        return _parse_loose(text)
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if type(None) in args and text.lower() in ("none", "null", ""):
            return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _parse_text(text, arg)
            except ValueError as exc:
                errors.append(str(exc))
        raise ValueError("; ".join(errors))
    if origin is Literal:
        for choice in typing.get_args(tp):
            if str(choice) == text:
                return choice
        raise ValueError(f"one of {', '.join(map(str, typing.get_args(tp)))}")
    if tp is bool:
        low = text.lower()
        if low in _TRUE:
            return True
        if low in _FALSE:
            return False
        raise ValueError("true or false")
    if tp is int:
        try:
            return int(text, 10)
        except ValueError:
            raise ValueError("an integer") from None
    if tp is float:
        try:
            number = float(text)
        except ValueError:
            raise ValueError("a number") from None
        if not math.isfinite(number):
            raise ValueError("a finite number")
        return number
    if tp is str:
        return text
    if tp is Path:
        return Path(text)
    if origin in (list, dict, tuple) or tp in (list, dict):
        try:
            value = json.loads(text)
        except ValueError:
            if origin is list or tp is list:
                (item,) = typing.get_args(tp) or (str,)
                value = [_parse_text(s.strip(), item) for s in text.split(",") if s.strip()]
            else:
                raise ValueError("JSON") from None
        if non_finite(value) is not None:
            raise ValueError("JSON without NaN or Infinity")
        if not _matches(value, tp):
            raise ValueError("JSON of that shape")
        return value
    raise ValueError(f"a value of type {_type_name(tp)}")


def _matches(value: Any, tp: Any) -> bool:
    if tp is Any or tp is inspect.Parameter.empty:
        return True
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        return any(_matches(value, a) for a in typing.get_args(tp))
    if origin is Literal:
        return any(value == c and type(value) is type(c) for c in typing.get_args(tp))
    if tp is type(None):
        return value is None
    if tp is float:  # a finite number: NaN and infinities are no setting's value
        return (
            isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
        )
    if tp is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if tp is Path:
        return isinstance(value, (str, Path))
    if origin is list:
        (item,) = typing.get_args(tp) or (Any,)
        return isinstance(value, list) and all(_matches(v, item) for v in value)
    if origin is dict:
        k, v = typing.get_args(tp) or (Any, Any)
        return isinstance(value, dict) and all(
            _matches(a, k) and _matches(b, v) for a, b in value.items()
        )
    if origin is not None:
        return isinstance(value, origin)
    if isinstance(tp, type):
        return isinstance(value, tp)
    return True
