"""Running rollouts: bounded concurrency, timeouts, retries, sandboxes, scoring, recording.

``concurrency`` workers take (task, rollout index) jobs in order. Each job:

1. makes a sandbox when the task has execution hints or the harness says
   ``requires_sandbox`` (a start failure is error_kind ``sandbox_start``:
   retried, unless it is permanent: the sandbox refused its options or
   hints, or its tool is unavailable here); a task whose environment
   :meth:`Runner.prepare` could not make (a failed image build) fails at
   once with that error, never retried;
2. runs the harness under the per-rollout timeout; a raising harness (any
   exception kind, ``CancelledError`` included, unless the run itself is
   being stopped) is a failed result (``harness_exception``; ``harness_setup`` for a
   :class:`~agentkit.HarnessError`, a harness that cannot run here), a
   timeout a ``timeout`` result;
3. retries, with exponential backoff and jitter, only results that are
   ``retryable`` (model rate limit, 5xx, connection, sandbox start);
4. scores the final result with the compiled rubric (inside the sandbox),
   unless the rollout could not run (an infrastructure failure,
   :data:`~agentkit._result.INFRA_ERROR_KINDS`): that one gets no reward and
   ``infra_error: true``; writes its events and appends its line to
   rollouts.jsonl (fsynced);
5. when the task's group is complete, computes GRPO advantages and appends
   the group to groups.jsonl.

While a job runs, its events also go to ``live/<rollout_id>.jsonl`` as they
arrive (for viewers; removed once its line is durable, see ``_livelog.py``).
"""

from __future__ import annotations

import functools
import hashlib
import random
import re
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import anyio
import attrs

from agentkit._context import RunContext
from agentkit._errors import HarnessError
from agentkit._events import Event
from agentkit._result import HarnessResult
from agentkit._sandbox import ExecutionHints
from agentkit._task import Task
from agentkit.env._live import LiveEvents, RolloutEvents
from agentkit.env._livelog import LiveLog
from agentkit.env._records import RolloutRecord
from agentkit.env._rubric_compile import CompiledRubric, ScoreResult
from agentkit.env._store import RunStore
from agentkit.env._summary import apply_group
from agentkit.sandbox._errors import SandboxUnavailableError

