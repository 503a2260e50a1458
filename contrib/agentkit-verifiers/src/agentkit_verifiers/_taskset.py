"""``AgentkitTaskset``: any agentkit taskset as a verifiers 0.4 taskset."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import verifiers.v1 as vf
from pydantic import Field
from verifiers.v1.errors import TaskError

from agentkit import HarnessResult, RunContext, Task
from agentkit_verifiers import _bridge

__all__ = ["AgentkitTask", "AgentkitTaskData", "AgentkitTaskset", "AgentkitTasksetConfig"]


class AgentkitTaskData(vf.TaskData):
    """verifiers task data that names its agentkit task (so any process can load it)."""

    agentkit_task_id: str
    """The canonical agentkit task id, ``taskset:item``."""
    agentkit_spec: str
    """The taskset spec the task comes from (``harbor:examples/harbor``)."""
    agentkit_options: dict[str, Any] = Field(default_factory=dict)
    """Options given to the taskset provider."""


class AgentkitTasksetConfig(vf.TasksetConfig):
    """``--env.taskset.spec PROVIDER:ARGUMENT`` and ``--env.taskset.options '{...}'``."""

    spec: str = ""
    """An agentkit taskset spec: ``provider:argument`` (``harbor:examples/harbor``)."""
    options: dict[str, Any] = Field(default_factory=dict)
    """Options for the taskset provider (as ``-T key=value`` on ``agentkit run``)."""


def _prompt_of(task: Task) -> Any:
    if isinstance(task.input, (str, list)):
        return task.input
    return json.dumps(task.input)


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return ""


def _result_from_trace(trace: Any) -> HarnessResult:
    """A HarnessResult for a rollout that a verifiers harness (not agentkit's) ran."""
    messages = [m.model_dump(mode="json", exclude_none=True) for m in trace.messages]
    output = next(
        (_text(m.get("content")) for m in reversed(messages) if m.get("role") == "assistant"),
        None,
    )
    if trace.errors:
        return HarnessResult(status="failed", output=output, messages=messages)
    return HarnessResult(status="completed", output=output, messages=messages)


class AgentkitTask(vf.Task[AgentkitTaskData]):
    """One agentkit task; its reward is agentkit's compiled rubric."""

    NEEDS_CONTAINER = False

    @property
    def key(self) -> str:
        """The agentkit task id: stable across runs and unique within the taskset."""
        task_id: str = self.data.agentkit_task_id
        return task_id

    def agentkit_task(self) -> Task:
        """The agentkit task this verifiers task stands for."""
        taskset = _bridge.load_taskset(self.data.agentkit_spec, self.data.agentkit_options)
        task: Task = taskset.get_task(self.data.agentkit_task_id)
        return task

    @vf.reward(weight=1.0)
    async def agentkit(self, trace: vf.Trace) -> float:
        """agentkit's compiled rubric: its weighted total is the reward, and every
        metric is recorded as ``agentkit/<namespace>.<name>``."""
        rollout = _bridge.live.get(trace.id)
        if rollout is not None:
            rubric, task = rollout.rubric, rollout.task
            result, sandbox, context = rollout.result, rollout.sandbox, rollout.context
        else:
            taskset = _bridge.load_taskset(self.data.agentkit_spec, self.data.agentkit_options)
            task = self.agentkit_task()
            rubric = _bridge.compiled_rubric(taskset, None)
            result, sandbox = _result_from_trace(trace), None
            context = RunContext(rollout_id=trace.id)
        scored = await _bridge.score(rubric, task, result, sandbox, context)
        trace.record_metrics({f"agentkit/{k}": v for k, v in scored.rewards.items()})
        if scored.total is None:
            detail = "; ".join(f"{e['metric']}: {e['error']}" for e in scored.errors)
            raise TaskError(f"agentkit rubric for {task.task_id!r} failed: {detail}")
        return float(scored.total)


class AgentkitTaskset(vf.Taskset[AgentkitTask, AgentkitTasksetConfig]):
    """The tasks of the agentkit taskset named by ``config.spec``."""

    def load(self) -> Iterator[AgentkitTask]:
        if not self.config.spec:
            raise ValueError(
                "taskset agentkit-verifiers needs an agentkit taskset spec: "
                "--env.taskset.spec PROVIDER:ARGUMENT (for example harbor:examples/harbor)"
            )
        taskset = _bridge.load_taskset(self.config.spec, self.config.options)
        for task in taskset:
            task.require_payload()
            data = AgentkitTaskData(
                id=task.task_id,
                name=task.item_id,
                prompt=_prompt_of(task),
                agentkit_task_id=task.task_id,
                agentkit_spec=self.config.spec,
                agentkit_options=dict(self.config.options),
            )
            yield AgentkitTask(data, self.config.task)
