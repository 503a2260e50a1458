"""Running rollouts: bounded concurrency, retries, recording; the executor runs the attempts.

``concurrency`` workers take (task, rollout index) jobs in order; given a
shared ``limiter`` (an :class:`anyio.CapacityLimiter` that other runs hold
too, as the cells of a job do), a worker takes a token of it before each job
and gives it back once the rollout is recorded, so that all the runs sharing
it have at most its ``total_tokens`` rollouts running at once. Each job:

1. runs attempts through the run's executor (``agentkit.executors``: in this
   process, or as Ray tasks on a cluster), each one sandbox, harness and
   scoring (:mod:`agentkit.env._attempt`), its events passed on live;
2. retries, with exponential backoff and jitter (or as long as a server's
   ``Retry-After`` asks), only attempts that ask for it (``retryable``
   results: model rate limit, 5xx, connection, sandbox start, a lost worker);
3. records the final attempt: a rollout that could not run (an
   infrastructure failure, :data:`~agentkit._result.INFRA_ERROR_KINDS`) has
   no reward and ``infra_error: true``; scrubs the files it kept of secrets,
   writes its events and appends its line to rollouts.jsonl (fsynced): only
   this process, the driver, writes the run directory;
4. when the task's group is complete, computes GRPO advantages and appends
   the group to groups.jsonl.

While a job runs, its events also go to ``live/<rollout_id>.jsonl`` as they
arrive (for viewers; removed once its line is durable, see ``_livelog.py``).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import random
import re
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import anyio
import attrs

from agentkit._calls import ModelCall, calls_json
from agentkit._events import Event
from agentkit._executor import Executor, Job
from agentkit._result import HarnessResult
from agentkit._rubric import ScoreResult
from agentkit.env._attempt import CLOSE_TIMEOUT_SEC, RolloutWork
from agentkit.env._groups import apply_group
from agentkit.env._live import LiveEvents, RolloutEvents
from agentkit.env._livelog import LiveLog
from agentkit.rundir import IMAGES_DIR, RolloutRecord, RunStore

__all__ = [
    "RETRY_AFTER_CAP",
    "Runner",
    "RunnerOptions",
    "event_json",
    "group_json",
    "make_rollout_id",
]

_SLUG = re.compile(r"[^A-Za-z0-9._-]+")


def make_rollout_id(task_id: str, rollout_index: int) -> str:
    """A stable, filesystem-safe id: readable item slug, short hash of the task id, index."""
    digest = hashlib.sha1(task_id.encode("utf-8")).hexdigest()[:8]
    item = task_id.split(":", 1)[-1]
    slug = _SLUG.sub("_", item).strip("._-")[:40] or "task"
    return f"{slug}-{digest}-r{rollout_index}"


@attrs.define(kw_only=True)
class RunnerOptions:
    """How rollouts are run (everything that does not change what is computed)."""

    rollouts_per_task: int = 1
    concurrency: int = 8
    timeout: float | None = None
    max_retries: int = 3
    retry_base_delay: float = 0.5
    retry_max_delay: float = 30.0
    keep_sandboxes: bool = False
    pass_threshold: float = 1.0
    normalize_advantages: bool = False
    sandbox_factory: Callable[..., Any] | None = None
    sandbox_close_timeout: float = CLOSE_TIMEOUT_SEC
    run_token_limit: int | None = None
    run_cost_limit: float | None = None
    #: Keep each rollout's model calls on its record (``model_calls``) also when they
    #: are written to the run directory (the rollout service builds training records
    #: from them as the rollout finishes).
    keep_calls: bool = False


class ProgressSink(Protocol):
    """What the runner tells a progress display."""

    def started(self) -> None: ...

    def finished(self, record: RolloutRecord) -> None: ...


#: The longest wait a server's ``Retry-After`` gets (unless ``retry_max_delay`` is
#: longer), as the openai client does: a longer one is taken as this.
RETRY_AFTER_CAP = 60.0


def _tap(live_log: LiveLog, rollout_id: str, event: Event) -> None:
    live_log.event(event_json(event, rollout_id))


def event_json(event: Event, rollout_id: str) -> dict[str, Any]:
    """An event as a rollout's events file holds it (``rollout_id``: the rollout's, when
    the event names none)."""
    return {
        "type": event.type,
        "rollout_id": event.rollout_id or rollout_id,
        "task_id": event.task_id,
        "seq": event.seq,
        "timestamp": event.timestamp,
        "data": event.data,
    }


def _write_files(
    store: RunStore, rollout_id: str, events: Sequence[Event], calls: Sequence[ModelCall]
) -> tuple[str | None, str | None]:
    """Write a rollout's events and model calls files (those it has); their paths."""
    events_file = (
        store.write_events(rollout_id, [event_json(e, rollout_id) for e in events])
        if events
        else None
    )
    calls_file = store.write_calls(rollout_id, calls_json(calls)) if calls else None
    return events_file, calls_file


