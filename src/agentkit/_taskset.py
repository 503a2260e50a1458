"""Taskset: a declarative collection of tasks with their grading metadata.

A taskset never runs a model or a tool loop. Any object with ``taskset_id``,
``__iter__`` and ``get_task`` *is* a taskset (``isinstance`` checks the
shape); subclass :class:`Taskset` to get the defaults and the dataset
adapters.
"""

from __future__ import annotations

import abc
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from agentkit._errors import AgentkitError, ValidationError, missing_extra
from agentkit._sandbox import ExecutionHints
from agentkit._task import Task

if TYPE_CHECKING:
    from agentkit._rubric import Rubric

__all__ = ["ListTaskset", "TaskProblem", "Taskset"]


class TaskProblem:
    """A task that could not be loaded: where, and why. The rest still loads."""

    def __init__(self, source: str, message: str) -> None:
        self.source = source
        self.message = message

    def __str__(self) -> str:
        return f"{self.source}: {self.message}"

    def __repr__(self) -> str:
        return f"TaskProblem({self.source!r}, {self.message!r})"


class Taskset(abc.ABC):
    """The taskset contract: ``taskset_id``, iteration and ``get_task``.

    Optional members, with these defaults: ``__len__`` (when known),
    ``default_grading_spec`` (a :class:`~agentkit.Rubric` or None),
    ``execution_hints(task)`` (what the task needs from its sandbox),
    ``problems`` (tasks that failed to load) and ``summary_keys`` (metadata
    keys, such as ``env_key``, by which a run's summary also aggregates).
    """

    taskset_id: str
    default_grading_spec: Rubric | None = None
    summary_keys: tuple[str, ...] = ()
    problems: list[TaskProblem] = []  # noqa: RUF012 - replaced per instance

    @classmethod
    def __subclasshook__(cls, other: type) -> bool:
        if cls is Taskset:
            names = ("get_task", "__iter__")
            if all(any(n in b.__dict__ for b in other.__mro__) for n in names):
                return True
        result: bool = NotImplemented
        return result

    @abc.abstractmethod
    def __iter__(self) -> Iterator[Task]:
        """Yield the tasks, lazily where the source is large."""

    @abc.abstractmethod
    def get_task(self, task_id: str) -> Task:
        """Return one task by its canonical id; ``KeyError`` names what exists."""

    def execution_hints(self, task: Task) -> ExecutionHints | None:
        """What ``task`` needs from its sandbox, or None when it needs no sandbox."""
        return None

    @classmethod
    def from_dataset(
        cls,
        dataset: Any,
        *,
        taskset_id: str,
        id_column: str = "example_id",
        input_column: str = "prompt",
        target_column: str | None = "answer",
    ) -> ListTaskset:
        """Build a taskset from a Hugging Face ``datasets.Dataset`` (or any list of rows).

        Each row's ``task_id`` column is used when present, else
        ``taskset_id:<id_column>``; the other columns become metadata.
        """
        tasks = []
        for i, row in enumerate(dataset):
            row = dict(row)
            if row.get("task_id"):
                task_id = str(row.pop("task_id"))
                row.pop(id_column, None)
            else:
                item = row.pop(id_column, i)
                task_id = Task.format_task_id(taskset_id, str(item))
            if input_column not in row:
                raise ValidationError(f"[{i}].{input_column}", "missing input column", "dataset")
            task_input = row.pop(input_column)
            target = row.pop(target_column, None) if target_column else None
            try:
                tasks.append(Task(task_id=task_id, input=task_input, target=target, metadata=row))
            except ValidationError as exc:
                raise exc.with_prefix(f"[{i}]").with_source("dataset") from None
        return ListTaskset(taskset_id, tasks)

    def to_dataset(self, *, id_column: str = "example_id") -> Any:
        """Export to a Hugging Face ``datasets.Dataset`` (``pip install 'agentkit[datasets]'``).

        Columns: ``task_id``, ``example_id`` (the item id, for verifiers
        compatibility), ``prompt``, ``answer``, ``info`` (the metadata as JSON).
        """
        try:
            import datasets
        except ImportError:
            raise AgentkitError(
                missing_extra("Taskset.to_dataset", "datasets", "datasets")
            ) from None
        return datasets.Dataset.from_list(to_rows(self, id_column=id_column))


def to_rows(taskset: Iterable[Task], *, id_column: str = "example_id") -> list[dict[str, Any]]:
    """Rows for :meth:`Taskset.to_dataset`, without needing ``datasets``."""
    import json

    rows = []
    for task in taskset:
        rows.append(
            {
                "task_id": task.task_id,
                id_column: task.item_id,
                "prompt": task.input if isinstance(task.input, str) else json.dumps(task.input),
                "answer": None
                if task.target is None
                else json.dumps(task.target)
                if not isinstance(task.target, str)
                else task.target,
                "info": json.dumps(task.metadata),
            }
        )
    return rows


class ListTaskset(Taskset):
    """A taskset held in memory: a list of tasks under one taskset id."""

    def __init__(
        self,
        taskset_id: str,
        tasks: Iterable[Task],
        *,
        default_grading_spec: Rubric | None = None,
        problems: Iterable[TaskProblem] = (),
    ) -> None:
        self.taskset_id = taskset_id
        self._tasks: dict[str, Task] = {}
        for t in tasks:
            if t.task_id in self._tasks:
                raise ValidationError("task_id", f"duplicate task id {t.task_id!r}", taskset_id)
            self._tasks[t.task_id] = t
        self.default_grading_spec = default_grading_spec
        self.problems = list(problems)

    def __iter__(self) -> Iterator[Task]:
        return iter(self._tasks.values())

    def __len__(self) -> int:
        return len(self._tasks)

    def get_task(self, task_id: str) -> Task:
        try:
            return self._tasks[task_id]
        except KeyError:
            known = ", ".join(list(self._tasks)[:10])
            more = "" if len(self._tasks) <= 10 else f" (and {len(self._tasks) - 10} more)"
            raise KeyError(
                f"no task {task_id!r} in taskset {self.taskset_id!r}; it has: {known}{more}"
            ) from None