__all__ = [
    "RETRY_AFTER_CAP",
    "Job",
    "PlannedTask",
    "Runner",
    "RunnerOptions",
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


@attrs.define(slots=True)
class PlannedTask:
    """A task in the run's plan, with its group number."""

    task: Task
    group: int
    example_id: str
    hints: ExecutionHints | None = None


@attrs.define(slots=True)
class Job:
    """One rollout to run: a task and its rollout index."""

    planned: PlannedTask
    rollout_index: int
    rollout_id: str


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
    sandbox_close_timeout: float = 30.0
    run_token_limit: int | None = None
    run_cost_limit: float | None = None


class ProgressSink(Protocol):
    """What the runner tells a progress display."""

    def started(self) -> None: ...

    def finished(self, record: RolloutRecord) -> None: ...


#: The longest wait a server's ``Retry-After`` gets (unless ``retry_max_delay`` is
#: longer), as the openai client does: a longer one is taken as this.
RETRY_AFTER_CAP = 60.0

#: A final attempt: the result, its scores (None: it could not run, nothing was
#: scored), harness seconds, scoring seconds.
_Outcome = tuple[HarnessResult, ScoreResult | None, float, float]


def _tap(live_log: LiveLog, rollout_id: str, event: Event) -> None:
    live_log.event(_event_json(event, rollout_id))


def _event_json(event: Event, rollout_id: str) -> dict[str, Any]:
    return {
        "type": event.type,
        "rollout_id": event.rollout_id or rollout_id,
        "task_id": event.task_id,
        "seq": event.seq,
        "timestamp": event.timestamp,
        "data": event.data,
    }


class Runner:
    """Runs a list of jobs and records each finished rollout."""

    def __init__(
        self,
        *,
        harness: Any,
        taskset: Any,
        rubric: CompiledRubric,
        jobs: Sequence[Job],
        options: RunnerOptions,
        context: RunContext,
        store: RunStore | None,
        live: LiveEvents,
        progress: ProgressSink | None = None,
        finished: Sequence[RolloutRecord] = (),
        sandbox_tmp: Any = None,
    ) -> None:
        self.harness = harness
        self.taskset = taskset
        self.rubric = rubric
        self.jobs = jobs
        self.options = options
        self.context = context
        self.store = store
        self.live = live
        self.progress = progress
        self.sandbox_tmp = sandbox_tmp
        self.records: list[RolloutRecord] = list(finished)
        self.groups: list[Any] = []
        self._by_task: dict[str, list[RolloutRecord]] = {}
        for rec in finished:
            self._by_task.setdefault(rec.task_id, []).append(rec)
        self._next = 0
        #: Why the run stopped before its last job (a run token or cost limit), if it did.
        self.stop_reason: str | None = None
        self.spent_tokens = 0
        self.spent_cost = 0.0
        for rec in finished:
            self._spend(rec)
        self._requires_sandbox = bool(getattr(harness, "requires_sandbox", False))
        self._needed = self._needed_arguments()
        self._prepare_errors: dict[str, BaseException] = {}
        #: The live event files of the rollouts running now (see _livelog.py).
        self._live_logs: dict[str, LiveLog] = {}

    def _needed_arguments(self) -> frozenset[str]:
        from agentkit._rubric import REWARD_ARGUMENTS

        names: set[str] = set()
        for m in self.rubric.metrics:
            if m.takes_all:
                return frozenset(REWARD_ARGUMENTS)
            names.update(m.arguments)
        return frozenset(names)

    async def prepare(self, on_progress: Callable[[str], None] | None = None) -> None:
        """Let the sandbox kind prepare every task's environment before any rollout.

        Calls the factory's optional ``prepare(hints, log_dir=, on_progress=,
        **options)`` once with the hints of every task still to run (see
        ``docs/sandboxes.md``); a task whose entry is an exception fails all its
        rollouts with it (``error_kind`` from the exception, not retried).
        """
        factory = self.options.sandbox_factory
        prepare = getattr(getattr(factory, "func", factory), "prepare", None)
        if factory is None or not callable(prepare):
            return
        tasks: dict[str, PlannedTask] = {}
        for job in self.jobs:
            if job.planned.hints is not None or self._requires_sandbox:
                tasks.setdefault(job.planned.task.task_id, job.planned)
        if not tasks:
            return
        planned = list(tasks.values())
        log_dir = None if self.store is None else self.store.run_dir / "images"
        options = dict(getattr(factory, "keywords", None) or {})
        results = await prepare(
            [self._hints_for(p) for p in planned],
            log_dir=log_dir,
            on_progress=on_progress,
            **options,
        )
        for p, outcome in zip(planned, results, strict=True):
            if isinstance(outcome, BaseException):
                self._prepare_errors[p.task.task_id] = outcome

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
            job = jobs[self._next]
            self._next += 1
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
            outcome = await self._attempt(job, events, last_attempt=last)
            if outcome is not None:
                break
            attempt += 1
        result, score, harness_s, scoring_s = outcome
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
            error=result.error,
            error_kind=result.error_kind,
            infra_error=result.infra_error,
            scoring_errors=score.errors,
            attempts=attempt + 1,
            retries=events.retries,
            timings={
                "started_at": started_at,
                "finished_at": time.time(),
                "duration_s": time.perf_counter() - t0,
                "harness_s": harness_s,
                "scoring_s": scoring_s,
            },
            raw=result.raw,
            events_dropped=events.dropped,
        )
        stored = result.events or events.events
        rec.events = len(stored)
        if self.store is not None:
            # files the harness kept (verifier output, logs, artifacts): no secret in them
            artifacts = self.store.artifacts_dir(job.rollout_id)
            if artifacts.exists():
                await anyio.to_thread.run_sync(self.store.scrub_files, artifacts)
        if stored and self.store is not None:
            rec.events_file = self.store.write_events(
                job.rollout_id, [_event_json(e, job.rollout_id) for e in stored]
            )
        return rec

    async def _attempt(
        self, job: Job, events: RolloutEvents, *, last_attempt: bool
    ) -> _Outcome | None:
        """One attempt; None means 'retry' (after the backoff sleep)."""
        planned = job.planned
        needs_sandbox = planned.hints is not None or self._requires_sandbox
        if not needs_sandbox:
            t = time.perf_counter()
            result = await self._run_harness(planned.task, job, events, None)
            harness_s = time.perf_counter() - t
            if result.retryable and not last_attempt:
                await self._backoff(events, result)
                return None
            if result.infra_error:
                return result, None, harness_s, 0.0
            t = time.perf_counter()
            score = await self._score(planned, job, result, None)
            return result, score, harness_s, time.perf_counter() - t
        return await self._attempt_in_sandbox(job, events, last_attempt=last_attempt)

    async def _attempt_in_sandbox(
        self, job: Job, events: RolloutEvents, *, last_attempt: bool
    ) -> _Outcome | None:
        planned = job.planned
        factory = self.options.sandbox_factory
        assert factory is not None
        unprepared = self._prepare_errors.get(planned.task.task_id)
        if unprepared is not None:
            result = HarnessResult(
                status="failed",
                error=f"the task's environment could not be prepared: {unprepared}",
                error_kind=str(getattr(unprepared, "error_kind", None) or "sandbox_prepare"),
            )
            if result.infra_error:  # the rollout could not run: nothing to score
                return result, None, 0.0, 0.0
            t = time.perf_counter()
            scored = await self._score(planned, job, result, None)
            return result, scored, 0.0, time.perf_counter() - t
        root = self._sandbox_root(job.rollout_id)
        if root.exists():
            import shutil

            shutil.rmtree(root, ignore_errors=True)
        sandbox: Any = None
        try:
            root.mkdir(parents=True, exist_ok=True)
            sandbox = factory(
                root=root,
                hints=self._hints_for(planned),
                rollout_id=job.rollout_id,
                model_endpoint=self.context.base_url,
            )
            await sandbox.__aenter__()
        except Exception as exc:
            # permanent: the sandbox refused its options or hints (it was never
            # made), or its tool is unavailable here; retrying cannot help
            permanent = isinstance(exc, SandboxUnavailableError) or (
                sandbox is None and not isinstance(exc, OSError)
            )
            if sandbox is not None:
                await self._close_sandbox(sandbox)
            result = HarnessResult(
                status="failed",
                error=f"sandbox failed to start: {type(exc).__name__}: {exc}",
                error_kind="sandbox_start",
            )
            if not last_attempt and not permanent:
                await self._backoff(events, result)
                return None
            return result, None, 0.0, 0.0
        score: ScoreResult | None = None
        scoring_s = 0.0
        try:
            t = time.perf_counter()
            result = await self._run_harness(planned.task, job, events, sandbox)
            harness_s = time.perf_counter() - t
            if result.retryable and not last_attempt:
                retry = True
            else:
                retry = False
                if not result.infra_error:
                    t = time.perf_counter()
                    score = await self._score(planned, job, result, sandbox)
                    scoring_s = time.perf_counter() - t
        finally:
            await self._close_sandbox(sandbox)
        if retry:
            await self._backoff(events, result)
            return None
        return result, score, harness_s, scoring_s

    def _hints_for(self, planned: PlannedTask) -> ExecutionHints:
        """The task's hints plus what the harness needs to see (``sandbox_ro_binds``)."""
        hints = planned.hints or ExecutionHints()
        extra = [b for b in self._harness_ro_binds if b not in hints.ro_binds]
        if extra:
            hints = attrs.evolve(hints, ro_binds=[*hints.ro_binds, *extra])
        return hints

    @functools.cached_property
    def _harness_ro_binds(self) -> list[str]:
        """Host paths the harness asks to see read-only (its binary, say); read once."""
        return [str(b) for b in getattr(self.harness, "sandbox_ro_binds", None) or ()]

    def _rollout_context(self, job: Job, sandbox: Any) -> RunContext:
        """The run's context for one rollout: its id, sandbox and kept-files directory."""
        artifacts = None if self.store is None else str(self.store.artifacts_dir(job.rollout_id))
        return self.context.evolve(
            rollout_id=job.rollout_id, sandbox=sandbox, artifacts_dir=artifacts
        )

    def _sandbox_root(self, rollout_id: str) -> Any:
        if self.store is not None:
            return self.store.sandbox_root(rollout_id)
        from pathlib import Path

        assert self.sandbox_tmp is not None
        return Path(self.sandbox_tmp) / rollout_id

    async def _close_sandbox(self, sandbox: Any) -> None:
        with anyio.move_on_after(self.options.sandbox_close_timeout, shield=True):
            try:
                await sandbox.__aexit__(None, None, None)
            except Exception as exc:  # closing must not lose the rollout
                import logging

                logging.getLogger("agentkit").warning(
                    "agentkit: closing a sandbox failed: %s: %s", type(exc).__name__, exc
                )

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

    async def _run_harness(
        self, task: Task, job: Job, events: RolloutEvents, sandbox: Any
    ) -> HarnessResult:
        context = self._rollout_context(job, sandbox)
        timeout = self.options.timeout
        result: Any = None
        try:
            if timeout is None:
                result = await self.harness.run(task, context, events.on_event)
            else:
                with anyio.move_on_after(timeout) as scope:
                    result = await self.harness.run(task, context, events.on_event)
                if scope.cancelled_caught or (scope.cancel_called and result is None):
                    return HarnessResult(
                        status="timeout",
                        error=f"the rollout exceeded its timeout of {timeout:g}s",
                        error_kind="timeout",
                        events=list(events.events),
                    )
        except KeyboardInterrupt:
            raise
        except HarnessError as exc:  # the harness cannot run here: not the agent's doing
            return HarnessResult(
                status="failed",
                error=str(exc),
                error_kind="harness_setup",
                events=list(events.events),
            )
        except BaseException as exc:
            # Any kind, CancelledError and SystemExit too, is this rollout's error;
            # only a real stop of the run (its scope or task cancelled) goes on up.
            if _is_stop(exc):
                raise
            return HarnessResult(
                status="failed",
                error=f"{type(exc).__name__}: {exc}",
                error_kind="harness_exception",
                events=list(events.events),
            )
        if not isinstance(result, HarnessResult):
            return HarnessResult(
                status="failed",
                error=f"{type(self.harness).__name__}.run() returned {type(result).__name__}, "
                "not a HarnessResult",
                error_kind="invalid_result",
                events=list(events.events),
            )
        return result

    async def _score(
        self, planned: PlannedTask, job: Job, result: HarnessResult, sandbox: Any
    ) -> ScoreResult:
        task = planned.task
        needed = self._needed
        available: dict[str, Any] = {}
        if "task" in needed:
            available["task"] = task
        if "result" in needed:
            available["result"] = result
        if "output" in needed:
            available["output"] = result.output
        if "target" in needed:
            available["target"] = task.target
        if "messages" in needed:
            available["messages"] = result.messages
        if "sandbox" in needed:
            available["sandbox"] = sandbox
        if "context" in needed:
            available["context"] = self._rollout_context(job, sandbox)
        if "grading_spec" in needed:
            available["grading_spec"] = task.grading_spec
        if "state" in needed:
            state = result.to_state_patch()
            state.update(
                {
                    "task_id": task.task_id,
                    "example_id": planned.example_id,
                    "rollout_id": job.rollout_id,
                    "rollout_index": job.rollout_index,
                    "prompt": task.input,
                    "answer": task.target,
                    "info": task.metadata,
                }
            )
            available["state"] = state
        return await self.rubric.score(available)

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


