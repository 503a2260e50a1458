"""AgentEnv: a taskset and a harness, scored by a compiled rubric, run and recorded."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Unpack

import anyio

from agentkit import registry
from agentkit._errors import AgentkitError, SpecError
from agentkit._events import Event
from agentkit._harness import check_harness
from agentkit._rubric import RewardFunction, Rubric
from agentkit._run_options import RunOptions, RunOptionsKeywords, build_run_options
from agentkit._taskset import Taskset
from agentkit.env._branch_plan import BranchPlan
from agentkit.env._branching import run_branches
from agentkit.env._execute import execute
from agentkit.env._manifest import public_options, qualname
from agentkit.env._records import EvalResults, RolloutGroup
from agentkit.env._rubric_compile import CompiledRubric, compile_rubric
from agentkit.env._session import prepare

__all__ = ["AgentEnv"]


class AgentEnv:
    """Compose a taskset and a harness; own rubric compilation, orchestration and persistence.

    >>> env = AgentEnv.from_names("jsonl:tasks.jsonl", "chat")   # doctest: +SKIP
    >>> results = env.run(rollouts_per_task=4, model="m", out="runs/a")  # doctest: +SKIP
    >>> options = RunOptions(rollouts_per_task=4, model="m")  # doctest: +SKIP
    >>> results = env.run(options, out="runs/b")  # doctest: +SKIP

    ``run``, ``evaluate``, ``generate`` and ``plan`` take the run's settings
    as a :class:`~agentkit.RunOptions`, as its fields in keyword arguments,
    or both (the keywords override the options' fields); each is checked
    once, before anything runs. The orchestration lives in
    :mod:`agentkit.env._session` (planning, resume) and
    :mod:`agentkit.env._execute` (running, recording).

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
    def run(
        self, options: RunOptions | None = None, **overrides: Unpack[RunOptionsKeywords]
    ) -> EvalResults:
        """Synchronous :meth:`evaluate` (not from inside a running event loop)."""
        # deferred: only this synchronous entry asks which event loop runs
        import sniffio

        try:
            sniffio.current_async_library()
        except sniffio.AsyncLibraryNotFoundError:
            return anyio.run(functools.partial(self.evaluate, options, **overrides))
        raise AgentkitError(
            "AgentEnv.run() was called inside a running event loop; use 'await env.evaluate()'"
        )

    async def generate(
        self, options: RunOptions | None = None, **overrides: Unpack[RunOptionsKeywords]
    ) -> list[RolloutGroup]:
        """Run rollouts for training: complete groups with GRPO advantages; prints nothing
        (unless the options ask for the progress bar)."""
        results = await self.evaluate(options, **overrides)
        return results.groups

    async def evaluate(
        self, options: RunOptions | None = None, **overrides: Unpack[RunOptionsKeywords]
    ) -> EvalResults:
        """Run ``rollouts_per_task`` rollouts of every selected task and score them.

        The settings are a :class:`~agentkit.RunOptions`, its fields as keyword
        arguments, or both (the keywords override the options' fields).
        ``out`` writes a run directory; ``resume`` continues one (only missing
        rollouts run, and rollouts that could not run are run again). Without
        either, nothing is written. Before the first rollout a preflight
        checks the model endpoint, the API key, the harness and the sandbox
        (``preflight=False`` skips it). ``executor`` says where the rollouts
        run (``"local"``, ``"ray"`` with ``ray_address``, or an
        :class:`agentkit.executors.Executor`; see docs/distributed.md). See
        docs/agentenv.md for every option.
        """
        return await execute(prepare(self, build_run_options(options, overrides)))

    async def branch(
        self,
        plan: BranchPlan,
        options: RunOptions | None = None,
        **overrides: Unpack[RunOptionsKeywords],
    ) -> EvalResults:
        """A branching run: each episode runs to ``plan.at`` replies, forks into
        ``plan.children``, and every child continues to its end and is scored.

        The harness must be step-capable and its episodes forkable (the
        ``terminal`` harness; ``fleet-tool-call`` on its local app). The run's
        model samples every reply (agentkit's chat client against the
        endpoint, as the terminal harness's ``run()`` does); the episode's own
        grading scores each leaf. ``rollouts_per_task`` is the number of roots
        per task; ``out`` writes a run directory whose records hold the tree
        (``parent_rollout_id``, ``branch_step``, ``children``); the groups are
        one per branch point. ``resume`` and other executors than ``local``
        are refused. See ``docs/branching.md``.
        """
        return await run_branches(self, plan, build_run_options(options, overrides))

    def plan(
        self, options: RunOptions | None = None, **overrides: Unpack[RunOptionsKeywords]
    ) -> dict[str, Any]:
        """What :meth:`evaluate` would run with these options, running nothing (``--dry-run``).

        The tasks, harness, sandbox, model settings, limits, how many
        rollouts are planned, already finished (on resume) and to run.
        Nothing is contacted, created or modified.
        """
        return prepare(self, build_run_options(options, overrides)).describe()
