"""Running a prepared session: the executor, the preflight, the run directory, the rollouts,
the summary.

:func:`execute` serves a scripted model when the run names one, opens the
session's executor, runs the preflight where the rollouts run, opens the run
directory (a new one, or the resumed one with its manifest's history carried
on), runs the jobs through the :class:`~agentkit.env._runner.Runner` and
writes the summary, also when the run is interrupted.

Runs that share one budget of running rollouts (the cells of a job,
:mod:`agentkit.jobs`) pass the same ``limiter`` to :func:`execute`, and may
pass a ``progress`` sink of their own instead of the run's progress bar.
"""

from __future__ import annotations

import contextlib
import functools
import time
from collections.abc import Sequence
from typing import Any

import anyio
import attrs

from agentkit._context import RunContext, is_secret_header
from agentkit._executor import Executor, PlannedTask
from agentkit._redact import Redactor, looks_like_key, secret_values
from agentkit.env._attempt import RolloutWork
from agentkit.env._groups import build_groups
from agentkit.env._live import LiveEvents
from agentkit.env._preflight import check_before_run
from agentkit.env._progress import ProgressBar, StatusLine
from agentkit.env._records import EvalResults
from agentkit.env._runner import ProgressSink, Runner, group_json
from agentkit.env._scripted import SCRIPTED_PREFIX, scripted_endpoint
from agentkit.env._session import Session
from agentkit.rundir import RunDirError, RunStore
from agentkit.stats._summary import summarize

__all__ = ["execute"]


async def execute(
    session: Session,
    *,
    limiter: anyio.CapacityLimiter | None = None,
    progress: ProgressSink | None = None,
) -> EvalResults:
    """Run ``session``'s jobs and record them; the results of every planned rollout.

    ``limiter``: a budget of running rollouts shared with other runs (each
    rollout holds one token of it while it runs). ``progress``: told when
    each rollout starts and finishes, instead of the run's own progress bar.
    """
    async with contextlib.AsyncExitStack() as stack:
        ctx = session.ctx
        if ctx.model and ctx.model.startswith(SCRIPTED_PREFIX):
            name, url = stack.enter_context(scripted_endpoint(ctx.model))
            ctx = ctx.evolve(model=name, base_url=url)
        return await _open_executor(session, ctx, _Shared(limiter, progress))
    raise AssertionError("unreachable")  # pragma: no cover - the stack does not swallow


@attrs.frozen
class _Shared:
    """What a run gets from outside: a shared budget and a progress sink."""

    limiter: anyio.CapacityLimiter | None
    progress: ProgressSink | None


async def _open_executor(session: Session, ctx: RunContext, shared: _Shared) -> EvalResults:
    work = session.rollout_work(ctx)
    executor = session.executor
    await executor.open(work, run_dir=session.resume or session.target)
    try:
        return await _execute_on(session, ctx, executor, work, shared)
    finally:
        with anyio.CancelScope(shield=True):
            await executor.close()
            await work.aclose()  # the model proxy this process held for the run


async def _execute_on(
    session: Session, ctx: RunContext, executor: Executor, work: RolloutWork, shared: _Shared
) -> EvalResults:
    redactor = _run_redactor(ctx)
    warnings = await _check(session, ctx, executor)
    store, repair_note = _open_store(session, redactor)
    try:
        _write_plan(session, store)
        wanted = len(session.planned) * session.runner_options.rollouts_per_task
        started = _Started(store, repair_note, redactor, wanted)
        _announce(session, started, warnings)
        runner, bar = _runner(session, executor, work, shared, started)
    except BaseException:
        if store is not None:
            store.close()
        raise
    began = time.perf_counter()
    interrupted = True
    try:
        await _prepare_environments(runner, session.options.progress)
        if bar is not None:
            with bar:
                await runner.run()
        else:
            await runner.run()
        interrupted = False
    finally:
        results = _finish(
            session, executor, runner, started, interrupted, time.perf_counter() - began
        )
    return results


@attrs.frozen
class _Started:
    """What opening the run gave: its store (None: no persistence), the note about a
    repaired torn line, the run's redactor and how many rollouts it plans in all."""

    store: RunStore | None
    repair_note: str | None
    redactor: Redactor
    wanted: int

    @property
    def run_dir(self) -> str | None:
        return None if self.store is None else str(self.store.run_dir)


def _run_redactor(ctx: RunContext) -> Redactor:
    """The run's redactor: the API key, secret-looking host variables, the headers and
    request fields (``-M``) the manifest hides, values plugins register."""
    secret_headers = [v for k, v in ctx.headers.items() if is_secret_header(k) or looks_like_key(v)]
    return Redactor.for_run(
        ctx.resolved_api_key, extra=[*secret_headers, *secret_values(ctx.sampling_args)]
    )


async def _check(session: Session, ctx: RunContext, executor: Executor) -> list[str]:
    """The preflight where the rollouts run: its warnings; the sandbox kind's warning is
    added to the session's (and its manifest)."""
    env = session.env
    planned = session.planned
    check = functools.partial(
        check_before_run,
        harness=env.harness,
        ctx=ctx,
        sandbox_name=session.sandbox_name,
        factory=session.factory,
        first=next((p for p in planned if p.hints is not None), planned[0]),
        preflight=session.options.preflight and bool(session.jobs),
    )
    kind_warning, warnings = await executor.check(check, sandboxed=session.factory is not None)
    if kind_warning:
        session.sandbox_warning = "; ".join(w for w in (session.sandbox_warning, kind_warning) if w)
        session.manifest["sandbox_warning"] = session.sandbox_warning
    return warnings


