"""One run of an AgentEnv, prepared: its context, plan, manifest, resume state and jobs.

:func:`prepare` turns an environment and its :class:`~agentkit.RunOptions`
into a :class:`Session` without contacting, creating or modifying anything:
the :class:`~agentkit.RunContext` the harness gets, the tasks selected (and
those the harness cannot run, left out), the sandbox kind, the manifest, and
on resume what already finished and what runs again. ``AgentEnv.plan``
describes a session (:meth:`Session.describe`); ``AgentEnv.evaluate`` runs
one (:mod:`agentkit.env._execute`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import attrs

from agentkit import registry
from agentkit._context import RunContext
from agentkit._errors import SpecError
from agentkit._events import Event
from agentkit._executor import Executor, Job, PlannedTask
from agentkit._harness import why_unsupported
from agentkit._limits import check_rollouts, max_rollouts
from agentkit._policy import PolicyBoard
from agentkit._pricing import resolve_pricing
from agentkit._redact import Redactor
from agentkit._run_options import RunOptions
from agentkit._taskset import Taskset
from agentkit.env._attempt import RolloutWork
from agentkit.env._manifest import build_manifest
from agentkit.env._resume import ResumeError, diff_identity, rerun_on_resume
from agentkit.env._rubric_compile import CompiledRubric
from agentkit.env._runner import RunnerOptions, make_rollout_id
from agentkit.env._scripted import SCRIPTED_PREFIX, script_path
from agentkit.env._unsupported import Unsupported, left_out_warning, refusal
from agentkit.executors import resolve_executor
from agentkit.rundir import RolloutRecord, RunStore

__all__ = ["Composition", "Session", "prepare"]


class Composition(Protocol):
    """What a session uses of its :class:`~agentkit.AgentEnv`."""

    taskset: Taskset
    harness: Any
    trace_callback: Callable[[Event], Any] | None
    sandbox: str
    sandbox_options: dict[str, Any]
    taskset_spec: dict[str, Any]
    harness_spec: dict[str, Any]

    @property
    def rubric(self) -> CompiledRubric: ...

    def describe_rubric(self) -> dict[str, Any]: ...


@attrs.define(kw_only=True)
class Session:
    """Everything decided before a run: context, plan, manifest, resume state, jobs."""

    env: Composition
    options: RunOptions
    ctx: RunContext
    planned: list[PlannedTask]
    unsupported: list[Unsupported]
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
    runner_options: RunnerOptions
    executor: Executor

    @property
    def rollouts_per_task(self) -> int:
        """Rollouts of each planned task."""
        return self.options.rollouts_per_task

    def rollout_work(self, ctx: RunContext, *, policy: PolicyBoard | None = None) -> RolloutWork:
        """What every attempt of the run gets: the harness, the rubric, ``ctx``, the
        sandbox kind, the model proxy's settings (``policy``: the routes of a rollout
        service)."""
        opts = self.runner_options
        return RolloutWork(
            harness=self.env.harness,
            rubric=self.env.rubric,
            context=ctx,
            timeout=opts.timeout,
            sandbox_factory=self.factory,
            sandbox_close_timeout=opts.sandbox_close_timeout,
            keep_sandboxes=opts.keep_sandboxes,
            proxy=self.options.proxy_settings(),
            policy=policy,
        )

    def left_out(self) -> str | None:
        """The warning about selected tasks the harness cannot run (None: there are none)."""
        if not self.unsupported:
            return None
        total = len(self.planned) + len(self.unsupported)
        return left_out_warning(harness_name(self.env), self.unsupported, total)

    def describe(self) -> dict[str, Any]:
        """What the run would do, as JSON (``AgentEnv.plan``, ``agentkit run --dry-run``)."""
        manifest = self.manifest
        return {
            "run_dir": None if self.target is None else str(self.target),
            "resume": self.resume is not None,
            "taskset": manifest["taskset"],
            "harness": manifest["harness"],
            "tasks": [p.task.task_id for p in self.planned],
            "unsupported": [u.to_json() for u in self.unsupported],
            "unsupported_warning": self.left_out(),
            "rollouts_per_task": self.rollouts_per_task,
            "planned": len(self.planned) * self.rollouts_per_task,
            "already_finished": len(self.finished),
            "to_run": len(self.jobs),
            "rerun": len(self.rerun),
            "sandbox": manifest["sandbox"],
            "sandbox_warning": manifest["sandbox_warning"],
            "context": manifest["context"],
            "pricing": manifest["pricing"],
            "options": manifest["options"],
            "resume_changes": self.changes,
        }


def harness_name(env: Composition) -> str:
    """The harness's registered name, else its class name (for messages)."""
    return str(env.harness_spec.get("name") or type(env.harness).__name__)