@attrs.define(kw_only=True, slots=False, eq=False, repr=False)
class Runner:
    """Runs a list of jobs through an executor and records each finished rollout."""

    work: RolloutWork
    executor: Executor
    jobs: Sequence[Job]
    options: RunnerOptions
    store: RunStore | None
    live: LiveEvents
    progress: ProgressSink | None = None
    finished: Sequence[RolloutRecord] = ()
    #: A budget shared with other runs: each running rollout holds one token of it.
    limiter: anyio.CapacityLimiter | None = None

    def __attrs_post_init__(self) -> None:
        self.context = self.work.context
        self.records: list[RolloutRecord] = list(self.finished)
        self.groups: list[Any] = []
        self._by_task: dict[str, list[RolloutRecord]] = {}
        for rec in self.finished:
            self._by_task.setdefault(rec.task_id, []).append(rec)
        self._next = 0
        #: Why the run stopped before its last job (a run token or cost limit), if it did.
        self.stop_reason: str | None = None
        self.spent_tokens = 0
        self.spent_cost = 0.0
        for rec in self.finished:
            self._spend(rec)
        #: The live event files of the rollouts running now (see _livelog.py).
        self._live_logs: dict[str, LiveLog] = {}

    async def prepare(self, on_progress: Callable[[str], None] | None = None) -> None:
        """Let the executor prepare every task's environment before any rollout.

        With the local executor: the sandbox kind's optional ``prepare``
        (image builds; see ``docs/sandboxes.md``), once with every task to run.
        """
        log_dir = None if self.store is None else self.store.run_dir / IMAGES_DIR
        await self.executor.prepare(self.jobs, log_dir=log_dir, on_progress=on_progress)

    async def run(self) -> list[RolloutRecord]:
        """Run every job; returns every record, including those finished before.

        An exception that stops the run (Ctrl-C, a full disk) is raised as
        itself, not wrapped in an exception group.
        """
        try:
            await self._run()
        except BaseExceptionGroup as group:
            raise _first_leaf(group) from None
        return self.records

    async def _run(self) -> None:
        async with anyio.create_task_group() as callbacks:
            self.live.attach(callbacks)
            try:
                async with anyio.create_task_group() as workers:
                    for _ in range(max(1, min(self.options.concurrency, len(self.jobs)))):
                        workers.start_soon(self._worker)
            finally:
                with anyio.move_on_after(self.live.drain_timeout, shield=True):
                    while self.live.processed < self.live.queued:
                        await anyio.sleep(0.01)
                self.live.count_undelivered()
                callbacks.cancel_scope.cancel()

    async def _worker(self) -> None:
        jobs = self.jobs
        while self._next < len(jobs) and self.stop_reason is None:
            async with self._slot():
                # taken once the slot is ours: a worker waiting for the shared budget
                # holds no job back from the workers that have a slot
                if self._next >= len(jobs) or self.stop_reason is not None:
                    return
                job = jobs[self._next]
                self._next += 1
                await self._run_one(job)

    def _slot(self) -> contextlib.AbstractAsyncContextManager[Any]:
        """A token of the shared budget while a rollout runs (nothing without one)."""
        return self.limiter if self.limiter is not None else contextlib.nullcontext()

    async def _run_one(self, job: Job) -> None:
        if self.progress is not None:
            self.progress.started()
        live_log = self._start_live_log(job)
        finished = False
        try:
            record = await self._run_job(job)
            await self._finish(record)
            finished = True
        finally:
            if live_log is not None:
                del self._live_logs[job.rollout_id]
                live_log.close(remove=finished)

    def _start_live_log(self, job: Job) -> LiveLog | None:
        if self.store is None:
            return None
        live_log = LiveLog(self.store, job.rollout_id).start(
            task_id=job.planned.task.task_id,
            rollout_index=job.rollout_index,
            group=job.planned.group,
        )
        self._live_logs[job.rollout_id] = live_log
        return live_log

    # -- one rollout -------------------------------------------------------
    async def _run_job(self, job: Job) -> RolloutRecord:
        planned = job.planned
        task = planned.task
        events = self.live.for_rollout(job.rollout_id, task.task_id)
        live_log = self._live_logs.get(job.rollout_id)
        if live_log is not None:
            events.tap = functools.partial(_tap, live_log, job.rollout_id)
        started_at = time.time()
        t0 = time.perf_counter()
        attempt = 0
        while True:
            last = attempt >= self.options.max_retries
            outcome = await self.executor.attempt(job, events, last_attempt=last, store=self.store)
            if not outcome.retry:
                break
            await self._backoff(events, outcome.result)
            attempt += 1
        result, score = outcome.result, outcome.score
        events.close()
        if score is None:  # it could not run: no reward, not a zero
            score = ScoreResult({}, None, [])
        usage: dict[str, Any] = dict(result.usage.to_json())
        if not result.usage.cost:  # the harness did not price it: the run's pricing does
            cost = self.context.cost(result.usage)
            usage["cost"] = None if cost is None else round(cost, 10)
        rec = RolloutRecord(
            rollout_id=job.rollout_id,
            task_id=task.task_id,
            example_id=planned.example_id,
            rollout_index=job.rollout_index,
            group=planned.group,
            status=result.status,
            output=result.output,
            messages=result.messages,
            usage=usage,
            rewards=score.rewards,
            reward=score.total,
            passed=None if score.total is None else score.total >= self.options.pass_threshold,
            # grading the agent broke (GradedAsFailure): scored, and named
            error=result.error or (score.failure["error"] if score.failure else None),
            error_kind=result.error_kind or (score.failure["kind"] if score.failure else None),
            infra_error=result.infra_error,
            scoring_errors=score.errors,
            attempts=attempt + 1,
            retries=events.retries,
            timings={
                "started_at": started_at,
                "finished_at": time.time(),
                "duration_s": time.perf_counter() - t0,
                "harness_s": outcome.harness_s,
                "scoring_s": outcome.scoring_s,
            },
            raw=result.raw,
            events_dropped=events.dropped,
            worker=outcome.worker,
            calls=len(outcome.calls),
            calls_without_tokens=_without_tokens(outcome.calls),
        )
        stored = result.events or events.events
        rec.events = len(stored)
        if self.store is not None:
            # files the harness kept (verifier output, logs, artifacts): no secret in them
            artifacts = self.store.artifacts_dir(job.rollout_id)
            if artifacts.exists():
                await anyio.to_thread.run_sync(self.store.scrub_files, artifacts)
        if self.store is not None and (stored or outcome.calls):
            # in a worker thread: creating a file can wait on the disk, and the other
            # rollouts go on meanwhile (the rollout's line is written after both files)
            rec.events_file, rec.calls_file = await anyio.to_thread.run_sync(
                _write_files, self.store, job.rollout_id, stored, outcome.calls
            )
        if outcome.calls and (self.store is None or self.options.keep_calls):
            # no run directory (env.generate()), or asked for: the records stay in memory
            rec.model_calls = list(outcome.calls)
        return rec

    async def _backoff(self, events: RolloutEvents, result: HarnessResult) -> None:
        attempt = len(events.retries)
        delay = min(self.options.retry_max_delay, self.options.retry_base_delay * 2**attempt)
        delay *= random.uniform(0.5, 1.5)  # jitter: spread the retries of many rollouts
        entry: dict[str, Any] = {"error": result.error, "error_kind": result.error_kind}
        asked = result.raw.get("retry_after")
        if isinstance(asked, (int, float)) and not isinstance(asked, bool) and asked >= 0:
            # the server said when to come back (Retry-After on a 429 or 503): that long
            delay = min(float(asked), max(self.options.retry_max_delay, RETRY_AFTER_CAP))
            entry["retry_after"] = asked
        entry["delay_s"] = round(delay, 3)
        events.retries.append(entry)
        live_log = self._live_logs.get(events.rollout_id)
        if live_log is not None:
            live_log.retry(
                attempt=attempt + 2,
                error_kind=result.error_kind,
                error=result.error,
                delay_s=round(delay, 3),
            )
        events.reset()
        await anyio.sleep(delay)

    # -- recording -----------------------------------------------------------
    def _spend(self, rec: RolloutRecord) -> None:
        """Count a finished rollout's tokens and cost against the run's limits."""
        usage = rec.usage
        tokens = usage.get("input_tokens", 0) + usage.get("output_tokens", 0)
        self.spent_tokens += int(tokens) if isinstance(tokens, (int, float)) else 0
        cost = usage.get("cost")
        self.spent_cost += float(cost) if isinstance(cost, (int, float)) else 0.0
        limit = self.options.run_token_limit
        if limit is not None and self.spent_tokens >= limit and self.stop_reason is None:
            self.stop_reason = (
                f"the run used {self.spent_tokens} tokens, reaching its limit of {limit} "
                "(--run-token-limit)"
            )
        cost_limit = self.options.run_cost_limit
        if cost_limit is not None and self.spent_cost >= cost_limit and self.stop_reason is None:
            self.stop_reason = (
                f"the run cost ${self.spent_cost:.4f}, reaching its limit of ${cost_limit:g} "
                "(--run-cost-limit)"
            )

    async def _finish(self, rec: RolloutRecord) -> None:
        group = self._by_task.setdefault(rec.task_id, [])
        group.append(rec)
        complete = len(group) >= self.options.rollouts_per_task
        stats = None
        if complete:
            stats = apply_group(
                group,
                threshold=self.options.pass_threshold,
                normalize=self.options.normalize_advantages,
            )
        # counted first: once written, the line is part of the run even if Ctrl-C
        # arrives while it is being made durable
        self.records.append(rec)
        self._spend(rec)
        if stats is not None:
            self.groups.append(stats)
        if self.store is not None:
            await self.store.commit_rollout(rec, None if stats is None else group_json(stats))
        if self.progress is not None:
            self.progress.finished(rec)


