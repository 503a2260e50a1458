"""AgentEnv: a taskset and a harness, scored by a compiled rubric, run and recorded."""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from agentkit._context import Limits, RunContext
from agentkit._errors import AgentkitError, SpecError
from agentkit._events import Event
from agentkit._rubric import RewardFunction, Rubric
from agentkit._taskset import Taskset
from agentkit.env._live import LiveEvents
from agentkit.env._manifest import build_manifest, check_reachable, public_options, qualname
from agentkit.env._records import EvalResults, RolloutGroup, RolloutRecord
from agentkit.env._rubric_compile import CompiledRubric, compile_rubric
from agentkit.env._runner import (
    Job,
    PlannedTask,
    Runner,
    RunnerOptions,
    group_json,
    make_rollout_id,
)
from agentkit.env._stats import DEFAULT_PASS_THRESHOLD
from agentkit.env._store import ResumeError, RunDirError, RunStore, diff_identity, redact_json
from agentkit.env._summary import build_groups, summarize

__all__ = ["AgentEnv"]


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
        from agentkit._harness import check_harness

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
        from agentkit import registry

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
        from agentkit import registry

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

    async def evaluate(
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
        model: str | None = None,
        base_url: str | None = None,
        api_key_env: str | None = None,
        sampling_args: dict[str, Any] | None = None,
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
        check_model_server: bool = True,
        on_start: Callable[[dict[str, Any]], None] | None = None,
    ) -> EvalResults:
        """Run ``rollouts_per_task`` rollouts of every selected task and score them.

        ``out`` (or ``run_dir``) writes a run directory; ``resume`` continues
        one (only missing rollouts run). Without either, nothing is written.
        See docs/agentenv.md for every option.
        """
        if rollouts_per_task < 1:
            raise SpecError(f"rollouts_per_task must be at least 1, got {rollouts_per_task}")
        if concurrency < 1:
            raise SpecError(f"concurrency must be at least 1, got {concurrency}")
        if max_retries < 0:
            raise SpecError(f"max_retries must be 0 or more, got {max_retries}")
        if limit is not None and limit < 0:
            raise SpecError(f"limit must be 0 or more, got {limit}")
        if timeout is not None and not timeout > 0:
            raise SpecError(f"timeout must be more than 0 seconds, got {timeout:g}")
        if out is not None and run_dir is not None and Path(out) != Path(run_dir):
            raise SpecError("give either out= or run_dir=, not both")
        target = out if out is not None else run_dir
        if resume is not None and target is not None and Path(resume) != Path(target):
            raise SpecError("give either resume= (an existing run) or out= (a new run), not both")

        ctx = self._context(context, model, base_url, api_key_env, sampling_args, timeout)
        secret = ctx.resolved_api_key
        planned = self._plan(limit, task_ids)
        sandbox_name = sandbox or self.sandbox
        sb_options = dict(self.sandbox_options)
        sb_options.update(sandbox_options or {})
        if allow_network:
            sb_options["allow_network"] = True
        factory, sandbox_warning = await self._sandbox_factory(planned, sandbox_name, sb_options)

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
            },
        )
        if check_model_server and ctx.base_url and resume is None:
            await check_reachable(ctx.base_url)  # before anything is created
        store, finished, grouped, repair_note = _open_store(resume, target, secret, manifest)
        try:
            wanted = {(p.task.task_id, i) for p in planned for i in range(rollouts_per_task)}
            finished = [r for r in finished if (r.task_id, r.rollout_index) in wanted]
            if store is not None and resume is not None:
                # a kill between a group's last rollout line and its group line
                for group in build_groups(
                    finished,
                    rollouts_per_task,
                    threshold=pass_threshold,
                    normalize=normalize_advantages,
                ):
                    if group.task_id not in grouped:
                        store.append_group(group_json(group))
            done = {(r.task_id, r.rollout_index) for r in finished}
            jobs = [
                Job(p, i, make_rollout_id(p.task.task_id, i))
                for p in planned
                for i in range(rollouts_per_task)
                if (p.task.task_id, i) not in done
            ]
            if check_model_server and ctx.base_url and jobs and resume is not None:
                await check_reachable(ctx.base_url)
            if store is not None:
                store.write_manifest(manifest)
            info = {
                "run_dir": None if store is None else str(store.run_dir),
                "planned": len(wanted),
                "already_finished": len(finished),
                "to_run": len(jobs),
                "sandbox_warning": sandbox_warning,
                "repair_note": repair_note,
                "taskset_problems": [str(p) for p in getattr(self.taskset, "problems", None) or []],
            }
            if on_start is not None:
                on_start(info)

            live = LiveEvents(
                self.trace_callback, buffer=event_buffer, drain_timeout=callback_drain_timeout
            )
            options = RunnerOptions(
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
            )
            tmp = None
            if factory is not None and store is None:
                import tempfile

                tmp = tempfile.TemporaryDirectory(prefix="agentkit-run-")
            bar = None
            if progress:
                from agentkit.env._progress import ProgressBar

                bar = ProgressBar(len(wanted), done=len(finished))
            runner = Runner(
                harness=self.harness,
                taskset=self.taskset,
                rubric=self._rubric,
                jobs=jobs,
                options=options,
                context=ctx,
                store=store,
                live=live,
                progress=bar,
                finished=finished,
                sandbox_tmp=None if tmp is None else tmp.name,
            )
        except BaseException:
            if store is not None:
                store.close()
            raise
        started = time.perf_counter()
        interrupted = True
        try:
            await _prepare(runner, progress)
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
                rollouts_per_task,
                threshold=pass_threshold,
                normalize=normalize_advantages,
            )
            summary = summarize(
                records,
                [(p.task.task_id, p.example_id) for p in planned],
                rollouts_per_task,
                threshold=pass_threshold,
                complete=len(records) >= len(wanted),
                interrupted=interrupted,
                extra={
                    "run_dir": None if store is None else str(store.run_dir),
                    "this_session": {
                        "ran": len(runner.records) - len(finished),
                        "resumed_from": len(finished),
                        "duration_s": elapsed,
                    },
                    "trace_callback": live.report(),
                    "sandbox_warning": sandbox_warning,
                    "repair_note": repair_note,
                },
                breakdowns=_breakdowns(self.taskset, planned),
            )
            # the summary is printed (results table, --json): no API key in it either
            summary = redact_json(summary, secret)
            if store is not None:
                if factory is not None and not keep_sandboxes:
                    for rec in runner.records[len(finished) :]:
                        if rec.ok:
                            store.remove_sandbox_dir(rec.rollout_id)
                    store.remove_empty_sandbox_parent()
                store.write_summary(summary)
                store.close()
            if tmp is not None:
                tmp.cleanup()
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
    ) -> RunContext:
        ctx = context or RunContext()
        changes: dict[str, Any] = {}
        if model is not None:
            changes["model"] = model
        if base_url is not None:
            changes["base_url"] = base_url
        if sampling_args is not None:
            changes["sampling_args"] = dict(sampling_args)
        if timeout is not None and ctx.limits.timeout_sec is None:
            changes["limits"] = Limits(
                timeout_sec=timeout,
                max_turns=ctx.limits.max_turns,
                max_tokens=ctx.limits.max_tokens,
            )
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

    def _plan(self, limit: int | None, task_ids: Sequence[str] | None) -> list[PlannedTask]:
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
        supports = getattr(self.harness, "supports", None)
        planned: list[PlannedTask] = []
        seen: set[str] = set()
        for task in tasks:
            task.require_payload()
            if task.task_id in seen:
                raise SpecError(f"task {task.task_id!r} appears twice in the taskset")
            seen.add(task.task_id)
            if supports is not None and not supports(task):
                continue
            hints = self.taskset.execution_hints(task)
            planned.append(PlannedTask(task, len(planned), task.item_id, hints))
        if not planned:
            problems = list(getattr(self.taskset, "problems", []) or [])
            detail = f"; {len(problems)} failed to load, first: {problems[0]}" if problems else ""
            skipped = " (the harness supports none of the selected tasks)" if tasks else ""
            raise SpecError(
                f"no tasks to run in taskset {self.taskset.taskset_id!r}{skipped}{detail}"
            )
        return planned

    async def _sandbox_factory(
        self, planned: list[PlannedTask], name: str, options: dict[str, Any]
    ) -> tuple[Callable[..., Any] | None, str | None]:
        needed = bool(getattr(self.harness, "requires_sandbox", False)) or any(
            p.hints is not None for p in planned
        )
        if not needed:
            return None, None
        from agentkit import registry

        factory = registry.resolve_sandbox(name, **options)
        target = getattr(factory, "func", factory)
        warning = getattr(target, "warning", None) or getattr(target, "WARNING", None)
        warnings = [warning] if isinstance(warning, str) else []
        preflight = getattr(target, "preflight", None)
        if callable(preflight):
            # once per run, before anything is created: may refuse the run, or warn
            extra = await preflight(**options)
            if isinstance(extra, str) and extra:
                warnings.append(extra)
        return factory, "; ".join(warnings) or None


