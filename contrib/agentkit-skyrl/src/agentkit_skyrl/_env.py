"""``AgentkitTextEnv``: a SkyRL ``BaseTextEnv`` over an agentkit taskset and a
step-capable harness.

SkyRL owns the model: it calls ``init(prompt)`` once, then ``step(action)``
with each model response until ``done``, then ``close()``. The harness must
implement agentkit's step protocol (:class:`agentkit.StepCapableHarness`):
``episode(task, context=None, on_event=None)`` returning an
:class:`agentkit.Episode` with ``async init()``, ``async step(action)`` and
``async close()``. The bridge uses nothing else of the harness, so any
step-capable harness works (the Fleet tool-call harness and the terminal
harness are two). It opens episodes with :func:`agentkit.open_episode`, which
hands the task's taskset to a harness that takes one (the terminal harness
makes its sandbox from the taskset's execution hints and grades with its
rubric).
"""

from __future__ import annotations

import functools
import json
import os
import uuid
from collections.abc import Mapping
from typing import Any

from skyrl_gym.envs.base_text_env import BaseTextEnv, BaseTextEnvStepOutput

import agentkit
from agentkit import (
    Episode,
    HarnessError,
    Limits,
    RunContext,
    SpecError,
    StepCapableHarness,
    Task,
    is_step_capable,
    registry,
)
from agentkit_skyrl._loop import run_sync

__all__ = ["AgentkitTextEnv", "StepCapable", "open_episode", "register"]


#: The harness protocol the bridge needs (an alias of :class:`agentkit.StepCapableHarness`).
StepCapable = StepCapableHarness


def open_episode(harness: Any, task: Task, context: RunContext, taskset: Any = None) -> Episode:
    """The step-by-step episode of ``task`` under ``harness``: ``harness.episode(task, context)``,
    given ``taskset`` when it takes one (:func:`agentkit.open_episode`).

    Any harness that implements agentkit's step protocol works; one that
    does not is an error naming it.
    """
    if not is_step_capable(harness):
        raise HarnessError(
            f"harness {type(harness).__name__} is not step-capable: SkyRL drives the model "
            "itself, so the harness must offer episode(task, context=None, on_event=None) "
            "returning an agentkit.Episode (async init()/step(action)/close()); the "
            "fleet-tool-call and terminal harnesses do"
        )
    return agentkit.open_episode(harness, task, context, taskset=taskset)


@functools.lru_cache(maxsize=32)
def _taskset(spec: str, options_json: str) -> Any:
    return registry.resolve_taskset(spec, **json.loads(options_json))


@functools.lru_cache(maxsize=32)
def _harness(name: str, options_json: str) -> Any:
    return registry.resolve_harness(name, **json.loads(options_json))


def _plain(value: Any) -> Any:
    """An OmegaConf/Hydra config (as SkyRL passes ``env_config``) as plain data."""
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    try:
        from omegaconf import OmegaConf

        if OmegaConf.is_config(value):
            return OmegaConf.to_container(value, resolve=True)
    except ImportError:  # pragma: no cover - skyrl-gym depends on omegaconf
        pass
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _task_of(taskset: Any, extras: Mapping[str, Any]) -> Task:
    try:
        return _find_task(taskset, extras)
    except KeyError as exc:  # the taskset's "no such task" (it lists what it has)
        raise SpecError(f"AgentkitTextEnv: {exc.args[0] if exc.args else exc}") from None


def _find_task(taskset: Any, extras: Mapping[str, Any]) -> Task:
    """The task ``extras`` names: ``task_id`` (``taskset:item``), else ``task_key``.

    ``task_key`` is the item id, the column that ``agentkit fleet split`` (and
    Fleet's own dataset preparation) writes; SkyRL passes a dataset row's
    columns as ``extras``.
    """
    sources = [extras, extras.get("extra_info") or {}, extras.get("env_extras") or {}]
    sources = [s for s in sources if isinstance(s, Mapping)]
    for source in sources:
        if isinstance(source.get("task_id"), str):
            task: Task = taskset.get_task(str(source["task_id"]))
            return task
    for source in sources:
        key = source.get("task_key")
        if isinstance(key, str) and key:
            taskset_id = getattr(taskset, "taskset_id", None)
            if isinstance(taskset_id, str):
                task = taskset.get_task(Task.format_task_id(taskset_id, key))
                return task
            for task in taskset:
                if task.item_id == key:
                    return task
            raise SpecError(f"AgentkitTextEnv: no task with task_key {key!r} in the taskset")
    raise SpecError(
        "AgentkitTextEnv: extras must name the task: extras={'task_id': 'taskset:item'} "
        "(or extras['extra_info']['task_id'], or a 'task_key' column as "
        "'agentkit fleet split' writes it)"
    )


