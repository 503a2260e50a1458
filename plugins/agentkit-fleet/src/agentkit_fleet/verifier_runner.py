"""Run one Fleet verifier against a seed and a current SQLite database.

This file is copied into the verifier's sandbox and run there with the
sandbox's ``python3``: it uses the standard library only and never imports
agentkit. Usage::

    python3 verifier_runner.py DIR

``DIR`` holds ``input.json`` (``code``, ``final_answer``), ``seed.sqlite`` and
``current.sqlite``. The outcome is printed as one JSON line after the marker
:data:`RESULT_MARKER`: ``success``, ``result``, ``error`` and ``stdout`` (what
the verifier printed).

The verifier sees what Fleet verifiers expect: ``env.db("seed")`` /
``env.db("current")`` (also through ``env.app(name)``, ``env.instance.load()``),
the ``TASK_SUCCESSFUL_SCORE`` / ``TASK_FAILED_SCORE`` constants, the
``normalized_contains``, ``normalized_string_comparison``,
``extract_numbers`` and ``contains_number`` helpers, ``IgnoreConfig`` and
``DatabaseSnapshot``. The query API is the Fleet SDK's, with its semantics
(immutable builders; ``count()`` returns an object to read with ``int()``;
``eq(col, None)`` matches nothing), so a verifier that passes here passes on
the Fleet platform; ``diff()`` is not available. Both verifier signatures
work: ``(env, final_answer=None)`` and ``(before, after, transcript=None)``.
"""

from __future__ import annotations

import contextlib
import inspect
import io
import json
import re
import sqlite3
import string
import sys
import traceback
from pathlib import Path
from typing import Any

RESULT_MARKER = "@@FLEET_VERIFIER_RESULT@@"

TASK_SUCCESSFUL_SCORE = 1
TASK_FAILED_SCORE = 0

_TRANSLATOR = str.maketrans(string.punctuation, " " * len(string.punctuation))


def _normalize_text(value: str) -> str:
    return "".join(value.lower().translate(_TRANSLATOR).split())


def _stringify(content: Any) -> str:
    if isinstance(content, (dict, list)):
        return json.dumps(content, sort_keys=True)
    return str(content)


def normalized_contains(target: str, blob: Any) -> bool:
    """``target`` occurs in ``blob``, ignoring case, punctuation and spaces."""
    return _normalize_text(target) in _normalize_text(_stringify(blob))


def normalized_string_comparison(target: str, blob: Any) -> bool:
    """``target`` equals ``blob``, ignoring case, punctuation and spaces."""
    return _normalize_text(target) == _normalize_text(_stringify(blob))


def extract_numbers(text: str) -> list[float]:
    """Every number in ``text`` (thousands separators ignored)."""
    return [float(n) for n in re.findall(r"-?\d+\.?\d*", text.replace(",", ""))]


def contains_number(text: str, target_number: Any) -> bool:
    """``text`` mentions ``target_number``."""
    try:
        target = float(str(target_number).replace(",", ""))
    except ValueError:
        return False
    return target in extract_numbers(text)


class IgnoreConfig:
    """Tables and fields a diff should ignore (Fleet's signature)."""

    def __init__(
        self,
        tables: set[str] | None = None,
        fields: set[str] | None = None,
        table_fields: dict[str, set[str]] | None = None,
    ) -> None:
        self.tables = tables or set()
        self.fields = fields or set()
        self.table_fields = table_fields or {}

    def should_ignore_table(self, table: str) -> bool:
        return table in self.tables

    def should_ignore_field(self, table: str, field: str) -> bool:
        return field in self.fields or field in self.table_fields.get(table, set())


class _CountResult:
    """A count, as Fleet's ``count()`` returns it: ``int(...)`` or the ``assert_*`` methods.

    Like Fleet's, it does not compare with numbers (``count() == 3`` is
    False): verifiers that pass here pass on the Fleet platform.
    """

    def __init__(self, value: int) -> None:
        self.value = value

    def assert_eq(self, expected: int) -> _CountResult:
        if self.value != expected:
            raise AssertionError(f"Expected {expected}, got {self.value}")
        return self

    def assert_gt(self, threshold: int) -> _CountResult:
        if self.value <= threshold:
            raise AssertionError(f"Expected > {threshold}, got {self.value}")
        return self

    def assert_between(self, low: int, high: int) -> _CountResult:
        if not low <= self.value <= high:
            raise AssertionError(f"Expected {low}-{high}, got {self.value}")
        return self

    def __int__(self) -> int:
        return self.value

    def __repr__(self) -> str:
        return f"<Count {self.value}>"