async def _prepare(runner: Runner, progress: bool) -> None:
    """The sandbox kind's preparation (image builds), with a live line when ``progress``."""
    if not progress:
        await runner.prepare()
        return
    from agentkit.env._progress import StatusLine

    with StatusLine() as line:
        await runner.prepare(line.update)


def _open_store(
    resume: str | os.PathLike[str] | None,
    target: str | os.PathLike[str] | None,
    secret: str | None,
    manifest: dict[str, Any],
) -> tuple[RunStore | None, list[RolloutRecord], set[str], str | None]:
    """Open the run directory: a new one at ``target``, or ``resume`` after checking it.

    Returns the store (None: no persistence), the rollouts already finished,
    the task ids that have a group line, and a note about a repaired torn line.
    """
    if resume is None:
        if target is None:
            return None, [], set(), None
        store = RunStore(Path(target), secret=secret)
        if store.manifest_path.exists():
            raise RunDirError(
                f"{target} already holds a run; resume it with --resume {target} "
                "(resume=...) or choose another directory"
            )
        store.open()
        return store, [], set(), None
    store = RunStore(Path(resume), secret=secret)
    old = store.read_manifest()
    differences = diff_identity(old, manifest)
    if differences:
        raise ResumeError(
            f"cannot resume {resume}: the run was started with other settings; "
            + "; ".join(differences)
        )
    store.open()
    try:
        finished, repair_note = store.load_rollouts(repair=True)
        grouped = store.load_group_task_ids(repair=True)
    except BaseException:
        store.close()
        raise
    manifest["created_at"] = old.get("created_at", manifest["created_at"])
    manifest["resumed_at"] = [*old.get("resumed_at", []), time.time()]
    return store, finished, grouped, repair_note


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
