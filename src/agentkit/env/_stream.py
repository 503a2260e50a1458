"""A long-lived run: rollouts started one at a time while it is open, each recorded as it
finishes (the rollout service's engine, :mod:`agentkit.service`).

:func:`open_rollouts` does what :func:`~agentkit.env._execute.execute` does
before and after a run's rollouts (serves a scripted model when the run names
one, opens the executor (local or Ray), runs the preflight, opens the run directory
and writes its manifest and tasks), but instead of running a fixed list of
jobs it hands back a :class:`RolloutStream`: the caller starts each rollout
(:meth:`RolloutStream.run`, one job: attempts with retries, the record, its
line in ``rollouts.jsonl``) and says when a group is complete
(:meth:`RolloutStream.complete_group`: GRPO advantages, its line in
``groups.jsonl``). Every model call goes through the model proxy, whose
routes follow the caller's :class:`~agentkit._policy.PolicyBoard`.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Sequence

import anyio
import attrs

from agentkit._errors import SpecError
from agentkit._executor import Job, PlannedTask
from agentkit._policy import PolicyBoard
from agentkit._run_options import RunOptions
from agentkit.env._execute import _check, _open_store, _run_redactor, _write_plan
from agentkit.env._groups import apply_group
from agentkit.env._live import LiveEvents
from agentkit.env._records import RolloutGroup
from agentkit.env._runner import Runner, group_json, make_rollout_id
from agentkit.env._scripted import SCRIPTED_PREFIX, scripted_endpoint
from agentkit.env._session import Composition, Session, prepare
from agentkit.rundir import RolloutRecord, RunStore

__all__ = ["RolloutStream", "open_rollouts"]


class RolloutStream:
    """An open long-lived run: start rollouts with :meth:`run`, close groups with
    :meth:`complete_group`."""

    def __init__(self, session: Session, runner: Runner, store: RunStore | None) -> None:
        self._session = session
        self._runner = runner
        self._store = store
        #: Rollouts started and not recorded (running, or stopped by a restart or a close).
        self._unfinished: set[str] = set()

    @property
    def planned(self) -> list[PlannedTask]:
        """The tasks rollouts may be run of, in the taskset's order."""
        return self._session.planned

    @property
    def run_dir(self) -> str | None:
        """The run directory the rollouts are written to (None: none)."""
        return None if self._store is None else str(self._store.run_dir)

    def job(self, planned: PlannedTask, rollout_index: int) -> Job:
        """The job of rollout ``rollout_index`` of ``planned`` (its id stable)."""
        return Job(planned, rollout_index, make_rollout_id(planned.task.task_id, rollout_index))

    async def run(self, job: Job) -> RolloutRecord:
        """Run one rollout to its end (its attempts, with retries) and record it: its line
        is in ``rollouts.jsonl`` when this returns. Its model calls are on the record
        (``model_calls``), each naming its policy version. Cancelling it (a restart)
        records nothing."""
        self._unfinished.add(job.rollout_id)
        record = await self._runner._run_job(job)
        if self._store is not None:
            # finished: its line is written (and made durable) whatever is cancelled now,
            # so that a restart or a close never runs or loses a finished rollout again
            with anyio.CancelScope(shield=True):
                await self._store.commit_rollout(record, None)
                await anyio.to_thread.run_sync(self._tidy, record)
        self._unfinished.discard(job.rollout_id)
        return record

    def _tidy(self, record: RolloutRecord) -> None:
        """A recorded rollout's sandbox files, as a run leaves them: removed after a
        success (unless kept), else scrubbed of secrets."""
        store = self._store
        if store is None or self._session.factory is None:
            return
        if record.ok and not self._session.runner_options.keep_sandboxes:
            store.remove_sandbox_dir(record.rollout_id)
        else:  # kept sandbox files are part of the run directory too
            store.scrub_files(store.sandbox_root(record.rollout_id))

    def close(self) -> None:
        """The run is over: the sandbox files of rollouts that never finished (nothing
        of them is recorded) are removed, and ``rollouts/`` when it is left empty."""
        store = self._store
        if store is None or self._session.factory is None:
            return
        for rollout_id in self._unfinished:
            store.remove_sandbox_dir(rollout_id)
        self._unfinished.clear()
        store.remove_empty_sandbox_parent()

    async def complete_group(self, records: Sequence[RolloutRecord]) -> RolloutGroup:
        """A group's rollouts all finished: its GRPO advantages (set on the records) and
        its line in ``groups.jsonl``."""
        opts = self._session.runner_options
        group = apply_group(
            list(records), threshold=opts.pass_threshold, normalize=opts.normalize_advantages
        )
        if self._store is not None:
            self._store.append_group(group_json(group))
        return group


@contextlib.asynccontextmanager
async def open_rollouts(
    env: Composition, options: RunOptions, *, policy: PolicyBoard
) -> AsyncIterator[RolloutStream]:
    """Open a long-lived run of ``env`` with ``options`` (``out``: its run directory;
    ``rollouts_per_task`` is not used: the caller decides how many rollouts each task
    gets). Rollouts run on the run's executor (local or Ray: the executor gives rollouts
    elsewhere a board that reads ``policy`` where it keeps it). A proxied model endpoint
    and a new run directory are needed: a :class:`~agentkit.SpecError` says which is
    missing."""
    if options.resume is not None:
        raise SpecError("resume is not supported by the rollout service: give out=... or none")
    if not options.model_proxy:
        raise SpecError(
            "the rollout service needs the model proxy (model_proxy=True): it records "
            "each call's policy version there"
        )
    session = prepare(env, options)
    async with contextlib.AsyncExitStack() as stack:
        ctx = session.ctx
        if ctx.model and ctx.model.startswith(SCRIPTED_PREFIX):
            name, url = stack.enter_context(scripted_endpoint(ctx.model))
            ctx = ctx.evolve(model=name, base_url=url)
        if not ctx.base_url:
            raise SpecError("the rollout service needs the model endpoint: give base_url=...")
        opts = attrs.evolve(session.runner_options, keep_calls=True)
        session.runner_options = opts
        work = session.rollout_work(ctx, policy=policy)
        if not work.proxied:
            raise SpecError(
                "the rollout service needs every model call to pass the model proxy; "
                "the harness sets its own base_url"
            )
        executor = session.executor
        await executor.open(work, run_dir=session.target)

        async def close() -> None:
            with anyio.CancelScope(shield=True):
                await executor.close()
                await work.aclose()

        stack.push_async_callback(close)
        await _check(session, ctx, executor)
        store, _note = _open_store(session, _run_redactor(ctx))
        if store is not None:
            stack.callback(store.close)
        _write_plan(session, store)
        live = LiveEvents(
            session.options.trace_callback or session.env.trace_callback,
            buffer=session.options.event_buffer,
            drain_timeout=session.options.callback_drain_timeout,
        )
        runner = Runner(
            work=work,
            executor=executor,
            jobs=[make_job(p) for p in session.planned],
            options=opts,
            store=store,
            live=live,
        )
        await runner.prepare()
        async with anyio.create_task_group() as callbacks:
            live.attach(callbacks)
            stream = RolloutStream(session, runner, store)
            try:
                yield stream
            finally:
                callbacks.cancel_scope.cancel()
                stream.close()


def make_job(planned: PlannedTask) -> Job:
    """A task's first rollout's job (what the executor's preparation is given)."""
    return Job(planned, 0, make_rollout_id(planned.task.task_id, 0))
