"""Branching runs: episodes run to a branch point, forked, continued and scored per leaf.

:func:`run_branches` is :meth:`AgentEnv.branch <agentkit.AgentEnv.branch>`.
For every selected task and each of ``rollouts_per_task`` roots:

1. a step-capable episode of the harness (``harness.episode``, with the
   task's taskset) is started and driven by the run's model
   (:mod:`agentkit.env._branch_policy`) for ``plan.at`` replies;
2. it forks into ``plan.children`` episodes (:func:`agentkit.fork_episode`:
   the chat history, the counters and a copy of the environment) and is
   closed; its record, status ``"branched"``, is the shared prefix;
3. each child is driven on until its episode ends; the episode's own
   grading (the reward of its last step) scores it;
4. the children of one branch point are one GRPO group: their advantages
   are computed within it and the group is written to ``groups.jsonl`` with
   its ``branch_point``.

A root whose episode ends before the branch point is a leaf itself (it is
scored, and has no children). The run directory is the usual one (see
``docs/run-directory.md``); each record says where it sits in the tree
(``parent_rollout_id``, ``branch_step``, ``children``).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import anyio
import attrs

from agentkit._context import RunContext
from agentkit._episode import EpisodeForkError, fork_episode, is_step_capable, open_episode
from agentkit._errors import SpecError
from agentkit._events import Event
from agentkit._executor import PlannedTask
from agentkit._run_options import RunOptions
from agentkit.chat import ConnectionCache, ModelCallError
from agentkit.env._branch_plan import BranchPlan
from agentkit.env._branch_policy import ChatPolicy, Trace
from agentkit.env._manifest import build_manifest
from agentkit.env._records import EvalResults, RolloutGroup
from agentkit.env._runner import event_json, group_json, make_rollout_id
from agentkit.env._session import Composition, run_context, select_counted
from agentkit.rundir import PREFIX_STATUS, RolloutRecord, RunStore, branch_point_id
from agentkit.stats._group_advantages import group_advantages
from agentkit.stats._pass_at_k import pass_table
from agentkit.stats._summary import summarize

__all__ = ["run_branches"]


class _Ended:
    """How driving an episode stopped: it ended (``done``), failed, or reached its steps."""

    def __init__(self) -> None:
        self.done = False
        self.reward: float | None = None
        self.error: str | None = None
        self.error_kind: str | None = None
        self.steps = 0


@attrs.define(slots=False, eq=False, repr=False)
class _BranchRun:
    """One branching run: its context, policy, store and the records it made."""

    env: Composition
    plan: BranchPlan
    opts: RunOptions
    context: RunContext
    store: RunStore | None
    connections: ConnectionCache

    def __attrs_post_init__(self) -> None:
        self.policy = ChatPolicy(
            self.context, token_ids=self.plan.token_ids, connections=self.connections
        )
        self.limiter = anyio.CapacityLimiter(self.opts.concurrency)
        self.records: list[RolloutRecord] = []
        self.groups: list[RolloutGroup] = []

    # -- driving one episode ---------------------------------------------------------
    async def drive(
        self, episode: Any, history: list[dict[str, Any]], trace: Trace, steps: int | None
    ) -> _Ended:
        """Reply and step until the episode ends, or ``steps`` replies (None: no bound)."""
        ended = _Ended()
        while steps is None or ended.steps < steps:
            try:
                action = await self.policy.reply(history, trace)
            except ModelCallError as exc:  # its message never holds the API key
                ended.error, ended.error_kind = str(exc), exc.kind
                return ended
            try:
                out = await episode.step(action)
            except Exception as exc:  # the harness failed: this rollout fails, not the run
                ended.error = f"{type(exc).__name__}: {exc}"
                ended.error_kind = "harness_exception"
                return ended
            history.append({"role": "assistant", "content": action})
            history.extend(dict(m) for m in out.observations)
            ended.steps += 1
            if out.done:
                ended.done, ended.reward = True, float(out.reward)
                return ended
        return ended

    # -- one tree -----------------------------------------------------------------------
    async def tree(self, planned: PlannedTask, root: int) -> None:
        """Run one root to its branch point, fork it and run its children."""
        task = planned.task
        n = self.plan.children
        root_id = make_rollout_id(task.task_id, root)
        events: list[Event] = []
        started = time.time()
        trace = Trace()
        async with self.limiter:
            episode = open_episode(
                self.env.harness,
                task,
                self.context.evolve(rollout_id=root_id),
                events.append,
                taskset=self.env.taskset,
            )
            history: list[dict[str, Any]] = []
            ended = _Ended()
            children: list[Any] = []
            ids = [f"{root_id}.b{i}" for i in range(n)]
            try:
                try:
                    first, _meta = await episode.init()
                except Exception as exc:  # no sandbox, no app: this root fails, not the run
                    ended.error = f"the episode could not start: {type(exc).__name__}: {exc}"
                    ended.error_kind = "episode_init"
                else:
                    history = [dict(m) for m in first]
                    ended = await self.drive(episode, history, trace, self.plan.at)
                if not ended.done and ended.error is None:
                    try:
                        children = await fork_episode(episode, n, rollout_ids=ids)
                    except EpisodeForkError as exc:
                        ended.error, ended.error_kind = str(exc), "fork"
            finally:
                await _close(episode, ended)
        if not children:  # ended, failed or could not fork before the branch point: a leaf
            rec = self.record(planned, root_id, root * n, ended, history, trace, events, started)
            await self.commit([rec], group=None)
            return
        prefix = self.record(
            planned,
            root_id,
            self.opts.rollouts_per_task * n + root,
            ended,
            history,
            trace,
            events,
            started,
        )
        prefix.status, prefix.children = PREFIX_STATUS, ids
        await self.commit([prefix], group=None)
        leaves: list[RolloutRecord | None] = [None] * n

        async def leaf(i: int) -> None:
            leaves[i] = await self.leaf(
                planned, children[i], ids[i], root * n + i, history, trace, root_id, events
            )

        async with anyio.create_task_group() as group:
            for i in range(n):
                group.start_soon(leaf, i)
        done = [rec for rec in leaves if rec is not None]
        await self.commit(
            done, group=self.branch_group(done, branch_point_id(root_id, ended.steps))
        )

    async def leaf(
        self,
        planned: PlannedTask,
        episode: Any,
        rollout_id: str,
        index: int,
        prefix: list[dict[str, Any]],
        prefix_trace: Trace,
        parent: str,
        events: list[Event],
    ) -> RolloutRecord:
        """Continue one child until its episode ends; its scored record."""
        history = [dict(m) for m in prefix]
        trace = prefix_trace.copy()
        started = time.time()
        ended = _Ended()
        try:
            async with self.limiter:
                ended = await self.drive(episode, history, trace, None)
        finally:
            await _close(episode, ended)
        rec = self.record(planned, rollout_id, index, ended, history, trace, events, started)
        rec.parent_rollout_id, rec.branch_step = parent, self.plan.at
        return rec

    # -- records --------------------------------------------------------------------------
    def record(
        self,
        planned: PlannedTask,
        rollout_id: str,
        index: int,
        ended: _Ended,
        history: list[dict[str, Any]],
        trace: Trace,
        events: list[Event],
        started: float,
    ) -> RolloutRecord:
        """The record of one rollout (its events, those with its id, written to the run)."""
        failed = ended.error is not None
        reward = ended.reward if ended.done else None
        rec = RolloutRecord(
            rollout_id=rollout_id,
            task_id=planned.task.task_id,
            example_id=planned.example_id,
            rollout_index=index,
            group=planned.group,
            status="failed" if failed else "completed",
            output=next(
                (m.get("content") for m in reversed(history) if m.get("role") == "assistant"),
                None,
            ),
            messages=history,
            usage=dict(trace.usage.to_json()),
            rewards={} if reward is None else {"episode": reward},
            reward=reward,
            passed=None if reward is None else reward >= self.opts.pass_threshold,
            error=ended.error,
            error_kind=ended.error_kind,
            timings={"started_at": started, "finished_at": time.time()},
            raw=trace.raw(),
        )
        mine = [event_json(e, rollout_id) for e in events if e.rollout_id == rollout_id]
        rec.events = len(mine)
        if mine and self.store is not None:
            rec.events_file = self.store.write_events(rollout_id, mine)
        return rec

    def branch_group(self, leaves: list[RolloutRecord], point: str) -> RolloutGroup:
        """The GRPO group of one branch point's children (advantages set on them)."""
        advantages = group_advantages(
            [r.reward for r in leaves], normalize=self.opts.normalize_advantages
        )
        for rec, advantage in zip(leaves, advantages, strict=True):
            rec.advantage = advantage
        scored = [r.reward for r in leaves if r.reward is not None]
        group = RolloutGroup(
            task_id=leaves[0].task_id,
            example_id=leaves[0].example_id,
            rollouts=list(leaves),
            mean_reward=sum(scored) / len(scored) if scored else None,
            advantages=advantages,
            pass_at_k=pass_table(scored, self.opts.pass_threshold) if scored else {},
            branch_point=point,
        )
        self.groups.append(group)
        return group

    async def commit(self, records: Sequence[RolloutRecord], group: RolloutGroup | None) -> None:
        """Keep ``records`` and append them to the run directory (the group with the last)."""
        self.records.extend(records)
        if self.store is None:
            return
        for i, rec in enumerate(records):
            last = i == len(records) - 1
            await self.store.commit_rollout(
                rec, group_json(group) if last and group is not None else None
            )