def _first_leaf(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """The exception to raise for a group: Ctrl-C first, else the first non-cancellation."""
    leaves: list[BaseException] = []

    def walk(exc: BaseException) -> None:
        if isinstance(exc, BaseExceptionGroup):
            for sub in exc.exceptions:
                walk(sub)
        else:
            leaves.append(exc)

    walk(group)
    for kind in (KeyboardInterrupt, SystemExit):
        for exc in leaves:
            if isinstance(exc, kind):
                return exc
    cancelled = anyio.get_cancelled_exc_class()
    for exc in leaves:
        if not isinstance(exc, cancelled):
            return exc
    return leaves[0] if leaves else group


def _without_tokens(calls: Sequence[ModelCall]) -> list[dict[str, Any]]:
    """The calls that carry no token ids, grouped by why (for ``agentkit show``):
    ``{"note", "calls": [index, ...]}`` per reason, in the order the reasons first occur."""
    groups: dict[str, list[int]] = {}
    for call in calls:
        if not call.has_tokens:
            groups.setdefault(call.token_note or "no token ids", []).append(call.index)
    return [{"note": note, "calls": indices} for note, indices in groups.items()]


def group_json(group: Any) -> dict[str, Any]:
    """The groups.jsonl line of a completed group (with its ``branch_point`` when it
    is the group of one branch point's children)."""
    line = {
        "type": "group",
        "task_id": group.task_id,
        "example_id": group.example_id,
        "rollout_ids": [r.rollout_id for r in group.rollouts],
        "rewards": group.rewards,
        "mean_reward": group.mean_reward,
        "advantages": group.advantages,
        "pass_at_k": group.pass_at_k,
    }
    point = getattr(group, "branch_point", None)
    if point is not None:
        line["branch_point"] = point
    return line
