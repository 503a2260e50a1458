"""A job's ``[matrix]``: its axes (any run setting, one entry of a table of settings, a
plugin's option) and their values, labelled, typed and, for a secret, read from the
environment and never written.
"""

from __future__ import annotations

import math
import re
from typing import Any

import attrs

from agentkit._context import is_secret_header
from agentkit._errors import ValidationError, kind_of
from agentkit._limits import check_finite
from agentkit._redact import MARKER, looks_like_key, register_secret
from agentkit.jobs._cell import slug
from agentkit.jobs._fields import FieldReader
from agentkit.jobs._settings import PLUGIN_TABLES, TABLE_OPTIONS, Settings, setting_key

__all__ = ["Axis", "Value", "read_matrix", "value_json"]


@attrs.frozen
class Value:
    """One value of a matrix axis."""

    label: str
    value: Any
    labelled: bool  # given as {label = ..., value = ...} (or env = ...)
    #: A secret (a secret-looking key, a value that looks like a key, or read from the
    #: environment): never written; ``env`` names the variable it was read from.
    secret: bool = False
    env: str | None = None


@attrs.frozen
class Axis:
    """A ``[matrix]`` key and its values."""

    key: str  # ``max_turns``, ``sampling_args.temperature``, ``harness_options.x``
    short: str  # what cell names call it
    values: tuple[Value, ...]
    path: str

    def settings(self, value: Value) -> Settings:
        """The settings one of its values gives a cell."""
        table, _, sub = self.key.partition(".")
        if table in PLUGIN_TABLES:
            return Settings(**{table: {sub: value.value}})
        if sub:
            return Settings(options={table: {sub: value.value}})
        return Settings(options={self.key: value.value})


def read_matrix(r: FieldReader, value: Any) -> list[Axis]:
    """The ``[matrix]`` table's axes, in order (a table of tables gives one axis per key)."""
    matrix = r.table(value, "matrix")
    keyed: list[tuple[str, Any, str]] = []
    for raw, values in matrix.items():
        key = setting_key(raw)
        table, dot, _ = key.partition(".")
        if not dot and key in (*TABLE_OPTIONS, *PLUGIN_TABLES) and isinstance(values, dict):
            for sub_key, sub_values in values.items():
                keyed.append(
                    (setting_key(f"{key}.{sub_key}"), sub_values, f"matrix.{raw}.{sub_key}")
                )
            continue
        if dot and table not in (*TABLE_OPTIONS, *PLUGIN_TABLES):
            raise r.error(
                f"matrix.{raw}",
                "a dotted matrix key varies one entry of sampling_args, headers, "
                "sandbox_options, harness_options or taskset_options",
            )
        keyed.append((key, values, f"matrix.{raw}"))
    lasts = [k.rpartition(".")[2] for k, _, _ in keyed]
    axes: list[Axis] = []
    for key, values, path in keyed:
        last = key.rpartition(".")[2]
        short = last if lasts.count(last) == 1 else key
        axes.append(Axis(key, short, _axis_values(r, key, values, path), path))
    return axes


def _axis_values(r: FieldReader, key: str, values: Any, path: str) -> tuple[Value, ...]:
    """An axis's values: each labelled (given, or made from the value), typed as its key
    takes it; a secret needs a label and is registered with the redactor."""
    if not isinstance(values, list) or not values:
        raise r.error(path, f"expected a non-empty list of values, got {kind_of(values)}")
    secret_key = _secret_key(key)
    out: list[Value] = []
    seen: set[str] = set()
    for i, item in enumerate(values):
        where = f"{path}[{i}]"
        labelled = isinstance(item, dict)
        env: str | None = None
        if labelled:
            entry = r.table(item, where)
            extra = sorted(set(entry) - {"label", "value", "env"})
            if extra or "label" not in entry or ("value" in entry) == ("env" in entry):
                raise r.error(
                    where,
                    "expected a value, or a table {label = ..., value = ...} (a secret: "
                    '{label = ..., env = "VAR"}, read from that environment variable)',
                )
            label = r.label(entry["label"], f"{where}.label")
            if "env" in entry:
                env = r.string(entry["env"], f"{where}.env")
                raw = r.from_environment(env, f"{where}.env")
            else:
                raw = entry["value"]
        else:
            raw = item
            label = ""
        at = f"{where}.value" if labelled else where
        secret = env is not None or secret_key or (isinstance(raw, str) and looks_like_key(raw))
        if secret and not labelled:
            # the value is not repeated: it may be a key
            what = f"a value of {key!r}" if secret_key else "a value that looks like a key"
            raise r.error(
                where,
                f"{what} would name a cell and be written into job.json: give it a label "
                'and read it from the environment, {label = "...", env = "VAR"} (or '
                '{label = "...", value = ...}); it is never written',
            )
        typed = _axis_value(r, key, raw, at, hide=secret)
        if secret:
            register_secret(typed if isinstance(typed, str) else None)  # redacted in runs
        if not labelled:
            made = _value_label(typed)
            if made is None:
                raise r.error(
                    where, "a table or list value needs a label: {label = ..., value = ...}"
                )
            label = made
        if label in seen:
            raise r.error(
                where,
                f"two values of this key are labelled {label!r}; give them labels: "
                "{label = ..., value = ...}",
            )
        seen.add(label)
        out.append(Value(label, typed, labelled, secret=bool(secret), env=env))
    return tuple(out)


def _axis_value(r: FieldReader, key: str, raw: Any, at: str, *, hide: bool) -> Any:
    """One matrix value, typed as its key takes it; with ``hide``, an error does not
    repeat it (it is a secret)."""
    table, dot, _sub = key.partition(".")
    try:
        if not dot:
            return r.run_option(key, raw, at)
        if table == "headers":
            return r.string(raw, at)
        check_finite(raw, at, r.source)  # TOML has nan and inf; no setting may
        return raw
    except ValidationError:
        if not hide:
            raise
        raise r.error(
            at, f"not a value {key!r} takes (a {_kind_only(raw)}; not shown: a secret)"
        ) from None


def _value_label(value: Any) -> str | None:
    """A matrix value's label: ``true``, ``5``, ``0.7``, a slug of a string; None for
    tables and lists (which need a label)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else None
    if isinstance(value, str):
        return slug(value)
    return None


def value_json(value: Value) -> Any:
    """A matrix value as the stored document keeps it: a secret's variable, or ``***``."""
    if value.env is not None:
        return {"label": value.label, "env": value.env}
    if value.secret:
        return {"label": value.label, "value": MARKER}
    return {"label": value.label, "value": value.value} if value.labelled else value.value


#: The last word of an option's name that makes its values secrets (``api_key``,
#: ``hf_token``, ``password``; not ``max_tokens`` nor ``token_limit``).
_SECRET_LAST_WORDS = frozenset(
    {"key", "apikey", "token", "secret", "password", "passwd", "credential", "credentials", "auth"}
)


def _secret_key(key: str) -> bool:
    """Whether a matrix key's values are secrets by their name: a header such as
    ``Authorization`` or ``X-Api-Key``, an option such as ``harness_options.api_token``
    (run options and sampling arguments are none)."""
    table, dot, sub = key.partition(".")
    if not dot or table == "sampling_args":
        return False
    if table == "headers":
        return is_secret_header(sub)
    return re.split(r"[^a-z0-9]+", sub.lower())[-1] in _SECRET_LAST_WORDS


def _kind_only(value: Any) -> str:
    """A value's type for a message that must not show it."""
    if isinstance(value, str):
        return "string"
    return "table" if isinstance(value, dict) else type(value).__name__
