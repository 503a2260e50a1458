"""AgentEnv: a taskset and a harness, scored by a compiled rubric, run and recorded."""

from __future__ import annotations

import contextlib
import functools
import math
import os
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from agentkit import registry
from agentkit._context import SECRET_HEADER_WORDS, RunContext
from agentkit._errors import AgentkitError, SpecError
from agentkit._events import Event
from agentkit._executor import Executor, Job, PlannedTask
from agentkit._harness import check_harness, why_unsupported
from agentkit._pricing import Price, resolve_pricing
from agentkit._redact import Redactor
from agentkit._rubric import RewardFunction, Rubric
from agentkit._taskset import Taskset
from agentkit.env._attempt import RolloutWork
from agentkit.env._live import LiveEvents
from agentkit.env._manifest import build_manifest, public_options, qualname
from agentkit.env._preflight import check_before_run
from agentkit.env._progress import ProgressBar, StatusLine
from agentkit.env._records import EvalResults, RolloutGroup, RolloutRecord
from agentkit.env._resume import diff_identity, rerun_on_resume
from agentkit.env._rubric_compile import CompiledRubric, compile_rubric
from agentkit.env._runner import Runner, RunnerOptions, group_json, make_rollout_id
from agentkit.env._scripted import SCRIPTED_PREFIX, script_path, scripted_endpoint
from agentkit.env._stats import DEFAULT_PASS_THRESHOLD
from agentkit.env._store import ResumeError, RunDirError, RunStore
from agentkit.env._summary import build_groups, summarize
from agentkit.env._unsupported import Unsupported, left_out_warning, refusal
from agentkit.executors import resolve_executor

__all__ = ["AgentEnv"]


@attrs.define(kw_only=True)
class _Prepared:
    """Everything ``evaluate`` decided before running: context, plan, manifest, jobs."""

    ctx: RunContext
    planned: list[PlannedTask]
    unsupported: list[Unsupported]
    rollouts_per_task: int
    target: Path | None
    resume: Path | None
    manifest: dict[str, Any]
    old_manifest: dict[str, Any] | None
    changes: dict[str, list[Any]]
    finished: list[RolloutRecord]
    rerun: list[RolloutRecord]
    jobs: list[Job]
    factory: Callable[..., Any] | None
    sandbox_name: str
    sandbox_warning: str | None
    pricing_note: str | None
    preflight: bool
    on_start: Callable[[dict[str, Any]], None] | None
    progress: bool
    runner_options: RunnerOptions
    event_buffer: int
    callback_drain_timeout: float
    executor: Executor