#: ``env_config`` keys of SkyRL's own Fleet environment (``integrations.fleet.env``)
#: that this environment understands too, so that a SkyRL Fleet config switches
#: to agentkit by changing the environment class only.
FLEET_CONFIG_KEYS = ("tasks_file", "api_key", "ttl_seconds")


def _fleet_config(
    config: Mapping[str, Any], extras: Mapping[str, Any]
) -> tuple[str, str, dict[str, Any]] | None:
    """``(taskset spec, harness, harness options)`` for a SkyRL Fleet ``env_config``
    (``tasks_file`` in ``env_config`` or ``extras``), or None."""
    tasks_file = config.get("tasks_file") or extras.get("tasks_file")
    if not tasks_file:
        return None
    if not isinstance(tasks_file, str):
        raise SpecError(f"AgentkitTextEnv: tasks_file must be a path, got {tasks_file!r}")
    options: dict[str, Any] = dict(config.get("harness_options") or {})
    if config.get("api_key"):
        options["fleet_api_key"] = str(config["api_key"])
    if config.get("ttl_seconds") is not None:
        options["ttl_seconds"] = int(config["ttl_seconds"])
    path = os.path.expanduser(tasks_file)
    return f"fleet:{path}", str(config.get("harness") or "fleet-tool-call"), options


def _max_turns(from_extras: Any, from_config: Any, harness: Any) -> int | None:
    """``extras["max_turns"]``, else ``env_config["max_turns"]``, else the harness's."""
    for where, value in (("extras", from_extras), ("env_config", from_config)):
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise SpecError(
                f"AgentkitTextEnv: {where}['max_turns'] must be a positive integer, got {value!r}"
            )
        return value
    default = getattr(harness, "max_turns", None)
    return default if isinstance(default, int) else None