class QueryBuilder:
    """Fleet's fluent query over one table: ``db.table("t").eq("id", 3).first()``.

    Every method returns a new builder (the receiver is unchanged). As in
    Fleet's SDK, ``eq(col, None)`` compares with SQL ``=`` (matching no row);
    use ``is_null``.
    """

    def __init__(self, snapshot: DatabaseSnapshot, table: str) -> None:
        self._snapshot = snapshot
        self._table = table
        self._select_cols: list[str] = ["*"]
        self._conditions: list[tuple[str, str, Any]] = []
        self._joins: list[tuple[str, dict[str, str]]] = []
        self._limit: int | None = None
        self._order_by: str | None = None

    def _clone(self) -> QueryBuilder:
        qb = QueryBuilder(self._snapshot, self._table)
        qb._select_cols = list(self._select_cols)
        qb._conditions = list(self._conditions)
        qb._joins = list(self._joins)
        qb._limit = self._limit
        qb._order_by = self._order_by
        return qb

    def select(self, *columns: str) -> QueryBuilder:
        qb = self._clone()
        qb._select_cols = list(columns) if columns else ["*"]
        return qb

    def limit(self, n: int | None) -> QueryBuilder:
        qb = self._clone()
        qb._limit = n
        return qb

    def sort(self, column: str, desc: bool = False) -> QueryBuilder:
        qb = self._clone()
        qb._order_by = f"{column} {'DESC' if desc else 'ASC'}"
        return qb

    def _add(self, column: str, op: str, value: Any) -> QueryBuilder:
        qb = self._clone()
        qb._conditions.append((column, op, value))
        return qb

    def eq(self, column: str, value: Any) -> QueryBuilder:
        return self._add(column, "=", value)

    def neq(self, column: str, value: Any) -> QueryBuilder:
        return self._add(column, "!=", value)

    def gt(self, column: str, value: Any) -> QueryBuilder:
        return self._add(column, ">", value)

    def gte(self, column: str, value: Any) -> QueryBuilder:
        return self._add(column, ">=", value)

    def lt(self, column: str, value: Any) -> QueryBuilder:
        return self._add(column, "<", value)

    def lte(self, column: str, value: Any) -> QueryBuilder:
        return self._add(column, "<=", value)

    def in_(self, column: str, values: list[Any]) -> QueryBuilder:
        return self._add(column, "IN", tuple(values))

    def not_in(self, column: str, values: list[Any]) -> QueryBuilder:
        return self._add(column, "NOT IN", tuple(values))

    def is_null(self, column: str) -> QueryBuilder:
        return self._add(column, "IS", None)

    def not_null(self, column: str) -> QueryBuilder:
        return self._add(column, "IS NOT", None)

    def ilike(self, column: str, pattern: str) -> QueryBuilder:
        return self._add(column, "ILIKE", pattern)

    def join(self, other_table: str, on: dict[str, str]) -> QueryBuilder:
        qb = self._clone()
        qb._joins.append((other_table, on))
        return qb

    def _compile(self) -> tuple[str, list[Any]]:
        sql = [f"SELECT {', '.join(self._select_cols)} FROM {self._table}"]
        params: list[Any] = []
        for other, on in self._joins:
            clauses = [f"{self._table}.{a} = {other}.{b}" for a, b in on.items()]
            sql.append(f"JOIN {other} ON {' AND '.join(clauses)}")
        if self._conditions:
            parts = []
            for column, op, value in self._conditions:
                if op in ("IN", "NOT IN") and isinstance(value, tuple):
                    parts.append(f"{column} {op} ({', '.join('?' for _ in value)})")
                    params.extend(value)
                elif op in ("IS", "IS NOT"):
                    parts.append(f"{column} {op} NULL")
                elif op == "ILIKE":
                    parts.append(f"{column} LIKE ?")
                    params.append(value)
                else:
                    parts.append(f"{column} {op} ?")
                    params.append(value)
            sql.append("WHERE " + " AND ".join(parts))
        if self._order_by:
            sql.append(f"ORDER BY {self._order_by}")
        if self._limit is not None:
            sql.append(f"LIMIT {self._limit}")
        return " ".join(sql), params

    def all(self) -> list[dict[str, Any]]:
        return self._snapshot._rows(*self._compile())

    def first(self) -> dict[str, Any] | None:
        rows = self.limit(1).all()
        return rows[0] if rows else None

    def count(self) -> _CountResult:
        sql, params = self.select("COUNT(*) AS __cnt__").limit(None)._compile()
        rows = self._snapshot._rows(sql, params)
        return _CountResult(int(rows[0]["__cnt__"] or 0))

    def assert_exists(self) -> QueryBuilder:
        if self.first() is None:
            sql, params = self._compile()
            raise AssertionError(
                f"Expected at least one matching row, but found none.\n"
                f"Query: {sql}\nParameters: {params}\nTable: {self._table}"
            )
        return self

    def assert_none(self) -> QueryBuilder:
        row = self.first()
        if row is not None:
            sql, params = self._compile()
            raise AssertionError(
                f"Expected no matching rows, but found at least one.\nRow data: {row}\n"
                f"Query: {sql}\nParameters: {params}\nTable: {self._table}"
            )
        return self

    def assert_eq(self, column: str, value: Any) -> QueryBuilder:
        row = self.first()
        if row is None:
            raise AssertionError(
                f"Row not found for equality assertion.\n"
                f"Expected to find a row with {column}={value!r}\nTable: {self._table}"
            )
        if row.get(column) != value:
            raise AssertionError(
                f"Field value assertion failed.\nField: {column}\n"
                f"Expected: {value!r}\nActual: {row.get(column)!r}\nTable: {self._table}"
            )
        return self

    def explain(self) -> str:
        sql, params = self._compile()
        return f"SQL: {sql}\nParams: {params}"

    def __repr__(self) -> str:
        return f"<QueryBuilder {self.explain()}>"


