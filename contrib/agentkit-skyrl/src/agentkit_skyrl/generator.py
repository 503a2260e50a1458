"""A SkyRL generator backed by agentkit's rollout service: :class:`AgentkitGenerator`.

SkyRL's trainer asks its generator for a batch (``generate(input_batch)``: the
prompts of a step, each repeated ``n_samples_per_prompt`` times, with their
``trajectory_ids``) and trains on the ``GeneratorOutput`` it returns. This
generator hands the trainer groups from a :class:`~agentkit.service.RolloutService`
(any harness, the agent programs included, rollouts kept in flight between
steps) instead of sampling itself: one group per distinct ``instance_id`` of the
batch, each row renamed to the batch's trajectory (``instance_id``, the
rollout's place in its group as ``repetition_id``). The output is step-wise
(one row per training sequence, ``is_last_step`` on a rollout's last), as
SkyRL's ``step_wise_trajectories`` trainer takes it.

The policy version is SkyRL's step: a batch whose ``batch_metadata.global_step``
is ahead of the service's policy announces it (``set_policy``) before any group
is taken, so ``max_staleness`` counts trainer steps.

>>> service = RolloutService(env, options, group_size=4, max_staleness=1)  # doctest: +SKIP
>>> generator = AgentkitGenerator(service)  # doctest: +SKIP
>>> output = await generator.generate(input_batch)  # doctest: +SKIP
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from skyrl.train.generators.base import (
    GeneratorInput,
    GeneratorInterface,
    GeneratorOutput,
    TrajectoryID,
)

from agentkit.service import RolloutService, ServiceError, ServiceGroup

__all__ = ["AgentkitGenerator", "GeneratorMismatch"]

#: The GeneratorOutput fields with one entry per row, concatenated across groups.
_ROWS = (
    "prompt_token_ids",
    "response_ids",
    "rewards",
    "loss_masks",
    "stop_reasons",
    "rollout_logprobs",
    "is_last_step",
    "env_metrics",
)


class GeneratorMismatch(ValueError):
    """The batch SkyRL asked for does not fit the service (a prompt repeated a number of
    times other than the service's ``group_size``, or a task it does not have)."""


class AgentkitGenerator(GeneratorInterface):  # type: ignore[misc]
    """SkyRL's ``GeneratorInterface`` over an agentkit :class:`~agentkit.service.RolloutService`.

    ``service``: a service not yet opened; the generator opens it on its first
    ``generate`` (in a task of its own on the trainer's event loop, where it stays)
    and closes it in :meth:`aclose`. SkyRL runs its trainer on asyncio: so does this.
    ``ahead``: groups asked for beyond each batch, so that they run while the
    trainer trains (0: only what each batch needs). A batch's
    ``env_extras`` may name each prompt's agentkit task (``{"task_id": ...}``);
    otherwise each prompt gets the next group to finish, of the taskset's tasks in
    turn. Every prompt must be repeated ``group_size`` times (SkyRL's
    ``n_samples_per_prompt``). A group past the service's staleness bound is
    replaced: a dropped one by a new request, a re-run one by its re-run; a batch that
    names tasks needs ``on_stale="rerun"`` when the service has a bound.
    ``last_groups``: the groups of the last batch (their records and rollouts).
    """

    def __init__(self, service: RolloutService, *, ahead: int = 0) -> None:
        if type(ahead) is not int or ahead < 0:
            raise GeneratorMismatch(f"ahead must be a whole number (0 or more), got {ahead!r}")
        self.service = service
        self.ahead = ahead
        self._task: asyncio.Task[None] | None = None
        self._stop = asyncio.Event()
        self._requested = 0  # untargeted groups asked for and not yet taken
        self._extra: list[ServiceGroup] = []  # taken from the service, for a later batch
        self.last_groups: list[ServiceGroup] = []

    async def generate(self, input_batch: GeneratorInput) -> GeneratorOutput:
        """One group per distinct ``instance_id`` of the batch, in the batch's order, as
        one step-wise ``GeneratorOutput``."""
        instances, task_ids = _instances(input_batch, self.service.group_size)
        await self._opened()
        metadata = input_batch.get("batch_metadata")
        if metadata is not None and metadata.global_step > self.service.policy.version:
            await self.service.set_policy(metadata.global_step)
        groups = await self._take(task_ids)
        if self.ahead:
            self.service.request(self.ahead)
            self._requested += self.ahead
        self.last_groups = groups
        return _output(instances, groups)

    async def _take(self, task_ids: list[str | None]) -> list[ServiceGroup]:
        """A group for each prompt: one of its task where named, else the next to finish.
        A group past the staleness bound is replaced (dropped ones by a new request,
        re-run ones by their re-run)."""
        service = self.service
        if any(t is not None for t in task_ids) and (
            service.max_staleness is not None and service.on_stale == "drop"
        ):
            raise GeneratorMismatch(
                "a batch that names agentkit tasks needs a service that re-runs stale "
                "groups (on_stale='rerun'): a dropped group of a named task is not replaced"
            )
        named: dict[str, list[int]] = {}  # task id -> the prompts that name it
        for n, task_id in enumerate(task_ids):
            if task_id is not None:
                service.request(task_id=task_id)
                named.setdefault(task_id, []).append(n)
        free = [n for n, t in enumerate(task_ids) if t is None]
        got: dict[int, ServiceGroup] = {}
        for group in list(self._extra):  # finished earlier, asked for ahead
            if free:
                got[free.pop(0)] = group
                self._extra.remove(group)
        if len(free) > self._requested:
            service.request(len(free) - self._requested)
            self._requested = len(free)
        while len(got) < len(task_ids):
            try:
                group = await service.next_group()
            except ServiceError:
                if service.report().pending:
                    raise
                # the last pending group was past the bound and dropped: ask again
                service.request(len(free))
                self._requested = len(free)
                continue
            if named.get(group.task_id):
                got[named[group.task_id].pop(0)] = group
                continue
            self._requested -= 1
            if free:
                got[free.pop(0)] = group
            else:
                self._extra.append(group)
        return [got[n] for n in range(len(task_ids))]

    async def _opened(self) -> None:
        """Open the service in a task of its own (its task group lives there, not in the
        trainer's task, whose cancel scopes come and go between batches)."""
        if self._task is None:
            opened = asyncio.Event()
            self._task = asyncio.create_task(self._serve(opened))
            waiting = asyncio.create_task(opened.wait())
            await asyncio.wait({self._task, waiting}, return_when=asyncio.FIRST_COMPLETED)
            if not opened.is_set():
                waiting.cancel()
                await self._task  # it failed to open: its error
        elif self._task.done():
            await self._task  # it stopped: its error, else the service's "closed"

    async def _serve(self, opened: asyncio.Event) -> None:
        async with self.service:
            opened.set()
            await self._stop.wait()

    async def aclose(self) -> None:
        """Close the service (its rollouts still running are cancelled)."""
        self._stop.set()
        if self._task is not None:
            await self._task


def _instances(batch: GeneratorInput, group_size: int) -> tuple[list[str], list[str | None]]:
    """The batch's distinct instance ids in order, and the agentkit task each names."""
    prompts = batch["prompts"]
    ids = batch.get("trajectory_ids") or [TrajectoryID(str(n), 0) for n in range(len(prompts))]
    extras: Sequence[dict[str, Any] | None] = batch.get("env_extras") or [None] * len(prompts)
    counts: dict[str, int] = {}
    tasks: dict[str, str | None] = {}
    for trajectory, extra in zip(ids, extras, strict=True):
        counts[trajectory.instance_id] = counts.get(trajectory.instance_id, 0) + 1
        tasks.setdefault(trajectory.instance_id, (extra or {}).get("task_id"))
    for instance, count in counts.items():
        if count != group_size:
            raise GeneratorMismatch(
                f"instance {instance!r} is asked for {count} times: the rollout service's "
                f"groups have {group_size} rollouts (set n_samples_per_prompt to {group_size})"
            )
    return list(counts), [tasks[i] for i in counts]


def _output(instances: list[str], groups: list[ServiceGroup]) -> GeneratorOutput:
    """The groups' ``GeneratorOutput``s as one, each row named by its batch trajectory."""
    out: dict[str, Any] = {key: [] for key in _ROWS}
    out["trajectory_ids"] = []
    for instance, group in zip(instances, groups, strict=True):
        data = group.data
        if not isinstance(data, dict) or "response_ids" not in data:
            raise GeneratorMismatch(
                f"group {group.group_id} is in format {group.format!r}: the service must "
                "hand groups over in SkyRL's format (format='skyrl')"
            )
        order = {r.rollout_index: n for n, r in enumerate(group.rollouts)}
        for key in _ROWS:
            rows = data.get(key)
            out[key].extend(rows if rows is not None else [None] * len(data["response_ids"]))
        out["trajectory_ids"].extend(
            TrajectoryID(instance, order.get(t["repetition_id"], t["repetition_id"]))
            for t in data["trajectory_ids"]
        )
    if any(lp is None for lp in out["rollout_logprobs"]):
        out["rollout_logprobs"] = None
    out["stop_reasons"] = [s or "unknown" for s in out["stop_reasons"]]
    out["rollout_metrics"] = {
        "agentkit/groups": len(groups),
        "agentkit/max_staleness": max((g.staleness for g in groups), default=0),
        "agentkit/mean_reward": _mean([r for g in groups for r in g.rewards if r is not None]),
    }
    out["trajectory_generation_times"] = None
    out["rollout_expert_indices"] = None
    return out


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0
