"""One attempt of one rollout: its sandbox, the harness under the timeout, and scoring.

This is the part of a rollout that runs where the rollouts run: in the
driver's process with the local executor, in a worker process on a cluster
node with the Ray executor. The runner's retry loop (with backoff) calls it
once per attempt; everything else about a rollout (its record, events file,
group, the run directory) is the runner's, on the driver.

An attempt:

1. makes a sandbox when the task has execution hints or the harness says
   ``requires_sandbox`` (a start failure is error_kind ``sandbox_start``:
   retried, unless it is permanent: the sandbox refused its options or
   hints, or its tool is unavailable here); a task whose environment could
   not be prepared (a failed image build) fails at once with that error,
   never retried;
2. runs the harness under the per-rollout timeout; a raising harness (any
   exception kind, ``CancelledError`` included, unless the run itself is
   being stopped) is a failed result (``harness_exception``;
   ``harness_setup`` for a :class:`~agentkit.HarnessError`, a harness that
   cannot run here), a timeout a ``timeout`` result;
3. asks for a retry when the result is ``retryable`` (model rate limit, 5xx,
   connection, sandbox start) and this is not the last attempt;
4. otherwise scores the result with the compiled rubric (inside the sandbox),
   unless the rollout could not run (an infrastructure failure,
   :data:`~agentkit._result.INFRA_ERROR_KINDS`: no score, no reward), and
   closes the sandbox. Grading that could not run for a reason that is not
   the rollout's (a reward function raised :class:`~agentkit.GradingUnavailable`:
   the verifier's own sandbox did not start) makes it one that could not
   run, retried as a sandbox start is; grading the rollout broke
   (:class:`~agentkit.GradedAsFailure`) is scored, as a failure.

When the run is proxied (``proxy`` settings and a base URL the harness does
not override), the attempt opens a route of this process's model proxy
(:mod:`agentkit.proxy`) first: the harness's context gets the route's base
URL and key in place of the endpoint's (and no headers: the proxy adds
them), the sandbox relays the route's address, and the calls the route
recorded come back with the attempt (:attr:`Attempt.calls`). Scoring gets
the run's own context. With a ``policy`` board (a trainer that announces
policy versions, ``agentkit.service``) the route follows it: each call goes
to the current policy and is recorded with its version.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import shutil
import time
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import attrs

from agentkit._context import RunContext
from agentkit._errors import HarnessError, SandboxUnavailableError
from agentkit._executor import Attempt, EventSink, Job, PlannedTask
from agentkit._policy import PolicyBoard
from agentkit._result import HarnessResult
from agentkit._rubric import REWARD_ARGUMENTS, ScoreResult
from agentkit._sandbox import ExecutionHints
from agentkit._task import Task
from agentkit.env._rubric_compile import CompiledRubric
from agentkit.proxy import ProxySettings

if TYPE_CHECKING:
    from agentkit.proxy import ModelProxy, ProxyRoute

__all__ = ["CLOSE_TIMEOUT_SEC", "SLOW_CLOSE_SEC", "RolloutWork", "grading_outcome", "is_stop"]

#: A sandbox's close still going after this many seconds is logged (with the step it
#: is at) and waited for on, up to the run's ``sandbox_close_timeout``.
SLOW_CLOSE_SEC = 30.0
#: How long a rollout waits for its sandbox's close by default: a compose project's
#: ``docker compose down`` is bounded at 300 s itself; a close cut short leaves
#: what the sandbox runs behind.
CLOSE_TIMEOUT_SEC = 300.0


@attrs.define(kw_only=True, slots=False, eq=False, repr=False)
class RolloutWork:
    """What an attempt needs, and runs: the harness, the rubric, the context, the sandbox kind.

    The executors see it as :class:`~agentkit.executors.AttemptWork`. Picklable
    (with a picklable harness, rubric and sandbox options), so the Ray executor
    can send it to worker processes once per run.
    """

    harness: Any
    rubric: CompiledRubric
    context: RunContext
    timeout: float | None = None
    sandbox_factory: Callable[..., Any] | None = None
    sandbox_close_timeout: float = CLOSE_TIMEOUT_SEC
    keep_sandboxes: bool = False
    #: How the model proxy treats the calls (None: the run is not proxied).
    proxy: ProxySettings | None = None
    #: The policy versions a trainer announces (None: none): each route follows it.
    policy: PolicyBoard | None = None
    requires_sandbox: bool = attrs.field(init=False)
    needed: frozenset[str] = attrs.field(init=False)
    #: Tasks whose environment could not be prepared, by task id.
    prepare_errors: dict[str, BaseException] = attrs.field(init=False, factory=dict)
    # this process's model proxy, per event loop (held until aclose())
    _proxies: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, ModelProxy] = attrs.field(
        init=False, factory=weakref.WeakKeyDictionary
    )

    def __attrs_post_init__(self) -> None:
        self.requires_sandbox = bool(getattr(self.harness, "requires_sandbox", False))
        self.needed = self._needed_arguments()

    def __getstate__(self) -> dict[str, Any]:
        """Pickled (for Ray's workers) without this process's proxy."""
        state = dict(self.__dict__)
        state.pop("_proxies", None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._proxies = weakref.WeakKeyDictionary()

    @property
    def proxied(self) -> bool:
        """Whether attempts pass the model proxy: proxy settings, a base URL, and a
        harness that does not set its own (``-H base_url=...``)."""
        return (
            self.proxy is not None
            and bool(self.context.base_url)
            and not getattr(self.harness, "base_url", None)
        )

    async def model_proxy(self) -> ModelProxy:
        """This process's model proxy on the running loop, started on first use and
        held until :meth:`aclose` (a Ray worker holds it for its life)."""
        # deferred: the model proxy (its server, routes and protocols) loads only for a proxied run
        from agentkit.proxy import acquire_proxy, release_proxy

        loop = asyncio.get_running_loop()
        proxy = self._proxies.get(loop)
        if proxy is None:
            proxy = await acquire_proxy()
            if loop in self._proxies:  # another attempt got there first: one hold is enough
                await release_proxy(proxy)
            else:
                self._proxies[loop] = proxy
        return self._proxies[loop]

    async def aclose(self) -> None:
        """Let go of the model proxy this run held on the running loop (the run is over)."""
        # deferred: as in model_proxy
        from agentkit.proxy import release_proxy

        proxy = self._proxies.pop(asyncio.get_running_loop(), None)
        if proxy is not None:
            await release_proxy(proxy)

    async def open_route(self, job: Job) -> ProxyRoute | None:
        """The attempt's route through the model proxy (None: the run is not proxied)."""
        if not self.proxied:
            return None
        ctx = self.context
        assert self.proxy is not None and ctx.base_url is not None
        proxy = await self.model_proxy()
        route = proxy.open_route(
            rollout_id=job.rollout_id,
            upstream=ctx.base_url,
            api_key=ctx.resolved_api_key,
            headers=ctx.headers,
            settings=self.proxy,
        )
        if self.policy is not None:
            route.follow(self.policy)
        return route

    def _needed_arguments(self) -> frozenset[str]:
        names: set[str] = set()
        for m in self.rubric.metrics:
            if m.takes_all:
                return frozenset(REWARD_ARGUMENTS)
            names.update(m.arguments)
        return frozenset(names)

    def needs_sandbox(self, planned: PlannedTask) -> bool:
        """Whether rollouts of this task run in a sandbox."""
        return planned.hints is not None or self.requires_sandbox

    def hints_for(self, planned: PlannedTask) -> ExecutionHints:
        """The task's hints plus what the harness needs to see (``sandbox_ro_binds``)."""
        hints = planned.hints or ExecutionHints()
        extra = [b for b in self.harness_ro_binds if b not in hints.ro_binds]
        if extra:
            hints = attrs.evolve(hints, ro_binds=[*hints.ro_binds, *extra])
        return hints

    @functools.cached_property
    def harness_ro_binds(self) -> list[str]:
        """Host paths the harness asks to see read-only (its binary, say); read once."""
        return [str(b) for b in getattr(self.harness, "sandbox_ro_binds", None) or ()]

    # -- one attempt ---------------------------------------------------------
    async def attempt(
        self,
        job: Job,
        events: EventSink,
        *,
        last_attempt: bool,
        root: Path | None,
        artifacts_dir: str | None,
    ) -> Attempt:
        """Run one attempt of ``job``; ``root`` is its sandbox directory (when it needs one).

        Its model calls come back in :attr:`Attempt.calls` when the run is proxied."""
        route = await self.open_route(job)
        try:
            outcome = await self._attempt(
                job,
                events,
                last_attempt=last_attempt,
                root=root,
                artifacts_dir=artifacts_dir,
                route=route,
            )
        finally:
            calls = [] if route is None else route.close()
        outcome.calls = calls
        return outcome

    async def _attempt(
        self,
        job: Job,
        events: EventSink,
        *,
        last_attempt: bool,
        root: Path | None,
        artifacts_dir: str | None,
        route: ProxyRoute | None,
    ) -> Attempt:
        planned = job.planned
        if not self.needs_sandbox(planned):
            t = time.perf_counter()
            result = await self.run_harness(planned.task, job, events, None, artifacts_dir, route)
            harness_s = time.perf_counter() - t
            if result.retryable and not last_attempt:
                return Attempt(result, None, retry=True)
            if result.infra_error:
                return Attempt(result, None, harness_s)
            t = time.perf_counter()
            score = await self.score(planned, job, result, None, artifacts_dir)
            scoring_s = time.perf_counter() - t
            result, kept, retry = grading_outcome(result, score, last_attempt)
            return Attempt(result, kept, harness_s, scoring_s, retry=retry)
        assert root is not None
        return await self._attempt_in_sandbox(
            job,
            events,
            last_attempt=last_attempt,
            root=root,
            artifacts_dir=artifacts_dir,
            route=route,
        )

    async def _attempt_in_sandbox(
        self,
        job: Job,
        events: EventSink,
        *,
        last_attempt: bool,
        root: Path,
        artifacts_dir: str | None,
        route: ProxyRoute | None,
    ) -> Attempt:
        planned = job.planned
        factory = self.sandbox_factory
        assert factory is not None
        unprepared = self.prepare_errors.get(planned.task.task_id)
        if unprepared is not None:
            result = HarnessResult(
                status="failed",
                error=f"the task's environment could not be prepared: {unprepared}",
                error_kind=str(getattr(unprepared, "error_kind", None) or "sandbox_prepare"),
            )
            if result.infra_error:  # the rollout could not run: nothing to score
                return Attempt(result, None)
            t = time.perf_counter()
            scored = await self.score(planned, job, result, None, artifacts_dir)
            return Attempt(result, scored, 0.0, time.perf_counter() - t)
        if root.exists():
            shutil.rmtree(root, ignore_errors=True)
        sandbox: Any = None
        try:
            root.mkdir(parents=True, exist_ok=True)
            sandbox = factory(
                root=root,
                hints=self.hints_for(planned),
                rollout_id=job.rollout_id,
                # the sandbox relays the proxy's address (the endpoint's when not proxied)
                model_endpoint=self.context.base_url if route is None else route.base_url,
            )
            await sandbox.__aenter__()
        except Exception as exc:
            # permanent: the sandbox refused its options or hints (it was never
            # made), or its tool is unavailable here; retrying cannot help
            permanent = isinstance(exc, SandboxUnavailableError) or (
                sandbox is None and not isinstance(exc, OSError)
            )
            if sandbox is not None:
                await self.close_sandbox(sandbox)
            result = HarnessResult(
                status="failed",
                error=f"sandbox failed to start: {type(exc).__name__}: {exc}",
                error_kind="sandbox_start",
            )
            return Attempt(result, None, retry=not last_attempt and not permanent)
        score: ScoreResult | None = None
        scoring_s = 0.0
        try:
            t = time.perf_counter()
            result = await self.run_harness(
                planned.task, job, events, sandbox, artifacts_dir, route
            )
            harness_s = time.perf_counter() - t
            retry = result.retryable and not last_attempt
            if not retry and not result.infra_error:
                t = time.perf_counter()
                score = await self.score(planned, job, result, sandbox, artifacts_dir)
                scoring_s = time.perf_counter() - t
                result, score, retry = grading_outcome(result, score, last_attempt)
        finally:
            await self.close_sandbox(sandbox)
        return Attempt(result, score, harness_s, scoring_s, retry=retry)

    def rollout_context(
        self,
        job: Job,
        sandbox: Any,
        artifacts_dir: str | None,
        route: ProxyRoute | None = None,
    ) -> RunContext:
        """The run's context for one rollout: its id, sandbox and kept-files directory;
        with a proxy ``route``, the route's base URL and key, and no headers (the proxy
        sends the run's)."""
        ctx = self.context.evolve(
            rollout_id=job.rollout_id, sandbox=sandbox, artifacts_dir=artifacts_dir
        )
        if route is not None:
            ctx = ctx.evolve(base_url=route.base_url, api_key=route.key, headers={})
        return ctx

    async def close_sandbox(self, sandbox: Any) -> None:
        """Close a sandbox, waiting for it up to ``sandbox_close_timeout``; a failure, or
        the time running out (what the sandbox runs may then be left), is logged, not
        raised. A close still going after :data:`SLOW_CLOSE_SEC` is logged once, with
        the step it is at (the sandbox's ``close_step``), and waited for on."""
        log = logging.getLogger("agentkit")
        who = getattr(sandbox, "rollout_id", None) or type(sandbox).__name__
        with anyio.move_on_after(self.sandbox_close_timeout, shield=True) as scope:
            closing = asyncio.ensure_future(sandbox.__aexit__(None, None, None))
            try:
                slow = min(SLOW_CLOSE_SEC, self.sandbox_close_timeout)
                done, _ = await asyncio.wait({closing}, timeout=slow)
                if not done:
                    log.warning(
                        "agentkit: closing sandbox %s takes longer than %.0f s (%s); "
                        "waiting for it up to %.0f s",
                        who,
                        slow,
                        _close_step(sandbox),
                        self.sandbox_close_timeout,
                    )
                await closing
            except Exception as exc:  # closing must not lose the rollout
                log.warning("agentkit: closing a sandbox failed: %s: %s", type(exc).__name__, exc)
        if not closing.done():  # the time ran out: the close is cut short, and waited for
            closing.cancel()
            with anyio.CancelScope(shield=True):
                await asyncio.gather(closing, return_exceptions=True)
        if scope.cancelled_caught:
            log.warning(
                "agentkit: closing sandbox %s did not finish in %.0f s (%s): what it runs may "
                "be left behind (agentkit sandbox prune removes what a finished run left)",
                who,
                self.sandbox_close_timeout,
                _close_step(sandbox),
            )

    async def run_harness(
        self,
        task: Task,
        job: Job,
        events: EventSink,
        sandbox: Any,
        artifacts_dir: str | None,
        route: ProxyRoute | None = None,
    ) -> HarnessResult:
        """The harness's run under the timeout; exceptions and odd returns become results."""
        context = self.rollout_context(job, sandbox, artifacts_dir, route)
        timeout = self.timeout
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
            if is_stop(exc):
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

    async def score(
        self,
        planned: PlannedTask,
        job: Job,
        result: HarnessResult,
        sandbox: Any,
        artifacts_dir: str | None = None,
    ) -> ScoreResult:
        """Score ``result`` with the compiled rubric, passing only the arguments it takes."""
        task = planned.task
        needed = self.needed
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
            available["context"] = self.rollout_context(job, sandbox, artifacts_dir)
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


def grading_outcome(
    result: HarnessResult, score: ScoreResult, last_attempt: bool
) -> tuple[HarnessResult, ScoreResult | None, bool]:
    """``(result, score, retry)`` once scored: grading that could not run for a reason
    that is not the rollout's (a :class:`~agentkit.GradingUnavailable`: the verifier's
    sandbox did not start) makes the rollout one that could not run, with no score,
    retried as its kind is (``sandbox_start``) unless this is the last attempt."""
    if score.unavailable is None:
        return result, score, False
    kind = score.unavailable["kind"]
    failed = attrs.evolve(
        result,
        status="failed",
        error=f"grading could not run: {score.unavailable['error']}",
        error_kind=kind,
    )
    return failed, None, failed.retryable and not last_attempt


def is_stop(exc: BaseException) -> bool:
    """True when ``exc`` stops the run: Ctrl-C, or a cancellation of this rollout's task.

    A ``CancelledError`` the harness raised by itself (a future it awaited was
    cancelled elsewhere, say) is not one: neither an enclosing cancel scope
    nor the task itself was cancelled.
    """
    if isinstance(exc, BaseExceptionGroup):
        return any(is_stop(sub) for sub in exc.exceptions)
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


def _close_step(sandbox: Any) -> str:
    """What a sandbox's close is doing (its ``close_step``), for the log."""
    step = getattr(sandbox, "close_step", None)
    return f"at: {step}" if isinstance(step, str) and step else "its step unknown"