class DatabaseSnapshot:
    """A read-only view of one SQLite database, with Fleet's query entry points."""

    def __init__(self, db_path: str, *, name: str | None = None) -> None:
        self.db_path = db_path
        self.name = name or "snapshot"
        self._con = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
        self._con.row_factory = sqlite3.Row

    def _rows(self, sql: str, params: Any = ()) -> list[dict[str, Any]]:
        return [dict(r) for r in self._con.execute(sql, list(params or ()))]

    def table(self, table: str) -> QueryBuilder:
        return QueryBuilder(self, table)

    def tables(self) -> list[str]:
        rows = self._rows(
            "SELECT name FROM sqlite_master WHERE type='table' AND name NOT LIKE 'sqlite_%'"
        )
        return [r["name"] for r in rows]

    def expect_row(
        self, table: str, where: dict[str, Any], expect: dict[str, Any]
    ) -> DatabaseSnapshot:
        qb = self.table(table)
        for k, v in where.items():
            qb = qb.eq(k, v)
        qb.assert_exists()
        for col, val in expect.items():
            qb.assert_eq(col, val)
        return self

    def expect_rows(
        self,
        table: str,
        where: dict[str, Any],
        *,
        count: int | None = None,
        contains: list[dict[str, Any]] | None = None,
    ) -> DatabaseSnapshot:
        qb = self.table(table)
        for k, v in where.items():
            qb = qb.eq(k, v)
        if count is not None:
            qb.count().assert_eq(count)
        if contains:
            rows = qb.all()
            for cond in contains:
                if not any(all(r.get(k) == v for k, v in cond.items()) for r in rows):
                    raise AssertionError(f"Expected a row matching {cond} in {table}")
        return self

    def expect_absent_row(self, table: str, where: dict[str, Any]) -> DatabaseSnapshot:
        qb = self.table(table)
        for k, v in where.items():
            qb = qb.eq(k, v)
        qb.assert_none()
        return self

    def diff(self, other: DatabaseSnapshot, ignore_config: IgnoreConfig | None = None) -> Any:
        raise NotImplementedError(
            "DatabaseSnapshot.diff() (Fleet's expect_only/expect_exactly checks) is not "
            "available in agentkit's verifier sandbox; compare rows with table(...) queries, "
            "or run the task on the Fleet platform"
        )

    def __repr__(self) -> str:
        return f"<DatabaseSnapshot {self.name} at {self.db_path}>"