def _is_stop(exc: BaseException) -> bool:
    """True when ``exc`` stops the run: Ctrl-C, or a cancellation of this rollout's task.

    A ``CancelledError`` the harness raised by itself (a future it awaited was
    cancelled elsewhere, say) is not one: neither an enclosing cancel scope
    nor the task itself was cancelled.
    """
    if isinstance(exc, BaseExceptionGroup):
        return any(_is_stop(sub) for sub in exc.exceptions)
    if isinstance(exc, KeyboardInterrupt):
        return True
    return isinstance(exc, anyio.get_cancelled_exc_class()) and _cancelled_here()


def _cancelled_here() -> bool:
    """True when the current task is being cancelled (a cancel scope or ``task.cancel()``)."""
    import asyncio
    import math

    if anyio.current_effective_deadline() == -math.inf:
        return True
    try:
        task = asyncio.current_task()
    except RuntimeError:  # another event loop library (trio): the scopes said it all
        return False
    return task is not None and task.cancelling() > 0


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


def group_json(group: Any) -> dict[str, Any]:
    """The groups.jsonl line of a completed group."""
    return {
        "type": "group",
        "task_id": group.task_id,
        "example_id": group.example_id,
        "rollout_ids": [r.rollout_id for r in group.rollouts],
        "rewards": group.rewards,
        "mean_reward": group.mean_reward,
        "advantages": group.advantages,
        "pass_at_k": group.pass_at_k,
    }
