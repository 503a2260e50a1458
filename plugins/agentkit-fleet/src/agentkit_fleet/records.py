"""Fleet task records: the JSON format, its aliases, and the mapping onto agentkit tasks.

A Fleet task file is ``{"tasks": [...]}`` or a bare list of records. Records
seen in the wild spell some fields differently (``key``, ``env_id``,
``version``, ``data_id``, ``verifier_func``); they are normalized here. Fields
this module does not know are kept, under ``metadata["fleet_extra"]``.

agentkit rejects task metadata keys that configure an agent (``model``,
``seed``, ``temperature``...: see :data:`agentkit._task.RESERVED_AGENT_KEYS`).
Fleet records may legitimately carry such keys (a ``model`` field, an
``env_variables`` entry ``SEED``); they are stored with the prefix
:data:`ESCAPE_PREFIX` (``x-model``) and restored by :func:`record_of`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Literal, cast

import attrs

from agentkit import RESERVED_AGENT_KEYS, Task, TaskProblem

__all__ = [
    "ALIASES",
    "ESCAPE_PREFIX",
    "MODALITIES",
    "FleetRecord",
    "escape_reserved",
    "group_counts",
    "parse_records",
    "record_of",
    "unescape_reserved",
]

Modality = Literal["tool_use", "computer_use", "browser_use"]
MODALITIES: tuple[str, ...] = ("tool_use", "computer_use", "browser_use")

#: Alias found in the wild -> canonical field. When a record has both
#: spellings the canonical one wins, except for ``key``, which wins over
#: ``task_key`` as in Fleet's SkyRL environment and dataset preparation
#: (``t.get("key") or t.get("task_key")``); see :data:`ALIAS_WINS`.
ALIASES: dict[str, str] = {
    "key": "task_key",
    "env_id": "env_key",
    "version": "env_version",
    "data_id": "data_key",
    "verifier_func": "verifier_code",
}

#: Aliases that win over their canonical spelling when a record has both.
ALIAS_WINS = frozenset({"key"})

#: Per canonical field, its spellings in order of precedence (the first one
#: present with a value other than null or "" is taken).
_PRECEDENCE: dict[str, tuple[str, ...]] = {
    canonical: tuple(
        [a for a, c in ALIASES.items() if c == canonical and a in ALIAS_WINS]
        + [canonical]
        + [a for a, c in ALIASES.items() if c == canonical and a not in ALIAS_WINS]
    )
    for canonical in set(ALIASES.values())
}

_STRING_FIELDS = (
    "task_key",
    "prompt",
    "env_key",
    "env_version",
    "data_key",
    "data_version",
    "verifier_code",
    "task_modality",
)
_KNOWN = frozenset((*_STRING_FIELDS, "env_variables", "metadata"))

#: Prefix given to metadata keys that agentkit reserves for run settings.
ESCAPE_PREFIX = "x-"


def _is_reserved(key: str) -> bool:
    return key.lower() in RESERVED_AGENT_KEYS


def escape_reserved(value: Any) -> Any:
    """Prefix reserved keys (and keys that already carry the prefix) at every depth.

    Keys that already start with :data:`ESCAPE_PREFIX` get one more prefix, so
    :func:`unescape_reserved` is an exact inverse.
    """
    if isinstance(value, Mapping):
        out = {}
        for key, item in value.items():
            k = str(key)
            if _is_reserved(k) or k.startswith(ESCAPE_PREFIX):
                k = ESCAPE_PREFIX + k
            out[k] = escape_reserved(item)
        return out
    if isinstance(value, list):
        return [escape_reserved(v) for v in value]
    return value


def unescape_reserved(value: Any) -> Any:
    """The inverse of :func:`escape_reserved`."""
    if isinstance(value, Mapping):
        return {
            (k[len(ESCAPE_PREFIX) :] if k.startswith(ESCAPE_PREFIX) else k): unescape_reserved(v)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [unescape_reserved(v) for v in value]
    return value


@attrs.frozen(kw_only=True)
class FleetRecord:
    """One Fleet task, with canonical field names."""

    task_key: str
    prompt: str
    env_key: str | None = None
    env_version: str | None = None
    data_key: str | None = None
    data_version: str | None = None
    verifier_code: str | None = None
    task_modality: Modality = "tool_use"
    env_variables: dict[str, Any] = attrs.field(factory=dict)
    metadata: dict[str, Any] = attrs.field(factory=dict)
    extra: dict[str, Any] = attrs.field(factory=dict)

    @classmethod
    def from_json(cls, data: Any, default_modality: str = "tool_use") -> FleetRecord:
        """Normalize one record; raise ``ValueError`` saying which field is wrong.

        ``default_modality`` applies when the record has no ``task_modality``
        (the loader passes the modality of an ``all_<modality>.json`` file).
        """
        if not isinstance(data, Mapping):
            raise ValueError(f"expected an object, got {type(data).__name__}")
        fields: dict[str, Any] = {}
        extra: dict[str, Any] = {}
        for key, value in data.items():
            if ALIASES.get(key, key) not in _KNOWN:
                extra[str(key)] = value
        for canonical in (*_STRING_FIELDS, "env_variables", "metadata"):
            spellings = [k for k in _PRECEDENCE.get(canonical, (canonical,)) if k in data]
            chosen = next((k for k in spellings if data[k] not in (None, "")), None)
            if chosen is None and spellings:
                chosen = spellings[0]
            if chosen is None:
                continue
            fields[canonical] = data[chosen]
            for other in spellings:
                if other != chosen:
                    extra[other] = data[other]  # the losing spelling is kept beside
        for name in ("task_key", "prompt"):
            if fields.get(name) in (None, ""):
                raise ValueError(f"missing {name!r}")
        for name in _STRING_FIELDS:
            value = fields.get(name)
            if value is not None and not isinstance(value, str):
                raise ValueError(f"{name}: expected a string, got {type(value).__name__}")
        modality = fields.get("task_modality") or default_modality
        if modality not in MODALITIES:
            raise ValueError(
                f"task_modality: expected one of {', '.join(MODALITIES)}, got {modality!r}"
            )
        for name in ("env_variables", "metadata"):
            value = fields.get(name)
            if value is not None and not isinstance(value, Mapping):
                raise ValueError(f"{name}: expected an object, got {type(value).__name__}")
        return cls(
            task_key=fields["task_key"],
            prompt=fields["prompt"],
            env_key=fields.get("env_key") or None,
            env_version=fields.get("env_version") or None,
            data_key=fields.get("data_key") or None,
            data_version=fields.get("data_version") or None,
            verifier_code=fields.get("verifier_code") or None,
            task_modality=cast(Modality, modality),
            env_variables=dict(fields.get("env_variables") or {}),
            metadata=dict(fields.get("metadata") or {}),
            extra=extra,
        )

    def to_json(self) -> dict[str, Any]:
        """The record in canonical Fleet JSON (unknown fields restored at top level)."""
        out: dict[str, Any] = dict(self.extra)
        out.update(
            {
                "task_key": self.task_key,
                "prompt": self.prompt,
                "env_key": self.env_key,
                "env_version": self.env_version,
                "data_key": self.data_key,
                "data_version": self.data_version,
                "verifier_code": self.verifier_code,
                "task_modality": self.task_modality,
                "env_variables": dict(self.env_variables),
                "metadata": dict(self.metadata),
            }
        )
        return out

    def to_task(self, taskset_id: str) -> Task:
        """The agentkit task ``taskset_id:task_key``: prompt as input, Fleet fields as metadata."""
        metadata: dict[str, Any] = {
            "task_key": self.task_key,
            "env_key": self.env_key,
            "env_version": self.env_version,
            "data_key": self.data_key,
            "data_version": self.data_version,
            "task_modality": self.task_modality,
            "verifier_code": self.verifier_code,
            "env_variables": escape_reserved(self.env_variables),
            "fleet_metadata": escape_reserved(self.metadata),
            "fleet_extra": escape_reserved(self.extra),
        }
        return Task(
            task_id=Task.format_task_id(taskset_id, self.task_key),
            input=self.prompt,
            metadata=metadata,
        )


def record_of(task: Task) -> FleetRecord:
    """The Fleet record behind an agentkit task built by :meth:`FleetRecord.to_task`.

    A plain task (not from a Fleet taskset) becomes a record too: its item id
    is the task key, its input the prompt, and Fleet fields are read from its
    metadata when present.
    """
    md = task.metadata
    prompt = task.input if isinstance(task.input, str) else ""
    if isinstance(task.input, list):  # chat messages: the last user message is the prompt
        users = [m.get("content") for m in task.input if m.get("role") == "user"]
        prompt = str(users[-1]) if users else ""
    modality = md.get("task_modality") or "tool_use"
    return FleetRecord(
        task_key=str(md.get("task_key") or task.item_id),
        prompt=prompt,
        env_key=md.get("env_key"),
        env_version=md.get("env_version"),
        data_key=md.get("data_key"),
        data_version=md.get("data_version"),
        verifier_code=md.get("verifier_code"),
        task_modality=cast(Modality, modality if modality in MODALITIES else "tool_use"),
        env_variables=unescape_reserved(md.get("env_variables") or {}),
        metadata=unescape_reserved(md.get("fleet_metadata") or {}),
        extra=unescape_reserved(md.get("fleet_extra") or {}),
    )


def modality_of_file(source: str) -> str:
    """The modality an ``all_<modality>.json`` file name declares (else ``tool_use``)."""
    name = source.rsplit("/", 1)[-1]
    for modality in MODALITIES:
        if name == f"all_{modality}.json":
            return modality
    return "tool_use"


def parse_records(data: Any, source: str) -> tuple[list[FleetRecord], list[TaskProblem]]:
    """Records from a parsed task file; bad records become problems naming their index.

    Records without ``task_modality`` take the modality of the file's name
    (``all_computer_use.json``), else ``tool_use``.
    """
    default_modality = modality_of_file(source)
    if isinstance(data, Mapping) and "tasks" in data:
        items = data["tasks"]
        where = "tasks"
    else:
        items = data
        where = ""
    if not isinstance(items, list):
        raise ValueError(
            f"{source}: expected a list of tasks or an object with a 'tasks' list, "
            f"got {type(data).__name__}"
        )
    records: list[FleetRecord] = []
    problems: list[TaskProblem] = []
    seen: set[str] = set()
    for i, item in enumerate(items):
        loc = f"{source}: {where}[{i}]"
        try:
            record = FleetRecord.from_json(item, default_modality)
        except ValueError as exc:
            problems.append(TaskProblem(loc, str(exc)))
            continue
        if record.task_key in seen:
            problems.append(TaskProblem(loc, f"duplicate task_key {record.task_key!r}"))
            continue
        try:
            Task.format_task_id("fleet", record.task_key)
        except ValueError as exc:
            problems.append(TaskProblem(loc, f"task_key {record.task_key!r}: {exc}"))
            continue
        seen.add(record.task_key)
        records.append(record)
    return records, problems


def group_counts(data: Any, source: str) -> dict[tuple[str, str], int]:
    """How many records a parsed task file holds per ``(modality, environment group)``.

    Every object in the file counts, also records :func:`parse_records`
    rejects (no prompt, a duplicate key), because Fleet's dataset preparation
    sizes an environment's eval share by all of its records. The modality is
    the record's ``task_modality`` (else the file's, as for parsing); the
    group its ``env_key`` or ``env_id``, else ``unknown``.
    """
    default_modality = modality_of_file(source)
    items = data["tasks"] if isinstance(data, Mapping) and "tasks" in data else data
    counts: dict[tuple[str, str], int] = {}
    for item in items if isinstance(items, list) else []:
        if not isinstance(item, Mapping):
            continue
        modality = item.get("task_modality") or default_modality
        env = item.get("env_key") or item.get("env_id") or "unknown"
        key = (str(modality), str(env))
        counts[key] = counts.get(key, 0) + 1
    return counts


def iter_json_records(records: Iterable[FleetRecord]) -> list[dict[str, Any]]:
    """Records back to Fleet JSON (for writing split files)."""
    return [r.to_json() for r in records]