class SnapshotDiff:
    """Fleet's diff type; not available in agentkit's verifier sandbox (see ``diff``)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise NotImplementedError("SnapshotDiff is not available in agentkit's verifier sandbox")


class _Instance:
    def load(self) -> None:
        return None


class Environment:
    """What verifiers get as ``env``."""

    def __init__(self, seed: str, current: str) -> None:
        self._dbs = {
            "seed": DatabaseSnapshot(seed, name="seed"),
            "current": DatabaseSnapshot(current, name="current"),
        }
        self.instance = _Instance()

    def db(self, name: str = "current") -> DatabaseSnapshot:
        if name not in self._dbs:
            raise KeyError(f"unknown database {name!r}; available: seed, current")
        return self._dbs[name]

    def app(self, _name: str) -> Environment:
        return self

    def load(self) -> None:
        return None


_STRIP = (
    re.compile(r"^\s*@verifier\b.*\n", re.MULTILINE),
    re.compile(r"^\s*from\s+fleet(\.\w+)*\s+import\s+.*\n?", re.MULTILINE),
    re.compile(r"^\s*import\s+fleet(\.\w+)*.*\n?", re.MULTILINE),
)


def _clean(code: str) -> str:
    for pattern in _STRIP:
        code = pattern.sub("", code)
    return code


def run(code: str, seed: str, current: str, final_answer: str | None) -> dict[str, Any]:
    out = io.StringIO()
    try:
        env = Environment(seed, current)
        namespace: dict[str, Any] = {
            "__name__": "fleet_verifier",
            "TASK_SUCCESSFUL_SCORE": TASK_SUCCESSFUL_SCORE,
            "TASK_FAILED_SCORE": TASK_FAILED_SCORE,
            "normalized_contains": normalized_contains,
            "normalized_string_comparison": normalized_string_comparison,
            "extract_numbers": extract_numbers,
            "contains_number": contains_number,
            "DatabaseSnapshot": DatabaseSnapshot,
            "IgnoreConfig": IgnoreConfig,
            "SnapshotDiff": SnapshotDiff,
            "Environment": Environment,
            "json": json,
            "re": re,
            "string": string,
        }
        exec("from typing import *\n", namespace)
        before = set(namespace)
        compiled = compile(_clean(code), "<verifier>", "exec")
        with contextlib.redirect_stdout(out):
            exec(compiled, namespace)
        functions = [
            v
            for k, v in namespace.items()
            if k not in before and inspect.isfunction(v) and v.__code__.co_filename == "<verifier>"
        ]
        if not functions:
            return {
                "success": False,
                "result": None,
                "error": "no function in verifier code",
                "stdout": out.getvalue(),
            }
        fn = functions[0]
        params = list(inspect.signature(fn).parameters)
        with contextlib.redirect_stdout(out):
            if params and params[0] == "before":
                args: list[Any] = [env.db("seed"), env.db("current")]
                if len(params) >= 3:
                    args.append(final_answer)
                result = fn(*args)
            elif len(params) >= 2:
                result = fn(env, final_answer)
            elif len(params) == 1:
                result = fn(env)
            else:
                result = fn()
        if not isinstance(result, (int, float, bool, type(None))):
            result = str(result)
        return {"success": True, "result": result, "error": None, "stdout": out.getvalue()}
    except BaseException as exc:  # the verifier's failure is the outcome, not ours
        tb = traceback.format_exc(limit=5)
        return {
            "success": False,
            "result": None,
            "error": f"{type(exc).__name__}: {exc}\n{tb}",
            "stdout": out.getvalue(),
        }


def main() -> None:
    directory = Path(sys.argv[1])
    spec = json.loads((directory / "input.json").read_text())
    outcome = run(
        spec["code"],
        str(directory / "seed.sqlite"),
        str(directory / "current.sqlite"),
        spec.get("final_answer"),
    )
    sys.stdout.write("\n" + RESULT_MARKER + json.dumps(outcome, default=str) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
