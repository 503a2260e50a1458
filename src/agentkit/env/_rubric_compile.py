"""Compiling the main rubric from a taskset, a harness, plugins and the user.

Order (deterministic, documented in ``docs/agentenv.md``):

1. ``taskset.default_grading_spec``        -> ``core.<name>``
2. ``harness.compile_rubric(taskset)``     -> ``harness.<name>``
3. registered rubric contributors          -> ``<registered name>.<name>``
4. ``env.add_rubric(rubric)``              -> ``<rubric.name or "user">.<name>``

A qualified name produced twice is an error at construction naming both
origins. Scoring calls every function; one that raises becomes a scoring
error recorded on the rollout, never a silent 0.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from agentkit._context import RunContext
from agentkit._errors import AgentkitError, PluginError
from agentkit._result import HarnessResult
from agentkit._rubric import (
    REWARD_ARGUMENTS,
    GradedAsFailure,
    GradingUnavailable,
    RewardFunction,
    Rubric,
    ScoreResult,
    _metrics_of,
)
from agentkit._task import Task

__all__ = ["CompiledMetric", "CompiledRubric", "RubricCompileError", "compile_rubric"]

RUBRIC_SCHEMA_VERSION = 1


class RubricCompileError(AgentkitError):
    """The rubric could not be compiled (colliding names, a broken contributor)."""


@attrs.frozen
class CompiledMetric:
    """One reward function placed in the compiled rubric."""

    qualified_name: str
    namespace: str
    source: str  # "taskset" | "harness" | "contributor" | "user"
    origin: str
    function: RewardFunction
    arguments: tuple[str, ...]
    takes_all: bool

    def manifest(self) -> dict[str, Any]:
        """The JSON description that goes into ``describe_rubric()`` and manifest.json."""
        entry = self.function.manifest()
        return {
            "name": self.qualified_name,
            "namespace": self.namespace,
            "function_name": self.function.name,
            "weight": entry["weight"],
            "description": entry["description"],
            "function": entry["function"],
            "source": self.source,
            "origin": self.origin,
            "arguments": list(self.arguments),
        }


def _arguments_of(fn: Any) -> tuple[tuple[str, ...], bool]:
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return (), True
    takes_all = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    return tuple(n for n in params if n in REWARD_ARGUMENTS), takes_all


def _check_required_arguments(rf: RewardFunction, origin: str) -> None:
    """A required parameter agentkit never provides would fail every rollout: refuse it now."""
    try:
        params = inspect.signature(rf.fn).parameters.values()
    except (TypeError, ValueError):
        return
    for p in params:
        if (
            p.default is inspect.Parameter.empty
            and p.kind not in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
            and p.name not in REWARD_ARGUMENTS
        ):
            raise RubricCompileError(
                f"reward function {rf.name!r} from {origin} requires argument {p.name!r}, "
                f"which is never provided; a reward function may take: "
                f"{', '.join(REWARD_ARGUMENTS)}"
            )


def _as_rubric(value: Any, origin: str) -> Rubric | None:
    if value is None or isinstance(value, Rubric):
        return value
    if isinstance(value, RewardFunction) or callable(value):
        return Rubric([value])
    if isinstance(value, Iterable) and not isinstance(value, (str, bytes, Mapping)):
        return Rubric(list(value))
    raise RubricCompileError(
        f"{origin} gave {type(value).__name__} {value!r}; expected an agentkit.Rubric, "
        "a reward function, a list of them, or None"
    )


class CompiledRubric:
    """The ordered, namespaced reward functions of one AgentEnv."""

    def __init__(self) -> None:
        self.metrics: list[CompiledMetric] = []
        self._by_name: dict[str, CompiledMetric] = {}

    def extend(self, rubric: Rubric | None, *, namespace: str, source: str, origin: str) -> None:
        """Add every function of ``rubric`` under ``namespace``; collisions are errors."""
        if rubric is None:
            return
        for rf in rubric:
            qualified = f"{namespace}.{rf.name}"
            existing = self._by_name.get(qualified)
            if existing is not None:
                raise RubricCompileError(
                    f"duplicate rubric metric {qualified!r}: defined by {existing.origin} "
                    f"and by {origin}; rename one of the reward functions or give the "
                    "rubric another name (Rubric(..., name='...'))"
                )
            _check_required_arguments(rf, origin)
            args, takes_all = _arguments_of(rf.fn)
            metric = CompiledMetric(qualified, namespace, source, origin, rf, args, takes_all)
            self.metrics.append(metric)
            self._by_name[qualified] = metric

    def add_user(self, rubric: Rubric, *, index: int) -> None:
        """Add a rubric from ``env.add_rubric()`` (namespace: its name, or ``user``)."""
        namespace = rubric.name or "user"
        origin = f"env.add_rubric() #{index + 1} (namespace {namespace!r})"
        self.extend(_as_rubric(rubric, origin), namespace=namespace, source="user", origin=origin)

    @property
    def needs_state(self) -> bool:
        """True when some function asks for ``state`` (built only then)."""
        return any(m.takes_all or "state" in m.arguments for m in self.metrics)

    def manifest(self) -> dict[str, Any]:
        """The JSON-serializable compiled structure (``env.describe_rubric()``)."""
        return {
            "schema_version": RUBRIC_SCHEMA_VERSION,
            "order": ["core", "harness", "contributors", "user"],
            "total": "weighted sum of the metrics' values (metrics of weight 0 are reported only)",
            "metrics": [m.manifest() for m in self.metrics],
        }

    async def score_rollout(
        self,
        task: Task,
        result: HarnessResult,
        *,
        sandbox: Any = None,
        context: RunContext | None = None,
    ) -> ScoreResult:
        """Score one rollout of ``task`` outside a run (a bridge, a step-protocol episode).

        Every argument a reward function may declare is built from these, as
        the runner builds it: ``output`` and ``messages`` from ``result``,
        ``target`` and ``grading_spec`` from ``task``, ``state`` from both
        (its ``rollout_id`` is the context's), ``sandbox`` still open.
        """
        context = context or RunContext()
        state = result.to_state_patch()
        state.update(
            {
                "task_id": task.task_id,
                "example_id": task.item_id,
                "rollout_id": context.rollout_id,
                "prompt": task.input,
                "answer": task.target,
                "info": task.metadata,
            }
        )
        available = {
            "task": task,
            "result": result,
            "output": result.output,
            "target": task.target,
            "messages": result.messages,
            "sandbox": sandbox,
            "context": context,
            "grading_spec": task.grading_spec,
            "state": state,
        }
        return await self.score(available)

    async def score(self, available: Mapping[str, Any]) -> ScoreResult:
        """Run every reward function; a raising one is recorded, never turned into 0."""
        rewards: dict[str, float] = {}
        errors: list[dict[str, str]] = []
        failure: dict[str, str] | None = None
        unavailable: dict[str, str] | None = None
        total = 0.0
        weighted_failed = False
        for m in self.metrics:
            if m.takes_all:
                kwargs: Mapping[str, Any] = available
            else:
                kwargs = {a: available[a] for a in m.arguments}
            try:
                # the arguments were read from the signature once, at compile time
                # (call_reward reads it on every call)
                try:
                    value = m.function.fn(**kwargs)
                    if inspect.isawaitable(value):
                        value = await value
                except GradedAsFailure as exc:
                    # the rollout broke its own grading: scored, as a failure
                    value = exc.value
                    error = {"metric": m.qualified_name, "error": str(exc), "kind": exc.kind}
                    errors.append({**error, "scored": "as a failure"})
                    failure = failure or {"kind": exc.kind, "error": str(exc)}
                values = _metrics_of(m.function.name, value)
            except GradingUnavailable as exc:
                errors.append({"metric": m.qualified_name, "error": str(exc), "kind": exc.kind})
                unavailable = unavailable or {"kind": exc.kind, "error": str(exc)}
                weighted_failed = True
                continue
            except Exception as exc:
                errors.append({"metric": m.qualified_name, "error": f"{type(exc).__name__}: {exc}"})
                if m.function.weight != 0:
                    weighted_failed = True
                continue
            for key, value in values.items():
                name = f"{m.namespace}.{key}"
                if name in rewards:
                    errors.append(
                        {
                            "metric": m.qualified_name,
                            "error": f"metric {name!r} was already produced by another "
                            "reward function; this value is ignored",
                        }
                    )
                    continue
                rewards[name] = value
            total += m.function.weight * values[m.function.name]
        if weighted_failed or not math.isfinite(total):
            return ScoreResult(rewards, None, errors, failure, unavailable)
        return ScoreResult(rewards, total, errors, failure, unavailable)


def compile_rubric(
    taskset: Any,
    harness: Any,
    *,
    contributors: Iterable[Any] = (),
    user_rubrics: Iterable[Rubric] = (),
) -> CompiledRubric:
    """Build the compiled rubric in the documented order.

    The taskset's ``default_grading_spec`` (namespace ``core``), the harness's
    ``compile_rubric(taskset)`` (``harness``), each contributor's rubric (its
    registered name), then ``user_rubrics`` (the rubric's name, else ``user``);
    the run scores every rollout with the result. ``harness`` may be None (no
    harness metrics).
    ``contributors`` are registry registrations (``name``, ``factory``,
    ``distribution``); each factory is called as ``factory(taskset, harness)``.
    """
    compiled = CompiledRubric()
    ts_name = f"{type(taskset).__name__} {getattr(taskset, 'taskset_id', '?')!r}"
    origin = f"the taskset's default_grading_spec ({ts_name})"
    spec = getattr(taskset, "default_grading_spec", None)
    compiled.extend(_as_rubric(spec, origin), namespace="core", source="taskset", origin=origin)

    compile_fn = getattr(harness, "compile_rubric", None)
    if compile_fn is not None:
        origin = f"{type(harness).__name__}.compile_rubric()"
        try:
            produced = compile_fn(taskset)
        except AgentkitError:
            raise
        except Exception as exc:
            raise RubricCompileError(f"{origin} failed: {type(exc).__name__}: {exc}") from exc
        compiled.extend(
            _as_rubric(produced, origin), namespace="harness", source="harness", origin=origin
        )

    for reg in contributors:
        origin = f"rubric contributor {reg.name!r} (distribution {reg.distribution})"
        try:
            produced = reg.factory(taskset, harness)
        except AgentkitError:
            raise
        except Exception as exc:
            raise PluginError(f"{origin} failed: {type(exc).__name__}: {exc}") from exc
        compiled.extend(
            _as_rubric(produced, origin), namespace=reg.name, source="contributor", origin=origin
        )

    for i, rubric in enumerate(user_rubrics):
        compiled.add_user(rubric, index=i)
    return compiled
