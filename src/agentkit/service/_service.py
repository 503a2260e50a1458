"""RolloutService: rollouts of any harness kept in flight for a trainer, handed back as
finished groups, each call tagged with the policy version that answered it, none past
the staleness bound.

The service opens one long-lived run of an :class:`~agentkit.AgentEnv`
(:func:`agentkit.env.open_rollouts`: the run's executor, local or Ray, the model proxy, the run
directory when ``out`` is given) and keeps ``concurrency`` rollouts running
from a queue of requested groups. A rollout runs as any rollout of a run
does (sandbox, harness, scoring, retries), its model calls through the
proxy, whose routes follow the service's :class:`~agentkit._policy.PolicyBoard`:
each call goes to the policy current when it starts and names its version.
When a group's last rollout is recorded its advantages are computed and it
waits for the trainer, who takes groups in the order they finished
(:meth:`RolloutService.groups`). The staleness bound is checked as a group is
handed over, against the policy current then; a group it dooms earlier (a call
or a finished rollout already too far behind a newer policy) is stopped at once.
An error the service cannot go on from reaches the trainer as one
:class:`ServiceFailed` naming its cause.
"""

from __future__ import annotations

import collections
import contextlib
import itertools
import os
import pickle
import time
from collections.abc import AsyncIterator
from types import TracebackType
from typing import Any, Literal
from urllib.parse import urlsplit

import anyio
import attrs

from agentkit._errors import AgentkitError, SpecError
from agentkit._executor import PlannedTask
from agentkit._policy import Policy, PolicyBoard
from agentkit.env import AgentEnv, RolloutRecord, RolloutStream, RunOptions, open_rollouts
from agentkit.rundir import RunDirWriteError
from agentkit.service._formats import (
    TRAINER_FORMATS,
    RecordOptions,
    TrainerFormat,
    in_format,
    training_records,
)
from agentkit.service._group import ServiceGroup, ServiceReport

__all__ = ["OnStale", "RolloutService", "ServiceError", "ServiceFailed"]

#: What happens to a group past the staleness bound: ``drop`` it, or ``rerun`` its task
#: as a new group (under the current policy).
OnStale = Literal["drop", "rerun"]


class ServiceError(AgentkitError):
    """The rollout service cannot do what was asked (it is closed, or nothing is pending)."""


class ServiceFailed(ServiceError):
    """An error stopped the rollout service (a full disk, an executor that died): every
    call on it from then on raises this, naming the error (``cause``) and where the
    rollouts and groups it finished are (``run_dir``, None without ``out``). Every
    rollout finished before it is in the run directory; groups finished before it are
    still handed over first.

    It pickles whole, its message as it is (through a Ray actor's handle to a trainer in
    another process); a ``cause`` that cannot make that trip is replaced by a
    :class:`ServiceError` with its message."""

    def __init__(self, cause: BaseException, run_dir: str | os.PathLike[str] | None = None) -> None:
        self.cause = cause
        self.run_dir = None if run_dir is None else str(run_dir)
        super().__init__(_failed_message(cause, self.run_dir))

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild_failed, (str(self), _portable(self.cause), self.run_dir))


def _failed_message(cause: BaseException, run_dir: str | None) -> str:
    """What failed (for a run directory's write, without the advice to resume a run,
    which a service does not do) and where what the service finished is."""
    if isinstance(cause, RunDirWriteError):
        what = cause.failure
    elif isinstance(cause, AgentkitError):
        what = str(cause)
    else:
        what = f"{type(cause).__name__}: {cause}"
    if run_dir is None:
        kept = "it had no run directory (out): the groups handed over are all it kept"
    else:
        kept = (
            f"every rollout and group it finished before is in {run_dir} "
            "(rollouts.jsonl, groups.jsonl)"
        )
    return f"the rollout service stopped: {what}; {kept}"


def _rebuild_failed(message: str, cause: BaseException, run_dir: str | None) -> ServiceFailed:
    """A :class:`ServiceFailed` as pickled: its message as it was."""
    failed = ServiceFailed.__new__(ServiceFailed)
    Exception.__init__(failed, message)
    failed.cause = cause
    failed.run_dir = run_dir
    return failed


def _portable(cause: BaseException) -> BaseException:
    """``cause`` if it survives pickling, else a :class:`ServiceError` with its message."""
    try:
        pickle.loads(pickle.dumps(cause))
    except Exception:
        return ServiceError(f"{type(cause).__name__}: {cause}")
    return cause


