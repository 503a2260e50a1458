"""Harness: the execution protocol around a model."""

from __future__ import annotations

import inspect
from typing import Any, Protocol, runtime_checkable

from agentkit._context import RunContext
from agentkit._errors import HarnessError
from agentkit._events import EventCallback
from agentkit._result import HarnessResult
from agentkit._task import Task

__all__ = ["Harness", "check_harness", "run_model", "why_unsupported"]


@runtime_checkable
class Harness(Protocol):
    """Runs one task with a model and returns a :class:`HarnessResult`.

    Optional members the runner uses when present:
    ``supports(task) -> bool`` (tasks it cannot run are left out of a run,
    and a run of none of them is refused),
    ``unsupported_reason(task) -> str | None`` (why ``supports`` said no, for
    that message), and ``compile_rubric(taskset) -> Rubric | None`` (its
    metrics are namespaced ``harness.*``).
    """

    async def run(
        self,
        task: Task,
        context: RunContext | None = None,
        on_event: EventCallback | None = None,
    ) -> HarnessResult:
        """Run ``task``; stream events to ``on_event`` while running."""
        ...


def check_harness(obj: Any) -> str | None:
    """Say why ``obj`` (a class or instance) is not a harness, or return None.

    Checked at registration: ``run`` must be ``async def`` and accept
    ``task``, ``context`` and ``on_event``.
    """
    run = getattr(obj, "run", None)
    if run is None:
        return "has no run() method"
    if not inspect.iscoroutinefunction(run):
        return "run() must be 'async def run(self, task, context=None, on_event=None)'"
    try:
        params = inspect.signature(run).parameters
    except (TypeError, ValueError):
        return None
    names = [p for p in params if p != "self"]
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return None
    expected = ["task", "context", "on_event"]
    if names[:3] != expected:
        return (
            f"run{inspect.signature(run)} does not match "
            "run(self, task, context=None, on_event=None)"
        )
    for name in ("context", "on_event"):
        if params[name].default is inspect.Parameter.empty:
            return f"run() parameter {name!r} must default to None"
    return None


def why_unsupported(harness: Any, task: Task) -> str | None:
    """Why ``harness`` cannot run ``task``, or None when it can.

    ``supports(task)`` decides (a harness without it runs every task); the
    reason is the harness's ``unsupported_reason(task)`` when it has one that
    gives one, else a plain statement that ``supports()`` said no.
    """
    supports = getattr(harness, "supports", None)
    if not callable(supports) or supports(task):
        return None
    explain = getattr(harness, "unsupported_reason", None)
    reason = explain(task) if callable(explain) else None
    return str(reason) if reason else "the harness's supports() returns False for the task"


def run_model(harness: Any, context: RunContext) -> str:
    """The model a harness's run asks for: its own ``model`` option, else the context's.

    Raises :class:`~agentkit.HarnessError` saying how to give one when neither names one.
    """
    model: str | None = harness.model or context.model
    if not model:
        raise HarnessError(
            f"the {harness.name} harness needs a model: pass RunContext(model=...), "
            f"{type(harness).__name__}(model=...) or -H model=NAME"
        )
    return model