def prepare(
    env: Composition, options: RunOptions, *, budget: tuple[int, str] | None = None
) -> Session:
    """Plan a run of ``env`` with ``options``; contacts, creates and modifies nothing.

    ``budget``: the rollouts this run may plan when others of this process planned
    some (a job's cells), and what took the rest; by default ``max_rollouts()``."""
    opts = options
    run_executor = resolve_executor(opts.executor, ray_address=opts.ray_address)
    ctx = run_context(opts)
    if ctx.model and ctx.model.startswith(SCRIPTED_PREFIX):
        script_path(ctx.model)  # a clear error now, not after the plan
    pricing, pricing_note = resolve_pricing(ctx.model, ctx.base_url, opts.price)
    ctx = ctx.evolve(pricing=pricing)
    planned, unsupported = select_counted(
        env, opts.limit, opts.task_ids, opts.rollouts_per_task, budget=budget
    )
    sandbox_name = opts.sandbox or env.sandbox
    sb_options = dict(env.sandbox_options)
    sb_options.update(opts.sandbox_options or {})
    if opts.allow_network:
        sb_options["allow_network"] = True
    factory, sandbox_warning = sandbox_factory(env, planned, sandbox_name, sb_options)
    manifest = build_manifest(
        env,
        ctx,
        planned,
        opts.rollouts_per_task,
        opts.limit,
        opts.task_ids,
        sandbox_name,
        sb_options,
        factory is not None,
        sandbox_warning,
        _manifest_options(opts, run_executor.name),
    )
    manifest["pricing"] = None if pricing is None else pricing.describe()
    manifest["plan"]["unsupported"] = [u.to_json() for u in unsupported]
    resumed = _Resumed()
    if opts.resume is not None:
        resumed = _resumed(opts, opts.resume, ctx, manifest, planned)
    done = {(r.task_id, r.rollout_index) for r in resumed.finished}
    jobs = [
        Job(p, i, make_rollout_id(p.task.task_id, i))
        for p in planned
        for i in range(opts.rollouts_per_task)
        if (p.task.task_id, i) not in done
    ]
    return Session(
        env=env,
        options=opts,
        ctx=ctx,
        planned=planned,
        unsupported=unsupported,
        target=opts.out if opts.resume is None else None,
        resume=opts.resume,
        manifest=manifest,
        old_manifest=resumed.old,
        changes=resumed.changes,
        finished=resumed.finished,
        rerun=resumed.rerun,
        jobs=jobs,
        factory=factory,
        sandbox_name=sandbox_name,
        sandbox_warning=sandbox_warning,
        pricing_note=pricing_note,
        runner_options=_runner_options(opts, factory),
        executor=run_executor,
    )


def _manifest_options(opts: RunOptions, executor: str) -> dict[str, Any]:
    """The run options the manifest records (``options``)."""
    return {
        "concurrency": opts.concurrency,
        "timeout": opts.timeout,
        "max_retries": opts.max_retries,
        "keep_sandboxes": opts.keep_sandboxes,
        "pass_threshold": opts.pass_threshold,
        "normalize_advantages": opts.normalize_advantages,
        "retry_base_delay": opts.retry_base_delay,
        "run_token_limit": opts.run_token_limit,
        "run_cost_limit": opts.run_cost_limit,
        "executor": executor,
        "model_proxy": opts.model_proxy,
        "token_ids": opts.token_ids,
        "session_header": opts.session_header,
        "cache_salt": opts.cache_salt,
        "translate_to_chat": opts.translate_to_chat,
    }


@attrs.frozen
class _Resumed:
    """What a resumed run brings: its stored manifest, the settings that changed, the
    rollouts that finished and those that run again (all empty for a new run)."""

    old: dict[str, Any] | None = None
    changes: dict[str, list[Any]] = attrs.field(factory=dict)
    finished: list[RolloutRecord] = attrs.field(factory=list)
    rerun: list[RolloutRecord] = attrs.field(factory=list)


def _resumed(
    opts: RunOptions,
    resume: Path,
    ctx: RunContext,
    manifest: dict[str, Any],
    planned: list[PlannedTask],
) -> _Resumed:
    """The run at ``resume``, read: refused when it was started with settings that change
    results; its rollouts of the planned tasks, finished or to run again."""
    store = RunStore(resume)
    old = store.read_manifest()
    # the stored manifest was redacted as it was written (a secret sampling argument
    # is ***): compare it with this one redacted the same way
    public = Redactor.for_run(ctx.resolved_api_key).json(manifest)
    differences, changes = diff_identity(old, public)
    if differences:
        raise ResumeError(
            f"cannot resume {resume}: it was started with other settings that change "
            "results; " + "; ".join(differences)
        )
    loaded, _note = store.load_rollouts(repair=False)
    wanted = {(p.task.task_id, i) for p in planned for i in range(opts.rollouts_per_task)}
    finished: list[RolloutRecord] = []
    rerun: list[RolloutRecord] = []
    for rec in loaded:
        if (rec.task_id, rec.rollout_index) not in wanted:
            continue
        if rerun_on_resume(rec, retry_errors=opts.retry_errors):
            rerun.append(rec)
        else:
            finished.append(rec)
    return _Resumed(old, changes, finished, rerun)