class AgentkitTextEnv(BaseTextEnv):  # type: ignore[misc]
    """One episode of one agentkit task, driven by SkyRL's policy.

    ``env_config`` keys: ``taskset`` (a spec, ``fleet:examples/fleet/tasks.json``),
    ``harness`` (default ``fleet-tool-call``), ``taskset_options``,
    ``harness_options``, ``max_turns``; or, as for SkyRL's own Fleet
    environment, ``tasks_file`` (also accepted in ``extras``), ``api_key`` and
    ``ttl_seconds``. ``extras["task_id"]`` picks the task (or
    ``extras["task_key"]``, the item id, as a row of a Fleet split carries
    it); ``extras["max_turns"]`` (SkyRL's generator sets it) wins over
    ``env_config["max_turns"]``.
    """

    def __init__(self, env_config: Any = None, extras: Mapping[str, Any] | None = None) -> None:
        super().__init__()
        config = _plain(env_config) or {}
        if not isinstance(config, dict):
            raise SpecError(f"AgentkitTextEnv: env_config must be a mapping, got {config!r}")
        plain_extras = _plain(extras) or {}
        if not isinstance(plain_extras, dict):
            raise SpecError(f"AgentkitTextEnv: extras must be a mapping, got {plain_extras!r}")
        spec = config.get("taskset")
        harness_name = str(config.get("harness") or "fleet-tool-call")
        harness_opts: dict[str, Any] = dict(config.get("harness_options") or {})
        fleet = None if spec else _fleet_config(config, plain_extras)
        if fleet is not None:
            spec, harness_name, harness_opts = fleet
        if not isinstance(spec, str) or not spec:
            raise SpecError(
                "AgentkitTextEnv: env_config['taskset'] must be an agentkit taskset spec "
                "(for example 'fleet:examples/fleet/tasks.json'), or give 'tasks_file' "
                "as for SkyRL's Fleet environment"
            )
        self.taskset_spec = spec
        self.harness_name = harness_name
        taskset_options = json.dumps(config.get("taskset_options") or {}, sort_keys=True)
        harness_options = json.dumps(harness_opts, sort_keys=True)
        self.taskset = _taskset(spec, taskset_options)
        self.harness = _harness(self.harness_name, harness_options)
        self.task: Task = _task_of(self.taskset, plain_extras)
        self.task.require_payload()
        limit = _max_turns(plain_extras.get("max_turns"), config.get("max_turns"), self.harness)
        if limit is not None:
            self.max_turns = limit
        # the harness's own default applies when neither extras, env_config nor the harness say
        self.context = RunContext(
            rollout_id=f"skyrl-{uuid.uuid4().hex[:12]}",
            limits=Limits(max_turns=limit),
        )
        self.episode: Episode | None = None
        self.chat_history: list[dict[str, Any]] = []
        self.reward = 0.0
        self.done = False
        self.last_metadata: dict[str, Any] = {}
        self.init_metadata: dict[str, Any] = {}
        self._closed = False

    # -- async API -------------------------------------------------------------

    async def init_async(self, prompt: Any = None) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        """Start the episode; returns its chat history (``[system, user]``) and metadata.

        The task's own prompt is used: ``prompt`` (the dataset row's) is ignored.
        """
        if self.episode is not None:
            raise HarnessError("AgentkitTextEnv.init() was already called")
        self.episode = open_episode(self.harness, self.task, self.context, self.taskset)
        history, metadata = await self.episode.init()
        self.chat_history = list(history)
        metadata = dict(metadata)
        metadata.setdefault("task_id", self.task.task_id)
        self.init_metadata = metadata
        return list(history), metadata

    async def step_async(self, action: str) -> BaseTextEnvStepOutput:
        """Apply one model response; observations, reward, done and metadata."""
        if self.episode is None:
            raise HarnessError("AgentkitTextEnv.step() needs init() first")
        out = await self.episode.step(action)
        self.turns += 1
        self.reward = float(out.reward)
        self.done = bool(out.done)
        self.chat_history.append({"role": "assistant", "content": action})
        self.chat_history.extend(out.observations)
        metadata = dict(out.metadata)
        metadata.setdefault("task_id", self.task.task_id)
        self.last_metadata = metadata
        return BaseTextEnvStepOutput(
            observations=list(out.observations),
            reward=float(out.reward),
            done=bool(out.done),
            metadata=metadata,
        )

    async def close_async(self) -> None:
        """Release the episode's environment (idempotent)."""
        if self._closed:
            return
        self._closed = True
        if self.episode is not None:
            await self.episode.close()

    # -- the sync API SkyRL calls --------------------------------------------------

    def init(self, prompt: Any = None) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        """Sync :meth:`init_async` (on the shared background event loop)."""
        return run_sync(self.init_async(prompt))

    def step(self, action: str) -> BaseTextEnvStepOutput:
        """Sync :meth:`step_async`."""
        return run_sync(self.step_async(action))

    def close(self) -> None:
        """Sync :meth:`close_async`."""
        if not self._closed:
            run_sync(self.close_async())

    def get_metrics(self) -> dict[str, Any]:
        """This episode's numbers, as SkyRL's Fleet environment reports them (``task_key``,
        ``env_key``, ``turns``, ``tool_calls``), plus ``reward``, ``success``, the
        ``done_reason`` of the last step, and ``tool_errors``/``parse_errors`` when the
        episode counts them."""
        ep = self.episode
        record = getattr(ep, "record", None)
        task_key = self.init_metadata.get("task_key") or getattr(record, "task_key", None)
        metrics: dict[str, Any] = {
            "task_key": task_key or self.task.item_id,
            "env_key": self.init_metadata.get("env_key", getattr(record, "env_key", None)),
            "turns": self.turns,
            "tool_calls": getattr(ep, "tool_calls", 0) if ep is not None else 0,
            "reward": self.reward,
            "success": float(self.done and self.reward >= 1.0),
        }
        for name in ("tool_errors", "parse_errors"):
            value = getattr(ep, name, None)
            if isinstance(value, int):
                metrics[name] = value
        reason = self.last_metadata.get("done_reason") or getattr(ep, "done_reason", None)
        if isinstance(reason, str):
            metrics["done_reason"] = reason
        return metrics

    @staticmethod
    def aggregate_metrics(metrics: list[dict[str, Any]]) -> dict[str, Any]:
        """Per-environment and overall numbers, as SkyRL's Fleet environment aggregates them.

        Per ``env_key`` (``unknown`` without one): ``<env>/avg_turns``,
        ``min_turns``, ``max_turns``, ``avg_tool_calls``, ``tool_calls_per_turn``,
        ``num_episodes``; overall: ``avg_turns``, ``avg_tool_calls``,
        ``tool_calls_per_turn``, ``total_episodes``. Added: ``<env>/avg_reward``,
        the mean of every other numeric metric (``reward``, ``success``,
        ``tool_errors``...) and the share of each ``done_reason/<reason>``.
        """
        if not metrics:
            return {}
        by_env: dict[str, list[dict[str, Any]]] = {}
        for m in metrics:
            by_env.setdefault(str(m.get("env_key", "unknown")), []).append(m)
        out: dict[str, Any] = {}
        total_turns = total_calls = 0
        for env, items in by_env.items():
            turns = [int(m.get("turns", 0)) for m in items]
            calls = [int(m.get("tool_calls", 0)) for m in items]
            out[f"{env}/avg_turns"] = sum(turns) / len(turns)
            out[f"{env}/min_turns"] = min(turns)
            out[f"{env}/max_turns"] = max(turns)
            out[f"{env}/avg_tool_calls"] = sum(calls) / len(calls)
            out[f"{env}/tool_calls_per_turn"] = sum(calls) / sum(turns) if sum(turns) > 0 else 0
            out[f"{env}/num_episodes"] = len(turns)
            rewards = [float(m["reward"]) for m in items if _is_number(m.get("reward"))]
            if rewards:
                out[f"{env}/avg_reward"] = sum(rewards) / len(rewards)
            total_turns += sum(turns)
            total_calls += sum(calls)
        out["avg_turns"] = total_turns / len(metrics)
        out["avg_tool_calls"] = total_calls / len(metrics)
        out["tool_calls_per_turn"] = total_calls / total_turns if total_turns > 0 else 0
        out["total_episodes"] = len(metrics)
        from skyrl_gym.metrics import default_aggregate_metrics

        skip = {"turns", "tool_calls"}
        rest = [{k: v for k, v in m.items() if k not in skip} for m in metrics]
        for key, value in default_aggregate_metrics(rest).items():
            out.setdefault(key, value)
        reasons = [m["done_reason"] for m in metrics if isinstance(m.get("done_reason"), str)]
        for reason in sorted(set(reasons)):
            out[f"done_reason/{reason}"] = reasons.count(reason) / len(metrics)
        return out


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def register(env_id: str = "agentkit", **defaults: Any) -> None:
    """Register :class:`AgentkitTextEnv` with ``skyrl_gym.register`` under ``env_id``.

    ``defaults`` become constructor keyword arguments (``env_config=...``)
    that ``skyrl_gym.make(env_id, ...)`` can override. Registering an id
    that is already registered to this class does nothing.
    """
    import skyrl_gym

    existing = skyrl_gym.registry.get(env_id)
    if existing is not None:
        if existing.entry_point in (
            AgentkitTextEnv,
            "agentkit_skyrl._env:AgentkitTextEnv",
            "agentkit_skyrl:AgentkitTextEnv",
        ):
            return
        raise SpecError(f"skyrl_gym already has an environment {env_id!r}: {existing.entry_point}")
    skyrl_gym.register(id=env_id, entry_point=AgentkitTextEnv, kwargs=dict(defaults))