class AgentEnv:
    """Compose a taskset and a harness; own rubric compilation, orchestration and persistence.

    >>> env = AgentEnv.from_names("jsonl:tasks.jsonl", "chat")   # doctest: +SKIP
    >>> results = env.run(rollouts_per_task=4, model="m", out="runs/a")  # doctest: +SKIP

    ``rubric`` replaces the compiled main rubric (steps 1-3 of the
    compilation order) when given; ``env.add_rubric()`` adds to it.
    ``trace_callback`` receives every harness event live (see
    ``docs/agentenv.md`` for the delivery policy). ``contributors`` limits the
    registered rubric contributors used (None: all of them; ``()``: none).
    """

    def __init__(
        self,
        taskset: Any,
        harness: Any,
        rubric: Rubric | None = None,
        trace_callback: Callable[[Event], Any] | None = None,
        *,
        contributors: Iterable[str] | None = None,
        sandbox: str = "local",
        sandbox_options: dict[str, Any] | None = None,
    ) -> None:
        if not isinstance(taskset, Taskset):
            raise SpecError(
                f"taskset must be a Taskset (taskset_id, __iter__, get_task); "
                f"got {type(taskset).__name__}"
            )
        problem = check_harness(harness)
        if problem:
            raise SpecError(f"harness {type(harness).__name__} {problem}")
        self.taskset = taskset
        self.harness = harness
        self.trace_callback = trace_callback
        self.sandbox = sandbox
        self.sandbox_options = dict(sandbox_options or {})
        self._base_rubric = rubric
        self._contributor_names = None if contributors is None else list(contributors)
        self._user_rubrics: list[Rubric] = []
        self.taskset_spec: dict[str, Any] = {
            "spec": None,
            "options": {},
            "taskset_id": taskset.taskset_id,
            "class": qualname(taskset),
        }
        self.harness_spec: dict[str, Any] = {
            "name": getattr(harness, "name", None),
            "options": {},
            "class": qualname(harness),
        }
        self._rubric = self._compile()

    # -- construction --------------------------------------------------------
    @classmethod
    def from_names(
        cls,
        taskset_spec: str,
        harness: str,
        *,
        taskset_options: dict[str, Any] | None = None,
        rubric: Rubric | None = None,
        trace_callback: Callable[[Event], Any] | None = None,
        contributors: Iterable[str] | None = None,
        sandbox: str = "local",
        sandbox_options: dict[str, Any] | None = None,
        **harness_options: Any,
    ) -> AgentEnv:
        """Build from registered names: ``"provider:argument"`` and a harness name."""
        ts_options = dict(taskset_options or {})
        taskset = registry.resolve_taskset(taskset_spec, **ts_options)
        harness_obj = registry.resolve_harness(harness, **harness_options)
        env = cls(
            taskset,
            harness_obj,
            rubric=rubric,
            trace_callback=trace_callback,
            contributors=contributors,
            sandbox=sandbox,
            sandbox_options=sandbox_options,
        )
        provider, _ = registry.parse_taskset_spec(taskset_spec)
        ts_reg = registry.get("taskset", provider)
        h_reg = registry.get("harness", harness)
        env.taskset_spec.update(
            spec=taskset_spec,
            options=public_options(ts_options),
            distribution=ts_reg.distribution,
            version=ts_reg.version,
        )
        env.harness_spec.update(
            name=harness,
            options=public_options(harness_options),
            distribution=h_reg.distribution,
            version=h_reg.version,
        )
        return env

    def _compile(self) -> CompiledRubric:
        if self._base_rubric is not None:
            compiled = CompiledRubric()
            rubric = self._base_rubric
            compiled.extend(
                rubric,
                namespace=rubric.name or "core",
                source="user",
                origin=f"AgentEnv(rubric=...) (namespace {rubric.name or 'core'!r})",
            )
            for i, extra in enumerate(self._user_rubrics):
                compiled.add_user(extra, index=i)
            return compiled

        return compile_rubric(
            self.taskset,
            self.harness,
            contributors=registry.resolve_rubric_contributors(self._contributor_names),
            user_rubrics=self._user_rubrics,
        )

    def add_rubric(
        self, rubric: Rubric | RewardFunction | Callable[..., Any] | Sequence[Any]
    ) -> AgentEnv:
        """Add a user rubric (namespace: its ``name``, or ``user``); collisions are errors."""
        if not isinstance(rubric, Rubric):
            items = list(rubric) if isinstance(rubric, Sequence) else [rubric]
            rubric = Rubric(items)
        self._user_rubrics.append(rubric)
        try:
            self._rubric = self._compile()
        except AgentkitError:
            self._user_rubrics.pop()
            raise
        return self

    def describe_rubric(self) -> dict[str, Any]:
        """The compiled rubric as JSON: every metric, its namespace, weight and origin."""
        return self._rubric.manifest()

    @property
    def rubric(self) -> CompiledRubric:
        """The compiled rubric."""
        return self._rubric

    # -- running -------------------------------------------------------------
    def run(self, **options: Any) -> EvalResults:
        """Synchronous :meth:`evaluate` (not from inside a running event loop)."""
        import anyio

        try:
            import sniffio

            sniffio.current_async_library()
        except Exception:
            return anyio.run(functools.partial(self.evaluate, **options))
        raise AgentkitError(
            "AgentEnv.run() was called inside a running event loop; use 'await env.evaluate()'"
        )

    async def generate(self, **options: Any) -> list[RolloutGroup]:
        """Run rollouts for training: complete groups with GRPO advantages; prints nothing."""
        options.setdefault("progress", False)
        results = await self.evaluate(**options)
        return results.groups

    async def evaluate(self, **options: Any) -> EvalResults:
        """Run ``rollouts_per_task`` rollouts of every selected task and score them.

        ``out`` (or ``run_dir``) writes a run directory; ``resume`` continues
        one (only missing rollouts run, and rollouts that could not run are
        run again). Without either, nothing is written. Before the first
        rollout a preflight checks the model endpoint, the API key, the
        harness and the sandbox (``preflight=False`` skips it). ``executor``
        says where the rollouts run (``"local"``, ``"ray"`` with
        ``ray_address``, or an :class:`agentkit.executors.Executor`; see
        docs/distributed.md). See docs/agentenv.md for every option.
        """
        prep = self._prepare(**options)
        async with contextlib.AsyncExitStack() as stack:
            ctx = prep.ctx
            if ctx.model and ctx.model.startswith(SCRIPTED_PREFIX):
                name, url = stack.enter_context(scripted_endpoint(ctx.model))
                ctx = ctx.evolve(model=name, base_url=url)
            return await self._execute(prep, ctx)
        raise AssertionError("unreachable")  # pragma: no cover - the stack does not swallow

    def plan(self, **options: Any) -> dict[str, Any]:
        """What :meth:`evaluate` would run with these options, running nothing (``--dry-run``).

        The tasks, harness, sandbox, model settings, limits, how many
        rollouts are planned, already finished (on resume) and to run.
        Nothing is contacted, created or modified.
        """
        prep = self._prepare(**options)
        manifest = prep.manifest
        return {
            "run_dir": None if prep.target is None else str(prep.target),
            "resume": prep.resume is not None,
            "taskset": manifest["taskset"],
            "harness": manifest["harness"],
            "tasks": [p.task.task_id for p in prep.planned],
            "unsupported": [u.to_json() for u in prep.unsupported],
            "unsupported_warning": self._left_out(prep),
            "rollouts_per_task": prep.rollouts_per_task,
            "planned": len(prep.planned) * prep.rollouts_per_task,
            "already_finished": len(prep.finished),
            "to_run": len(prep.jobs),
            "rerun": len(prep.rerun),
            "sandbox": manifest["sandbox"],
            "sandbox_warning": manifest["sandbox_warning"],
            "context": manifest["context"],
            "pricing": manifest["pricing"],
            "options": manifest["options"],
            "resume_changes": prep.changes,
        }

    def _prepare(
        self,
        *,
        rollouts_per_task: int = 1,
        concurrency: int = 8,
        limit: int | None = None,
        task_ids: Sequence[str] | None = None,
        timeout: float | None = None,
        max_retries: int = 3,
        out: str | os.PathLike[str] | None = None,
        run_dir: str | os.PathLike[str] | None = None,
        resume: str | os.PathLike[str] | None = None,
        retry_errors: bool = False,
        model: str | None = None,
        base_url: str | None = None,
        api_key_env: str | None = None,
        sampling_args: dict[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
        max_tokens: int | None = None,
        max_turns: int | None = None,
        token_limit: int | None = None,
        cost_limit: float | None = None,
        message_limit: int | None = None,
        run_token_limit: int | None = None,
        run_cost_limit: float | None = None,
        price: Price | Mapping[str, float] | None = None,
        context: RunContext | None = None,
        sandbox: str | None = None,
        sandbox_options: dict[str, Any] | None = None,
        keep_sandboxes: bool = False,
        allow_network: bool = False,
        pass_threshold: float = DEFAULT_PASS_THRESHOLD,
        normalize_advantages: bool = False,
        progress: bool = False,
        retry_base_delay: float = 0.5,
        retry_max_delay: float = 30.0,
        event_buffer: int = 1000,
        callback_drain_timeout: float = 5.0,
        preflight: bool = True,
        check_model_server: bool | None = None,
        on_start: Callable[[dict[str, Any]], None] | None = None,
        executor: str | Executor = "local",
        ray_address: str | None = None,
    ) -> _Prepared:
        if rollouts_per_task < 1:
            raise SpecError(f"rollouts_per_task must be at least 1, got {rollouts_per_task}")
        if concurrency < 1:
            raise SpecError(f"concurrency must be at least 1, got {concurrency}")
        if max_retries < 0:
            raise SpecError(f"max_retries must be 0 or more, got {max_retries}")
        if limit is not None and limit < 0:
            raise SpecError(f"limit must be 0 or more, got {limit}")
        if timeout is not None and not (math.isfinite(timeout) and timeout > 0):
            raise SpecError(f"timeout must be a number of seconds above 0, got {timeout!r}")
        if not math.isfinite(pass_threshold):
            raise SpecError(f"pass_threshold must be a finite number, got {pass_threshold!r}")
        for name, seconds in (
            ("retry_base_delay", retry_base_delay),
            ("retry_max_delay", retry_max_delay),
            ("callback_drain_timeout", callback_drain_timeout),
        ):
            if not (math.isfinite(seconds) and seconds >= 0):
                raise SpecError(f"{name} must be a number of seconds (0 or more), got {seconds!r}")
        for name, value in (
            ("max_tokens", max_tokens),
            ("max_turns", max_turns),
            ("token_limit", token_limit),
            ("message_limit", message_limit),
            ("run_token_limit", run_token_limit),
        ):
            if value is not None and value < 1:
                raise SpecError(f"{name} must be at least 1, got {value}")
        for name, cost in (("cost_limit", cost_limit), ("run_cost_limit", run_cost_limit)):
            if cost is not None and not (math.isfinite(cost) and cost > 0):
                raise SpecError(f"{name} must be more than 0 (USD), got {cost:g}")
        if out is not None and run_dir is not None and Path(out) != Path(run_dir):
            raise SpecError("give either out= or run_dir=, not both")
        target = out if out is not None else run_dir
        if resume is not None and target is not None and Path(resume) != Path(target):
            raise SpecError("give either resume= (an existing run) or out= (a new run), not both")
        if check_model_server is not None:  # the earlier name of ``preflight``
            preflight = check_model_server

        run_executor = resolve_executor(executor, ray_address=ray_address)
        if isinstance(price, Mapping):
            price = Price.parse(price)
        ctx = self._context(
            context,
            model,
            base_url,
            api_key_env,
            sampling_args,
            timeout,
            headers=headers,
            limits={
                "max_tokens": max_tokens,
                "max_turns": max_turns,
                "token_limit": token_limit,
                "cost_limit": cost_limit,
                "message_limit": message_limit,
            },
            concurrency=concurrency,
        )
        if ctx.model and ctx.model.startswith(SCRIPTED_PREFIX):
            script_path(ctx.model)  # a clear error now, not after the plan
        pricing, pricing_note = resolve_pricing(ctx.model, ctx.base_url, price)
        ctx = ctx.evolve(pricing=pricing)
        planned, unsupported = self._plan(limit, task_ids)
        sandbox_name = sandbox or self.sandbox
        sb_options = dict(self.sandbox_options)
        sb_options.update(sandbox_options or {})
        if allow_network:
            sb_options["allow_network"] = True
        factory, sandbox_warning = self._sandbox_factory(planned, sandbox_name, sb_options)
        manifest = build_manifest(
            self,
            ctx,
            planned,
            rollouts_per_task,
            limit,
            task_ids,
            sandbox_name,
            sb_options,
            factory is not None,
            sandbox_warning,
            {
                "concurrency": concurrency,
                "timeout": timeout,
                "max_retries": max_retries,
                "keep_sandboxes": keep_sandboxes,
                "pass_threshold": pass_threshold,
                "normalize_advantages": normalize_advantages,
                "retry_base_delay": retry_base_delay,
                "run_token_limit": run_token_limit,
                "run_cost_limit": run_cost_limit,
                "executor": run_executor.name,
            },
        )
        manifest["pricing"] = None if pricing is None else pricing.describe()
        manifest["plan"]["unsupported"] = [u.to_json() for u in unsupported]
        finished: list[RolloutRecord] = []
        rerun: list[RolloutRecord] = []
        changes: dict[str, list[Any]] = {}
        old: dict[str, Any] | None = None
        if resume is not None:
            store = RunStore(Path(resume))
            old = store.read_manifest()
            differences, changes = diff_identity(old, manifest)
            if differences:
                raise ResumeError(
                    f"cannot resume {resume}: it was started with other settings that change "
                    "results; " + "; ".join(differences)
                )
            loaded, _note = store.load_rollouts(repair=False)
            wanted = {(p.task.task_id, i) for p in planned for i in range(rollouts_per_task)}
            for rec in loaded:
                if (rec.task_id, rec.rollout_index) not in wanted:
                    continue
                if rerun_on_resume(rec, retry_errors=retry_errors):
                    rerun.append(rec)
                else:
                    finished.append(rec)
        done = {(r.task_id, r.rollout_index) for r in finished}
        jobs = [
            Job(p, i, make_rollout_id(p.task.task_id, i))
            for p in planned
            for i in range(rollouts_per_task)
            if (p.task.task_id, i) not in done
        ]
        return _Prepared(
            ctx=ctx,
            planned=planned,
            unsupported=unsupported,
            rollouts_per_task=rollouts_per_task,
            target=None if resume is not None else (None if target is None else Path(target)),
            resume=None if resume is None else Path(resume),
            manifest=manifest,
            old_manifest=old,
            changes=changes,
            finished=finished,
            rerun=rerun,
            jobs=jobs,
            factory=factory,
            sandbox_name=sandbox_name,
            sandbox_warning=sandbox_warning,
            pricing_note=pricing_note,
            preflight=preflight,
            on_start=on_start,
            progress=progress,
            runner_options=RunnerOptions(
                rollouts_per_task=rollouts_per_task,
                concurrency=concurrency,
                timeout=timeout,
                max_retries=max_retries,
                retry_base_delay=retry_base_delay,
                retry_max_delay=retry_max_delay,
                keep_sandboxes=keep_sandboxes,
                pass_threshold=pass_threshold,
                normalize_advantages=normalize_advantages,
                sandbox_factory=factory,
                run_token_limit=run_token_limit,
                run_cost_limit=run_cost_limit,
            ),
            event_buffer=event_buffer,
            callback_drain_timeout=callback_drain_timeout,
            executor=run_executor,
        )

    async def _execute(self, prep: _Prepared, ctx: RunContext) -> EvalResults:
        import anyio

        opts = prep.runner_options
        work = RolloutWork(
            harness=self.harness,
            rubric=self._rubric,
            context=ctx,
            timeout=opts.timeout,
            sandbox_factory=prep.factory,
            sandbox_close_timeout=opts.sandbox_close_timeout,
            keep_sandboxes=opts.keep_sandboxes,
        )
        executor = prep.executor
        await executor.open(work, run_dir=prep.resume or prep.target)
        try:
            return await self._execute_on(prep, ctx, executor, work)
        finally:
            with anyio.CancelScope(shield=True):
                await executor.close()

    async def _execute_on(
        self, prep: _Prepared, ctx: RunContext, executor: Executor, work: RolloutWork
    ) -> EvalResults:
        # the API key, secret-looking host variables and headers, values plugins register
        secret_headers = [
            v for k, v in ctx.headers.items() if any(w in k.lower() for w in SECRET_HEADER_WORDS)
        ]
        redactor = Redactor.for_run(ctx.resolved_api_key, extra=secret_headers)
        opts = prep.runner_options
        planned = prep.planned
        check = functools.partial(
            check_before_run,
            harness=self.harness,
            ctx=ctx,
            sandbox_name=prep.sandbox_name,
            factory=prep.factory,
            first=next((p for p in planned if p.hints is not None), planned[0]),
            preflight=prep.preflight and bool(prep.jobs),
        )
        kind_warning, warnings = await executor.check(check, sandboxed=prep.factory is not None)
        if kind_warning:
            prep.sandbox_warning = "; ".join(w for w in (prep.sandbox_warning, kind_warning) if w)
            prep.manifest["sandbox_warning"] = prep.sandbox_warning
        manifest = prep.manifest
        store, repair_note = _open_store(prep, redactor)
        finished = prep.finished
        try:
            if store is not None and prep.resume is not None:
                # a kill between a group's last rollout line and its group line, or a
                # group that changed (more rollouts per task)
                stored_groups = store.load_groups(repair=True)
                for group in build_groups(
                    finished,
                    opts.rollouts_per_task,
                    threshold=opts.pass_threshold,
                    normalize=opts.normalize_advantages,
                ):
                    line = stored_groups.get(group.task_id)
                    if line is None or line.get("rollout_ids") != [
                        r.rollout_id for r in group.rollouts
                    ]:
                        store.append_group(group_json(group))
            if store is not None:
                store.write_manifest(manifest)
                store.write_tasks(planned)
            wanted = len(planned) * opts.rollouts_per_task
            info = {
                "run_dir": None if store is None else str(store.run_dir),
                "planned": wanted,
                "tasks": len(planned),
                "rollouts_per_task": opts.rollouts_per_task,
                "already_finished": len(finished),
                "to_run": len(prep.jobs),
                "rerun": len(prep.rerun),
                "sandbox_warning": prep.sandbox_warning,
                "repair_note": repair_note,
                "pricing_note": prep.pricing_note,
                "preflight_warnings": warnings,
                "unsupported_warning": self._left_out(prep),
                "resume_changes": prep.changes,
                "taskset_problems": [str(p) for p in getattr(self.taskset, "problems", None) or []],
            }
            if prep.on_start is not None:
                prep.on_start(info)

            live = LiveEvents(
                self.trace_callback,
                buffer=prep.event_buffer,
                drain_timeout=prep.callback_drain_timeout,
            )
            bar = None
            if prep.progress:
                bar = ProgressBar(wanted, done=len(finished))
            runner = Runner(
                work=work,
                executor=executor,
                jobs=prep.jobs,
                options=opts,
                store=store,
                live=live,
                progress=bar,
                finished=finished,
            )
        except BaseException:
            if store is not None:
                store.close()
            raise
        started = time.perf_counter()
        interrupted = True
        try:
            await _prepare_environments(runner, prep.progress)
            if bar is not None:
                with bar:
                    await runner.run()
            else:
                await runner.run()
            interrupted = False
        finally:
            elapsed = time.perf_counter() - started
            records = sorted(runner.records, key=lambda r: (r.group, r.rollout_index))
            groups = build_groups(
                records,
                opts.rollouts_per_task,
                threshold=opts.pass_threshold,
                normalize=opts.normalize_advantages,
            )
            summary = summarize(
                records,
                [(p.task.task_id, p.example_id) for p in planned],
                opts.rollouts_per_task,
                threshold=opts.pass_threshold,
                complete=len(records) >= wanted,
                interrupted=interrupted,
                extra={
                    "run_dir": None if store is None else str(store.run_dir),
                    "stopped": runner.stop_reason,
                    "this_session": {
                        "ran": len(runner.records) - len(finished),
                        "resumed_from": len(finished),
                        "rerun": len(prep.rerun),
                        "duration_s": elapsed,
                        "executor": executor.describe(),
                    },
                    "trace_callback": live.report(),
                    "sandbox_warning": prep.sandbox_warning,
                    "repair_note": repair_note,
                    "pricing_note": prep.pricing_note,
                    "unsupported_tasks": [u.to_json() for u in prep.unsupported],
                },
                breakdowns=_breakdowns(self.taskset, planned),
            )
            # the summary is printed (results table, --json): no secret in it either
            summary = redactor.json(summary)
            if store is not None:
                if prep.factory is not None:
                    for rec in runner.records[len(finished) :]:
                        if rec.ok and not opts.keep_sandboxes:
                            store.remove_sandbox_dir(rec.rollout_id)
                        else:  # kept sandbox files are part of the run directory too
                            store.scrub_files(store.sandbox_root(rec.rollout_id))
                    store.remove_empty_sandbox_parent()
                try:
                    store.write_summary(summary)
                except RunDirError:
                    # the run already stops with an error (a full disk): that one is
                    # reported; the summary is derived data that `show` recomputes
                    if not interrupted:
                        raise
                finally:
                    store.close()
        return EvalResults(
            rollouts=records,
            groups=groups,
            summary=summary,
            run_dir=None if store is None else store.run_dir,
        )

    # -- helpers ---------------------------------------------------------------
    def _context(
        self,
        context: RunContext | None,
        model: str | None,
        base_url: str | None,
        api_key_env: str | None,
        sampling_args: dict[str, Any] | None,
        timeout: float | None,
        *,
        headers: Mapping[str, str] | None = None,
        limits: Mapping[str, Any] | None = None,
        concurrency: int | None = None,
    ) -> RunContext:
        ctx = context or RunContext()
        changes: dict[str, Any] = {}
        if model is not None:
            changes["model"] = model
        if base_url is not None:
            changes["base_url"] = base_url
        if sampling_args is not None:
            changes["sampling_args"] = dict(sampling_args)
        if headers:
            changes["headers"] = {**ctx.headers, **{str(k): str(v) for k, v in headers.items()}}
        limit_changes = {k: v for k, v in (limits or {}).items() if v is not None}
        if timeout is not None and ctx.limits.timeout_sec is None:
            limit_changes["timeout_sec"] = timeout
        if limit_changes:
            changes["limits"] = attrs.evolve(ctx.limits, **limit_changes)
        if concurrency is not None and ctx.max_connections is None:
            changes["max_connections"] = concurrency
        if api_key_env is not None:
            if api_key_env not in os.environ:
                raise SpecError(
                    f"environment variable {api_key_env!r} (given as the API key variable) "
                    "is not set"
                )
            changes["api_key_env"] = api_key_env
            changes["api_key"] = os.environ[api_key_env]
        elif ctx.api_key is None and ctx.api_key_env in os.environ:
            changes["api_key"] = os.environ[ctx.api_key_env]
        return ctx.evolve(**changes) if changes else ctx

    def _plan(
        self, limit: int | None, task_ids: Sequence[str] | None
    ) -> tuple[list[PlannedTask], list[Unsupported]]:
        """The selected tasks the harness runs, in order, and those it cannot run (left
        out; a SpecError when it can run none of them)."""
        tasks: list[Any]
        if task_ids:
            tasks = []
            for tid in dict.fromkeys(task_ids):
                try:
                    tasks.append(self.taskset.get_task(tid))
                except KeyError as exc:
                    msg = exc.args[0] if exc.args else tid
                    raise SpecError(f"unknown task {tid!r}: {msg}") from None
        else:
            tasks = []
            for task in self.taskset:
                if limit is not None and len(tasks) >= limit:
                    break
                tasks.append(task)
        if task_ids and limit is not None:
            tasks = tasks[:limit]
        planned: list[PlannedTask] = []
        unsupported: list[Unsupported] = []
        seen: set[str] = set()
        for task in tasks:
            task.require_payload()
            if task.task_id in seen:
                raise SpecError(f"task {task.task_id!r} appears twice in the taskset")
            seen.add(task.task_id)
            reason = why_unsupported(self.harness, task)
            if reason is not None:
                unsupported.append(Unsupported(task.task_id, reason))
                continue
            hints = self.taskset.execution_hints(task)
            planned.append(PlannedTask(task, len(planned), task.item_id, hints))
        if not planned and unsupported:  # the pairing itself cannot run
            raise SpecError(refusal(self._harness_name(), self._taskset_name(), unsupported))
        if not planned:
            problems = list(getattr(self.taskset, "problems", []) or [])
            detail = (
                f"; {len(problems)} failed to load:\n" + "\n".join(f"  {p}" for p in problems)
                if problems
                else ""
            )
            raise SpecError(f"no tasks to run in taskset {self.taskset.taskset_id!r}{detail}")
        return planned, unsupported

    def _left_out(self, prep: _Prepared) -> str | None:
        """The warning about selected tasks the harness cannot run (None: there are none)."""
        if not prep.unsupported:
            return None
        total = len(prep.planned) + len(prep.unsupported)
        return left_out_warning(self._harness_name(), prep.unsupported, total)

    def _harness_name(self) -> str:
        return str(self.harness_spec.get("name") or type(self.harness).__name__)

    def _taskset_name(self) -> str:
        return str(self.taskset_spec.get("spec") or self.taskset.taskset_id)

    def _sandbox_factory(
        self, planned: list[PlannedTask], name: str, options: dict[str, Any]
    ) -> tuple[Callable[..., Any] | None, str | None]:
        needed = bool(getattr(self.harness, "requires_sandbox", False)) or any(
            p.hints is not None for p in planned
        )
        if not needed:
            if options:  # unused this time, but a bad value is still an error
                registry.resolve_sandbox(name, **options)
            return None, None

        factory = registry.resolve_sandbox(name, **options)
        target = getattr(factory, "func", factory)
        warning = getattr(target, "warning", None) or getattr(target, "WARNING", None)
        return factory, warning if isinstance(warning, str) else None


async def _prepare_environments(runner: Runner, progress: bool) -> None:
    """The sandbox kind's preparation (image builds), with a live line when ``progress``."""
    if not progress:
        await runner.prepare()
        return

    with StatusLine() as line:
        await runner.prepare(line.update)


def _open_store(prep: _Prepared, redactor: Redactor) -> tuple[RunStore | None, str | None]:
    """Open the run directory: a new one at ``prep.target``, or ``prep.resume``.

    Returns the store (None: no persistence) and a note about a repaired torn line.
    """
    if prep.resume is None:
        if prep.target is None:
            return None, None
        store = RunStore(prep.target, redactor=redactor)
        if store.manifest_path.exists():
            raise RunDirError(
                f"{prep.target} already holds a run; resume it with --resume {prep.target} "
                "(resume=...) or choose another directory"
            )
        store.open()
        return store, None
    store = RunStore(prep.resume, redactor=redactor)
    store.open()
    try:
        _records, repair_note = store.load_rollouts(repair=True)
    except BaseException:
        store.close()
        raise
    old = prep.old_manifest or {}
    manifest = prep.manifest
    manifest["created_at"] = old.get("created_at", manifest["created_at"])
    now = time.time()
    manifest["resumed_at"] = [*old.get("resumed_at", []), now]
    resumes = list(old.get("resumes") or [])
    resumes.append(
        {
            "at": now,
            "rerun": [r.rollout_id for r in prep.rerun],
            "changed": {k: {"was": v[0], "now": v[1]} for k, v in prep.changes.items()},
        }
    )
    manifest["resumes"] = resumes
    return store, repair_note


def _breakdowns(taskset: Any, planned: Sequence[PlannedTask]) -> dict[str, dict[str, str]]:
    """Each of the taskset's ``summary_keys`` mapped to every planned task's value of it."""
    out: dict[str, dict[str, str]] = {}
    for key in getattr(taskset, "summary_keys", ()) or ():
        values = {
            p.task.task_id: str(p.task.metadata[key])
            for p in planned
            if p.task.metadata.get(key) is not None
        }
        if values:
            out[str(key)] = values
    return out