def _runner_options(opts: RunOptions, factory: Callable[..., Any] | None) -> RunnerOptions:
    """What the runner takes of the run's options: each of the same name as one of its
    own (the retries, the limits, ...), and the sandbox factory."""
    names = {f.name for f in attrs.fields(RunnerOptions)} & {
        f.name for f in attrs.fields(RunOptions)
    }
    return RunnerOptions(**{name: getattr(opts, name) for name in names}, sandbox_factory=factory)


def run_context(opts: RunOptions) -> RunContext:
    """The context the harness receives: ``opts.context`` (or a new one) with the
    options' model settings and limits; the API key read from its variable."""
    ctx = opts.context or RunContext()
    changes: dict[str, Any] = {}
    if opts.model is not None:
        changes["model"] = opts.model
    if opts.base_url is not None:
        changes["base_url"] = opts.base_url
    if opts.sampling_args is not None:
        changes["sampling_args"] = dict(opts.sampling_args)
    if opts.headers:
        changes["headers"] = {**ctx.headers, **opts.headers}
    limits: Mapping[str, Any] = {
        "max_tokens": opts.max_tokens,
        "max_turns": opts.max_turns,
        "token_limit": opts.token_limit,
        "cost_limit": opts.cost_limit,
        "message_limit": opts.message_limit,
    }
    limit_changes = {k: v for k, v in limits.items() if v is not None}
    if opts.timeout is not None and ctx.limits.timeout_sec is None:
        limit_changes["timeout_sec"] = opts.timeout
    if limit_changes:
        changes["limits"] = attrs.evolve(ctx.limits, **limit_changes)
    if ctx.max_connections is None:
        changes["max_connections"] = opts.concurrency
    api_key_env = opts.api_key_env
    if api_key_env is not None:
        if api_key_env not in os.environ:
            raise SpecError(
                f"environment variable {api_key_env!r} (given as the API key variable) is not set"
            )
        changes["api_key_env"] = api_key_env
        changes["api_key"] = os.environ[api_key_env]
    elif ctx.api_key is None and ctx.api_key_env in os.environ:
        changes["api_key"] = os.environ[ctx.api_key_env]
    return ctx.evolve(**changes) if changes else ctx


def select_counted(
    env: Composition,
    limit: int | None,
    task_ids: Sequence[str] | None,
    rollouts_per_task: int,
    *,
    budget: tuple[int, str] | None = None,
) -> tuple[list[PlannedTask], list[Unsupported]]:
    """:func:`select_tasks`, counted first: a plan of more rollouts than one run plans
    (``check_rollouts``; ``budget`` as :func:`prepare` takes it) is refused before its
    tasks are loaded when the taskset knows its length, else as soon as one task too
    many is read; never after allocating it."""
    left, of = budget if budget is not None else (None, "")
    known: int | None
    if task_ids:
        known = len(dict.fromkeys(task_ids))
    else:
        try:
            known = len(env.taskset)  # type: ignore[arg-type]
        except (TypeError, NotImplementedError):  # a taskset that does not know its length
            known = None
    if known is not None:
        count = known if limit is None else min(known, limit)
        check_rollouts(count, rollouts_per_task, left=left, of=of)
    most = (max_rollouts() if left is None else left) // rollouts_per_task + 1
    planned, unsupported = select_tasks(env, most if limit is None else min(limit, most), task_ids)
    check_rollouts(len(planned) + len(unsupported), rollouts_per_task, left=left, of=of)
    return planned, unsupported


def select_tasks(
    env: Composition, limit: int | None, task_ids: Sequence[str] | None
) -> tuple[list[PlannedTask], list[Unsupported]]:
    """The selected tasks the harness runs, in order, and those it cannot run (left
    out; a SpecError when it can run none of them)."""
    taskset = env.taskset
    tasks: list[Any]
    if task_ids:
        tasks = []
        for tid in dict.fromkeys(task_ids):
            try:
                tasks.append(taskset.get_task(tid))
            except KeyError as exc:
                msg = exc.args[0] if exc.args else tid
                raise SpecError(f"unknown task {tid!r}: {msg}") from None
    else:
        tasks = []
        for task in taskset:
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
        reason = why_unsupported(env.harness, task)
        if reason is not None:
            unsupported.append(Unsupported(task.task_id, reason))
            continue
        hints = taskset.execution_hints(task)
        planned.append(PlannedTask(task, len(planned), task.item_id, hints))
    if not planned and unsupported:  # the pairing itself cannot run
        taskset_name = str(env.taskset_spec.get("spec") or taskset.taskset_id)
        raise SpecError(refusal(harness_name(env), taskset_name, unsupported))
    if not planned:
        problems = list(getattr(taskset, "problems", []) or [])
        detail = (
            f"; {len(problems)} failed to load:\n" + "\n".join(f"  {p}" for p in problems)
            if problems
            else ""
        )
        raise SpecError(f"no tasks to run in taskset {taskset.taskset_id!r}{detail}")
    return planned, unsupported


def sandbox_factory(
    env: Composition, planned: list[PlannedTask], name: str, options: dict[str, Any]
) -> tuple[Callable[..., Any] | None, str | None]:
    """The sandbox kind's factory when a task or the harness needs one, and its warning."""
    needed = bool(getattr(env.harness, "requires_sandbox", False)) or any(
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