async def _close(episode: Any, ended: _Ended) -> None:
    """Close ``episode``; a failure to close fails its rollout (when nothing else did)."""
    try:
        await episode.close()
    except Exception as exc:
        if ended.error is None:
            ended.error = f"the episode could not be closed: {type(exc).__name__}: {exc}"
            ended.error_kind = "episode_close"


def _check(env: Composition, opts: RunOptions, context: RunContext) -> None:
    name = getattr(env.harness, "name", None) or type(env.harness).__name__
    if not is_step_capable(env.harness):
        raise SpecError(
            f"harness {name!r} is not step-capable (no episode()): a branching run forks "
            "episodes; the terminal and fleet-tool-call harnesses' episodes can fork"
        )
    if opts.resume is not None:
        raise SpecError("a branching run cannot be resumed (resume=...): run it again into out=")
    if opts.executor != "local":
        raise SpecError(
            f"a branching run runs in this process (executor 'local'), got {opts.executor!r}"
        )
    if not context.model:
        raise SpecError("a branching run samples the run's model: set model (--model)")


async def run_branches(env: Composition, plan: BranchPlan, opts: RunOptions) -> EvalResults:
    """Run ``plan`` over the selected tasks (see the module's docstring)."""
    context = run_context(opts)
    _check(env, opts, context)
    planned, _unsupported = select_counted(env, opts.limit, opts.task_ids, opts.rollouts_per_task)
    store: RunStore | None = None
    if opts.out is not None:
        store = RunStore(opts.out, secret=context.api_key)
        store.open()
    connections = ConnectionCache()
    try:
        if store is not None:
            manifest = build_manifest(
                env,
                context,
                planned,
                opts.rollouts_per_task,
                opts.limit,
                opts.task_ids,
                "",
                {},
                False,
                None,
                {"concurrency": opts.concurrency, "pass_threshold": opts.pass_threshold},
            )
            manifest["branching"] = plan.to_json()
            store.write_manifest(manifest)
            store.write_tasks(planned)
        run = _BranchRun(env, plan, opts, context, store, connections)
        async with anyio.create_task_group() as group:
            for p in planned:
                for root in range(opts.rollouts_per_task):
                    group.start_soon(run.tree, p, root)
        leaves = [r for r in run.records if r.status != PREFIX_STATUS]
        summary = summarize(
            leaves,
            [(p.task.task_id, p.example_id) for p in planned],
            opts.rollouts_per_task * plan.children,
            threshold=opts.pass_threshold,
            complete=True,
            extra={
                "branching": {
                    **plan.to_json(),
                    "prefixes": len(run.records) - len(leaves),
                    "leaves": len(leaves),
                    "groups": len(run.groups),
                }
            },
        )
        if store is not None:
            store.write_summary(summary)
        return EvalResults(
            rollouts=run.records,
            groups=run.groups,
            summary=summary,
            run_dir=None if store is None else store.run_dir,
        )
    finally:
        await connections.aclose()
        if store is not None:
            store.close()