def _write_plan(session: Session, store: RunStore | None) -> None:
    """Write the run's manifest and tasks; on resume, first the groups a kill left unwritten."""
    if store is None:
        return
    if session.resume is not None:
        opts = session.runner_options
        # a kill between a group's last rollout line and its group line, or a
        # group that changed (more rollouts per task)
        stored_groups = store.load_groups(repair=True)
        for group in build_groups(
            session.finished,
            opts.rollouts_per_task,
            threshold=opts.pass_threshold,
            normalize=opts.normalize_advantages,
        ):
            line = stored_groups.get(group.task_id)
            if line is None or line.get("rollout_ids") != [r.rollout_id for r in group.rollouts]:
                store.append_group(group_json(group))
    store.write_manifest(session.manifest)
    store.write_tasks(session.planned)


def _announce(session: Session, started: _Started, warnings: list[str]) -> None:
    """Tell the run's ``on_start`` what it is about to do."""
    on_start = session.options.on_start
    if on_start is None:
        return
    on_start(
        {
            "run_dir": started.run_dir,
            "planned": started.wanted,
            "tasks": len(session.planned),
            "rollouts_per_task": session.runner_options.rollouts_per_task,
            "already_finished": len(session.finished),
            "to_run": len(session.jobs),
            "rerun": len(session.rerun),
            "sandbox_warning": session.sandbox_warning,
            "repair_note": started.repair_note,
            "pricing_note": session.pricing_note,
            "preflight_warnings": warnings,
            "unsupported_warning": session.left_out(),
            "resume_changes": session.changes,
            "taskset_problems": [
                str(p) for p in getattr(session.env.taskset, "problems", None) or []
            ],
        }
    )


def _runner(
    session: Session, executor: Executor, work: RolloutWork, shared: _Shared, started: _Started
) -> tuple[Runner, ProgressBar | None]:
    """The runner of the session's jobs, and the run's own progress bar (None: none, or
    the shared progress sink is told instead)."""
    run_options = session.options
    live = LiveEvents(
        run_options.trace_callback or session.env.trace_callback,
        buffer=run_options.event_buffer,
        drain_timeout=run_options.callback_drain_timeout,
    )
    bar = None
    if run_options.progress and shared.progress is None:
        bar = ProgressBar(started.wanted, done=len(session.finished))
    runner = Runner(
        work=work,
        executor=executor,
        jobs=session.jobs,
        options=session.runner_options,
        store=started.store,
        live=live,
        progress=bar if shared.progress is None else shared.progress,
        finished=session.finished,
        limiter=shared.limiter,
    )
    return runner, bar


def _finish(
    session: Session,
    executor: Executor,
    runner: Runner,
    started: _Started,
    interrupted: bool,
    elapsed: float,
) -> EvalResults:
    """The run's results and summary, written with the run directory's last files (also
    when the run is interrupted); the sandbox directories of this session's rollouts are
    removed or scrubbed."""
    opts = session.runner_options
    planned = session.planned
    finished = session.finished
    store = started.store
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
        complete=len(records) >= started.wanted,
        interrupted=interrupted,
        extra={
            "run_dir": started.run_dir,
            "stopped": runner.stop_reason,
            "this_session": {
                "ran": len(runner.records) - len(finished),
                "resumed_from": len(finished),
                "rerun": len(session.rerun),
                "duration_s": elapsed,
                "executor": executor.describe(),
            },
            "trace_callback": runner.live.report(),
            "sandbox_warning": session.sandbox_warning,
            "repair_note": started.repair_note,
            "pricing_note": session.pricing_note,
            "unsupported_tasks": [u.to_json() for u in session.unsupported],
        },
        breakdowns=_breakdowns(session.env.taskset, planned),
    )
    # the summary is printed (results table, --json): no secret in it either
    summary = started.redactor.json(summary)
    if store is not None:
        if session.factory is not None:
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


async def _prepare_environments(runner: Runner, progress: bool) -> None:
    """The sandbox kind's preparation (image builds), with a live line when ``progress``."""
    if not progress:
        await runner.prepare()
        return

    with StatusLine() as line:
        await runner.prepare(line.update)


def _open_store(session: Session, redactor: Redactor) -> tuple[RunStore | None, str | None]:
    """Open the run directory: a new one at ``session.target``, or ``session.resume``.

    Returns the store (None: no persistence) and a note about a repaired torn line.
    """
    if session.resume is None:
        if session.target is None:
            return None, None
        store = RunStore(session.target, redactor=redactor)
        if store.manifest_path.exists():
            raise RunDirError(
                f"{session.target} already holds a run; resume it with --resume "
                f"{session.target} (resume=...) or choose another directory"
            )
        store.open()
        return store, None
    store = RunStore(session.resume, redactor=redactor)
    store.open()
    try:
        _records, repair_note = store.load_rollouts(repair=True)
    except BaseException:
        store.close()
        raise
    old = session.old_manifest or {}
    manifest = session.manifest
    manifest["created_at"] = old.get("created_at", manifest["created_at"])
    # the run keeps its id (its calls files carry it); a run made before runs had ids
    # keeps having none, so that its calls files, which have none, stay its own
    if isinstance(old.get("run_id"), str):
        manifest["run_id"] = old["run_id"]
    else:
        manifest.pop("run_id", None)
    now = time.time()
    manifest["resumed_at"] = [*old.get("resumed_at", []), now]
    resumes = list(old.get("resumes") or [])
    resumes.append(
        {
            "at": now,
            "rerun": [r.rollout_id for r in session.rerun],
            "changed": {k: {"was": v[0], "now": v[1]} for k, v in session.changes.items()},
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
