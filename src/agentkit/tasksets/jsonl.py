"""The ``jsonl`` taskset provider: one task per line of a JSON Lines file.

``jsonl:path/to/tasks.jsonl`` loads lines such as::

    {"id": "add-1", "input": "What is 2 + 3?", "target": "5"}
    {"id": "chat-1", "input": [{"role": "user", "content": "Say hi"}], "target": "hi",
     "metadata": {"topic": "greeting"}, "grading_spec": {"match": "substring"}}

Each line is checked strictly (unknown keys and reserved agent keys such as
``metadata.model`` are rejected). A bad line is reported with its file, line
number and field and kept in :attr:`JsonlTaskset.problems`; the other lines
still load, unless ``strict=True``. The default grading spec is one reward
function, ``correct``, comparing the harness output with the target.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import attrs

from agentkit._convert import structure
from agentkit._errors import SpecError, ValidationError
from agentkit._limits import load_json
from agentkit._rubric import RewardFunction, Rubric
from agentkit._task import Task
from agentkit._taskset import ListTaskset, TaskProblem

__all__ = ["JsonlLine", "JsonlTaskset", "MatchMode", "answer_matches", "correct_reward"]

MatchMode = Literal["exact", "substring"]
_MATCH_MODES: tuple[str, ...] = ("exact", "substring")


@attrs.frozen(kw_only=True)
class JsonlLine:
    """The schema of one line: what a task file may contain, and nothing else."""

    id: str | int
    input: str | list[dict[str, Any]]
    target: str | int | float | list[str] | None = None
    metadata: dict[str, Any] = attrs.field(factory=dict)
    grading_spec: dict[str, Any] | None = None


def _check_grading_spec(spec: Mapping[str, Any] | None) -> None:
    if spec is None:
        return
    for key, value in spec.items():
        if key != "match":
            raise ValidationError(
                f"grading_spec.{key}", "unknown key (the jsonl grading spec accepts: match)"
            )
        if value not in _MATCH_MODES or not isinstance(value, str):
            raise ValidationError(
                "grading_spec.match",
                f"expected one of {', '.join(map(repr, _MATCH_MODES))}, got {value!r}",
            )


def _target_texts(target: Any) -> list[str]:
    if target is None:
        return []
    if isinstance(target, list):
        return [str(t) for t in target]
    if isinstance(target, bool):
        return [json.dumps(target)]
    return [str(target)]


def answer_matches(output: str | None, target: Any, match: MatchMode) -> bool:
    """True when ``output`` matches ``target`` (one of them, for a list of answers).

    ``exact`` compares after trimming surrounding whitespace; ``substring``
    looks for the trimmed target anywhere in the output. An empty target
    never matches.
    """
    if output is None:
        return False
    answer = output.strip()
    for text in _target_texts(target):
        expected = text.strip()
        if not expected:
            continue
        if match == "exact" and answer == expected:
            return True
        if match == "substring" and expected in answer:
            return True
    return False


def correct_reward(default_match: MatchMode) -> RewardFunction:
    """The ``correct`` reward: 1.0 when the output matches the task's target, else 0.0.

    A task's ``grading_spec`` (``{"match": "substring"}``) overrides
    ``default_match``.
    """

    def correct(task: Task, output: str | None) -> float:
        match = default_match
        if task.grading_spec and task.grading_spec.get("match") in _MATCH_MODES:
            match = task.grading_spec["match"]
        return 1.0 if answer_matches(output, task.target, match) else 0.0

    how = "equals the target after trimming" if default_match == "exact" else "contains the target"
    return RewardFunction(
        name="correct",
        fn=correct,
        weight=1.0,
        description=f"1.0 when the output {how} (a task's grading_spec.match overrides)",
    )


class JsonlTaskset(ListTaskset):
    """Tasks read from a JSON Lines file, one task per line.

    ``path`` is the file; ``match`` chooses how the default rubric compares
    the output with the target (``exact`` after trimming, or ``substring``);
    ``taskset_id`` defaults to the file's stem, so ``tasks.jsonl`` line
    ``{"id": "1"}`` is task ``tasks:1``; ``strict`` makes any bad line fatal
    instead of reporting it in :attr:`problems`.
    """

    def __init__(
        self,
        path: str | Path,
        *,
        match: MatchMode = "exact",
        taskset_id: str | None = None,
        strict: bool = False,
    ) -> None:
        shown = str(path)
        if not shown:
            raise SpecError(
                "the jsonl taskset needs a file: jsonl:path/to/tasks.jsonl (got an empty path)"
            )
        file = Path(path).expanduser()
        if match not in _MATCH_MODES:
            raise SpecError(
                f"jsonl taskset {shown}: option match must be 'exact' or 'substring', got {match!r}"
            )
        if not file.exists():
            raise SpecError(f"jsonl taskset file {shown} does not exist")
        if not file.is_file():
            raise SpecError(f"jsonl taskset {shown} is not a file")
        ts_id = taskset_id if taskset_id is not None else file.stem
        try:
            Task.format_task_id(ts_id, "item")
        except ValidationError as exc:
            hint = "" if taskset_id is not None else "; pass taskset_id=... (-T taskset_id=...)"
            raise SpecError(
                f"jsonl taskset {shown}: {ts_id!r} cannot be a taskset id ({exc.reason}){hint}"
            ) from None
        self.path = file
        self.match: MatchMode = match
        tasks, problems = _read_tasks(file, shown, ts_id)
        if strict and problems:
            more = f" ({len(problems) - 1} more bad line(s))" if len(problems) > 1 else ""
            raise SpecError(f"{problems[0]}{more}")
        super().__init__(
            ts_id,
            tasks,
            default_grading_spec=Rubric([correct_reward(match)], name="jsonl"),
            problems=problems,
        )

    def __repr__(self) -> str:
        return (
            f"JsonlTaskset({str(self.path)!r}, taskset_id={self.taskset_id!r}, "
            f"match={self.match!r}, tasks={len(self)}, problems={len(self.problems)})"
        )


def _read_tasks(file: Path, shown: str, taskset_id: str) -> tuple[list[Task], list[TaskProblem]]:
    try:
        # a UTF-8 byte-order mark (Windows editors write one) is not part of line 1
        raw_lines = file.read_bytes().removeprefix(b"\xef\xbb\xbf").splitlines()
    except OSError as exc:
        raise SpecError(f"jsonl taskset {shown}: cannot read: {exc.strerror}") from None
    tasks: list[Task] = []
    problems: list[TaskProblem] = []
    seen: dict[str, int] = {}
    for number, raw in enumerate(raw_lines, start=1):
        where = f"{shown}:{number}"
        if not raw.strip():
            continue
        try:
            task = _parse_line(raw, taskset_id)
        except ValidationError as exc:
            problems.append(TaskProblem(where, str(exc)))
            continue
        first = seen.get(task.task_id)
        if first is not None:
            problems.append(
                TaskProblem(
                    where, f"id: duplicate task id {task.task_id!r} (first on line {first})"
                )
            )
            continue
        seen[task.task_id] = number
        tasks.append(task)
    return tasks, problems


_LINE_KEYS = frozenset({"id", "input", "target", "metadata", "grading_spec"})


def _plain_line(data: Any) -> JsonlLine | None:
    """The common, well-formed line without the converter (a fast path); None otherwise,
    and the strict converter then reports exactly what is wrong."""
    if not isinstance(data, dict) or not data.keys() <= _LINE_KEYS:
        return None
    ident, prompt = data.get("id"), data.get("input")
    target = data.get("target")
    metadata = data.get("metadata", {})
    spec = data.get("grading_spec")
    if isinstance(ident, bool) or not isinstance(ident, (str, int)):
        return None
    if not (
        isinstance(prompt, str)
        or (isinstance(prompt, list) and all(isinstance(m, dict) for m in prompt))
    ):
        return None
    if not (
        target is None
        or (isinstance(target, (str, int, float)) and not isinstance(target, bool))
        or (isinstance(target, list) and all(isinstance(t, str) for t in target))
    ):
        return None
    if not isinstance(metadata, dict) or not (spec is None or isinstance(spec, dict)):
        return None
    return JsonlLine(id=ident, input=prompt, target=target, metadata=metadata, grading_spec=spec)


def _parse_line(raw: bytes, taskset_id: str) -> Task:
    # strict JSON: no duplicate keys, no NaN/Infinity, bounded nesting
    data = load_json(raw)
    line = _plain_line(data) or structure(data, JsonlLine)
    item_id = line.id if isinstance(line.id, str) else str(line.id)
    try:
        task_id = Task.format_task_id(taskset_id, item_id)
    except ValidationError as exc:
        raise ValidationError("id", exc.reason) from None
    _check_grading_spec(line.grading_spec)
    return Task(
        task_id=task_id,
        input=line.input,
        target=line.target,
        metadata=line.metadata,
        grading_spec=line.grading_spec,
    )