@attrs.define(eq=False)
class _Group:
    """A requested group: its task, its rollouts' indices and those recorded."""

    id: int
    planned: PlannedTask
    indices: range
    rerun_of: int | None = None
    records: dict[int, RolloutRecord] = attrs.field(factory=dict)
    #: The policy version current when each rollout (by index) started its last run.
    started: dict[int, int] = attrs.field(factory=dict)
    #: The oldest policy version known so far of each rollout (by index): of its calls
    #: in its current run while it runs, of its record once finished.
    versions: dict[int, int] = attrs.field(factory=dict)
    #: The staleness bound doomed it before it finished: its rollouts were stopped.
    doomed: bool = False


@attrs.define(eq=False)
class _Slot:
    """One rollout of a group, queued or running."""

    group: _Group
    index: int


@attrs.frozen
class _Finished:
    group: _Group
    oldest: int
    newest: int


class RolloutService:
    """Rollouts of ``env``'s taskset and harness kept in flight for a trainer; finished
    groups handed back as they finish.

    >>> async with RolloutService(env, RunOptions(model="m", base_url=url, concurrency=16),
    ...                           group_size=4, max_staleness=2) as service:  # doctest: +SKIP
    ...     service.request(8)
    ...     async for group in service.groups():
    ...         train_on(group.data)                 # SkyRL's GeneratorOutput
    ...         await service.set_policy(step + 1)   # new weights are served now

    ``options``: the run's settings (:class:`~agentkit.RunOptions`): the model
    endpoint, ``concurrency`` (the rollouts in flight at once), limits, the
    sandbox, ``out`` (a run directory every finished rollout is written to as it
    finishes; nothing is written without it). ``rollouts_per_task`` is not used:
    ``group_size`` is the rollouts of each group. Rollouts run on the options'
    executor (local, or Ray: the workers read the policy from an actor); every model
    call passes the model proxy (``model_proxy`` must be on).

    ``max_staleness``: no group whose oldest call is more than this many policy
    versions behind the current one is handed over (None: no bound; 0: on-policy);
    ``on_stale`` says what happens to such a group: ``drop`` it or ``rerun`` its
    task. ``restart_on_update``: a policy update restarts the rollouts running
    then (from the start, under the new policy); otherwise they go on, each call
    going to the policy current when it starts. ``format``: what
    :attr:`ServiceGroup.data` is (``skyrl``, ``tinker``, ``verifiers``, ``jsonl``);
    ``records``: how records are prepared (advantage normalisation, overlong
    filtering, truncation). ``policy_version``: the version served at the start.
    """

    def __init__(
        self,
        env: AgentEnv,
        options: RunOptions,
        *,
        group_size: int,
        max_staleness: int | None = None,
        on_stale: OnStale = "drop",
        restart_on_update: bool = False,
        format: TrainerFormat = "skyrl",
        records: RecordOptions | None = None,
        policy_version: int = 0,
    ) -> None:
        if type(group_size) is not int or group_size < 1:
            raise SpecError(f"group_size must be a whole number of at least 1, got {group_size!r}")
        if max_staleness is not None and (type(max_staleness) is not int or max_staleness < 0):
            raise SpecError(
                f"max_staleness must be a whole number (0 or more) or None, got {max_staleness!r}"
            )
        if on_stale not in ("drop", "rerun"):
            raise SpecError(f"on_stale must be 'drop' or 'rerun', got {on_stale!r}")
        if format not in TRAINER_FORMATS:
            raise SpecError(f"format must be one of {', '.join(TRAINER_FORMATS)}, got {format!r}")
        self.env = env
        self.options = options
        self.group_size = group_size
        self.max_staleness = max_staleness
        self.on_stale: OnStale = on_stale
        self.restart_on_update = restart_on_update
        self.format: TrainerFormat = format
        self.record_options = records or RecordOptions()
        self._board = PolicyBoard(Policy(version=policy_version), on_call=self._on_call)
        self._stream: RolloutStream | None = None
        self._stack: contextlib.AsyncExitStack | None = None
        self._closed = False
        self._ids = itertools.count()
        self._next_index: dict[str, int] = {}
        self._next_task = 0
        self._queue: collections.deque[_Slot] = collections.deque()
        self._queued = anyio.Event()
        self._running: dict[_Slot, tuple[anyio.CancelScope, int]] = {}
        self._running_ids: dict[str, _Slot] = {}  # a running rollout's id -> its slot
        self._unfinished: dict[int, _Group] = {}  # groups requested, not yet complete
        self._done: collections.deque[_Finished] = collections.deque()
        self._finished = anyio.Event()
        self._recorded = anyio.Event()  # set (and replaced) as each rollout is recorded
        self._delivered: set[int] = set()
        self._base_path = ""
        # counts
        self._requested = 0
        self._pending = 0
        self._dropped = 0
        self._rerun = 0
        self._restarted = 0
        self._rollouts = 0
        self._doomed = 0
        self._stopped = 0
        self._overhead = 0.0
        self._failure: BaseException | None = None
        self._stopped_event = anyio.Event()

    # -- opening and closing ---------------------------------------------------------
    async def __aenter__(self) -> RolloutService:
        if self._stack is not None or self._closed:
            raise ServiceError("a RolloutService opens once")
        stack = contextlib.AsyncExitStack()
        await stack.__aenter__()
        try:
            self._stream = await stack.enter_async_context(
                open_rollouts(self.env, self.options, policy=self._board)
            )
            workers = await stack.enter_async_context(anyio.create_task_group())
            stack.callback(workers.cancel_scope.cancel)
            for _ in range(self.options.concurrency):
                workers.start_soon(self._worker)
        except BaseException:
            await stack.__aexit__(None, None, None)
            raise
        self._stack = stack
        base = self.options.base_url or (self.options.context and self.options.context.base_url)
        self._base_path = urlsplit(str(base or "").rstrip("/")).path
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Stop: rollouts still running are cancelled (their sandboxes closed, nothing of
        them recorded); every finished rollout is already in the run directory; the
        model proxy and the executor are released. :meth:`report` still answers."""
        self._closed = True
        stack, self._stack = self._stack, None
        if stack is not None:
            # the task groups close in the task and the scopes they were opened in; the
            # executor and the model proxy are released shielded (agentkit.env.open_rollouts)
            await stack.__aexit__(None, None, None)
        self._wake_all()

    def _wake_all(self) -> None:
        self._queued.set()
        self._finished.set()
        self._recorded.set()
        self._stopped_event.set()

    async def wait_stopped(self) -> None:
        """Wait until the service stops: return once it is closed (:meth:`aclose`);
        raise :class:`ServiceFailed` when an error stopped it (``agentkit serve`` waits
        here)."""
        await self._stopped_event.wait()
        self._raise_failure()

    @property
    def _run_dir(self) -> str | None:
        return None if self._stream is None else self._stream.run_dir

    def _raise_failure(self) -> None:
        if self._failure is not None:
            raise ServiceFailed(self._failure, self._run_dir) from self._failure

    # -- the trainer's side ----------------------------------------------------------
    @property
    def policy(self) -> Policy:
        """The policy served now."""
        return self._board.current

    def request(self, groups: int = 1, *, task_id: str | None = None) -> list[int]:
        """Ask for ``groups`` more groups; their ids. Each is a task × ``group_size``
        rollouts: ``task_id``'s, or the taskset's tasks in turn (starting again after the
        last). The rollouts are queued and run ``concurrency`` at a time."""
        stream = self._open_stream()
        self._raise_failure()
        if type(groups) is not int or groups < 1:
            raise SpecError(f"groups must be a whole number of at least 1, got {groups!r}")
        planned = stream.planned
        if task_id is not None:
            chosen = [p for p in planned if p.task.task_id == task_id]
            if not chosen:
                raise SpecError(f"unknown task {task_id!r}: it is not among the service's tasks")
        ids = []
        for _ in range(groups):
            if task_id is not None:
                task = chosen[0]
            else:
                task = planned[self._next_task % len(planned)]
                self._next_task += 1
            ids.append(self._enqueue(task, None).id)
        self._requested += groups
        self._pending += groups
        return ids

    async def set_policy(
        self, version: int, *, base_url: str | None = None, model: str | None = None
    ) -> None:
        """A new policy is served from now on: ``version`` (larger than the current one),
        at ``base_url`` (a new endpoint with the run's path, ``/v1``; None: the same
        endpoint) as ``model`` (a new model or LoRA adapter name; None: the name the agent
        sends). Every call that starts from now on goes to it and names ``version``.
        With ``restart_on_update`` the rollouts running now start again."""
        self._open_stream()
        self._raise_failure()
        if base_url is not None:
            path = urlsplit(base_url.rstrip("/")).path
            if path != self._base_path:
                raise SpecError(
                    f"base_url {base_url!r} must have the run's endpoint path "
                    f"{self._base_path!r}: the agents keep the base URL they were given"
                )
        self._board.announce(Policy(version=version, base_url=base_url, model=model))
        await self._board.publish()  # rollouts in other processes (Ray) read it from now on
        if self.restart_on_update:
            for slot, (scope, started) in list(self._running.items()):
                if started < version:
                    scope.cancel()  # its calls so far are gone with it
                    slot.group.versions.pop(slot.index, None)
        for group in list(self._unfinished.values()):
            self._check_doom(group)

    async def next_group(self) -> ServiceGroup:
        """The next finished group within the staleness bound (groups past it are dropped
        or run again, as ``on_stale`` says, and counted). A :class:`ServiceError` when no
        group is pending (none requested, or all handed over or dropped) or the service
        is closed; a :class:`ServiceFailed` when an error stopped it."""
        group = await self._next()
        if group is None:
            raise ServiceError("no group is pending: request() some first")
        return group

    async def groups(self) -> AsyncIterator[ServiceGroup]:
        """Finished groups as they finish, until no requested group is pending (request
        more while iterating to keep it going)."""
        while (group := await self._next()) is not None:
            yield group

    async def _next(self) -> ServiceGroup | None:
        """The next group to hand over; None when no group is pending."""
        while True:
            while not self._done:
                self._raise_failure()
                if self._closed:
                    raise ServiceError("the rollout service is closed")
                if self._pending == 0:
                    return None
                event = self._finished
                await event.wait()
                if event is self._finished:
                    self._finished = anyio.Event()
            finished = self._done.popleft()
            t0 = time.perf_counter()
            group = self._hand_over(finished)
            self._overhead += time.perf_counter() - t0
            if group is not None:
                return group

    async def wait_for_rollouts(self, count: int) -> None:
        """Wait until at least ``count`` rollouts have been recorded since the service
        opened (in the run directory, when it has one): a trainer's progress, a test's
        event. Bound it with ``anyio.fail_after``."""
        while self._rollouts < count:
            self._raise_failure()
            if self._closed:
                raise ServiceError("the rollout service is closed")
            await self._recorded.wait()

    def report(self) -> ServiceReport:
        """What the service did so far."""
        return ServiceReport(
            requested=self._requested,
            delivered=len(self._delivered),
            dropped_stale=self._dropped,
            rerun_stale=self._rerun,
            restarted_rollouts=self._restarted,
            doomed_groups=self._doomed,
            stopped_rollouts=self._stopped,
            rollouts_finished=self._rollouts,
            in_flight=len(self._running),
            waiting=len(self._done),
            pending=self._pending,
            policy_version=self._board.version,
            overhead_s=self._overhead,
            run_dir=self._run_dir,
            error=None
            if self._failure is None
            else str(ServiceFailed(self._failure, self._run_dir)),
        )

    # -- inside ------------------------------------------------------------------------
    def _open_stream(self) -> RolloutStream:
        if self._stream is None or self._closed:
            raise ServiceError(
                "the rollout service is not open: use 'async with RolloutService(...)'"
                if not self._closed
                else "the rollout service is closed"
            )
        return self._stream

    def _enqueue(self, planned: PlannedTask, rerun_of: int | None) -> _Group:
        task_id = planned.task.task_id
        first = self._next_index.get(task_id, 0)
        self._next_index[task_id] = first + self.group_size
        group = _Group(next(self._ids), planned, range(first, first + self.group_size), rerun_of)
        self._unfinished[group.id] = group
        self._queue.extend(_Slot(group, i) for i in group.indices)
        self._wake_workers()
        return group

    def _wake_workers(self) -> None:
        self._queued.set()
        self._queued = anyio.Event()

    async def _worker(self) -> None:
        while True:
            while not self._queue:
                await self._queued.wait()
            try:
                await self._run(self._queue.popleft())
            except Exception as exc:  # the service cannot go on: the trainer is told
                self._fail(exc)
                return

    def _fail(self, exc: BaseException) -> None:
        """An error stopped the service: the rollouts still running are stopped (nothing
        of them recorded), and every wait of the trainer's ends in :class:`ServiceFailed`."""
        if self._failure is None:
            self._failure = exc
        for scope, _version in list(self._running.values()):
            scope.cancel()
        self._queue.clear()
        self._wake_all()

    async def _run(self, slot: _Slot) -> None:
        stream = self._stream
        assert stream is not None
        job = stream.job(slot.group.planned, slot.index)
        version = self._board.version
        slot.group.started[slot.index] = version
        record: RolloutRecord | None = None
        with anyio.CancelScope() as scope:
            self._running[slot] = (scope, version)
            self._running_ids[job.rollout_id] = slot
            try:
                record = await stream.run(job)
            finally:
                del self._running[slot]
                del self._running_ids[job.rollout_id]
        group = slot.group
        if record is None:
            # restarted by a policy update: first in line again (a rollout stopped with
            # its doomed group, or by a failure, is not)
            if not group.doomed and self._failure is None:
                group.versions.pop(slot.index, None)
                self._restarted += 1
                self._queue.appendleft(slot)
                self._wake_workers()
            return
        self._rollouts += 1
        self._recorded.set()
        self._recorded = anyio.Event()
        if group.doomed:  # it finished as it was stopped: recorded, never handed over
            self._stopped -= 1
            return
        t0 = time.perf_counter()
        group.records[slot.index] = record
        group.versions[slot.index] = min(_versions(record, version))
        self._check_doom(group)
        if not group.doomed and len(group.records) == len(group.indices):
            await self._complete(group)
        self._overhead += time.perf_counter() - t0

    def _on_call(self, rollout_id: str, version: int) -> None:
        """The model proxy tells of each call as it starts (the board's watcher)."""
        slot = self._running_ids.get(rollout_id)
        if slot is None:
            return
        known = slot.group.versions.get(slot.index)
        if known is None or version < known:
            slot.group.versions[slot.index] = version
            self._check_doom(slot.group)

    def _check_doom(self, group: _Group) -> None:
        """Stop ``group`` when the staleness bound already rules it out: a call or a
        finished rollout of it is more than ``max_staleness`` versions behind the
        current policy, and versions only grow. Its queued rollouts never start, its
        running ones are cancelled (their sandboxes closed, nothing of them recorded),
        and it counts as past the bound (dropped or run again, as ``on_stale`` says)."""
        bound = self.max_staleness
        if bound is None or group.doomed or not group.versions:
            return
        if self._board.version - min(group.versions.values()) <= bound:
            return
        group.doomed = True
        self._doomed += 1
        del self._unfinished[group.id]
        queued = [s for s in self._queue if s.group is group]
        for slot in queued:
            self._queue.remove(slot)
        self._stopped += len(queued)
        for slot, (scope, _version) in list(self._running.items()):
            if slot.group is group:
                scope.cancel()
                self._stopped += 1
        self._past_bound(group)

    def _past_bound(self, group: _Group) -> None:
        """A group past the staleness bound: dropped, or its task queued again."""
        if self.on_stale == "rerun":
            self._rerun += 1
            self._enqueue(group.planned, group.id)
        else:
            self._dropped += 1
            self._pending -= 1
            if self._pending == 0:  # a trainer waiting for the last group is told
                self._finished.set()

    async def _complete(self, group: _Group) -> None:
        stream = self._stream
        assert stream is not None
        records = [group.records[i] for i in group.indices]
        del self._unfinished[group.id]
        await stream.complete_group(records)
        versions = [v for r in records for v in _versions(r, group.started[r.rollout_index])]
        self._done.append(_Finished(group, min(versions), max(versions)))
        self._finished.set()

    def _hand_over(self, finished: _Finished) -> ServiceGroup | None:
        """The group as the trainer gets it, or None when it is past the bound (dropped,
        or queued again)."""
        group = finished.group
        current = self._board.version
        bound = self.max_staleness
        if bound is not None and current - finished.oldest > bound:
            self._past_bound(group)
            return None
        if group.id in self._delivered:
            raise ServiceError(f"group {group.id} was about to be handed over twice")
        rollouts = [group.records[i] for i in group.indices]
        records = training_records(rollouts, self.record_options)
        self._delivered.add(group.id)
        self._pending -= 1
        return ServiceGroup(
            group_id=group.id,
            task_id=group.planned.task.task_id,
            format=self.format,
            data=in_format(records, rollouts, self.format),
            records=tuple(records),
            rollouts=tuple(rollouts),
            oldest_version=finished.oldest,
            newest_version=finished.newest,
            version=current,
            rerun_of=group.rerun_of,
        )


def _versions(record: RolloutRecord, started: int) -> list[int]:
    """The policy versions of a rollout's calls; for a rollout that made no call (or one
    the proxy did not tag), ``started``: the version current when it started."""
    tagged = [c.policy_version for c in record.model_calls]
    if tagged and None not in tagged:
        return [v for v in tagged if v is not None]
    return [started]
