"""Rubric primitives: named, weighted reward functions.

A reward function is a plain (sync or async) callable that declares, by
parameter name, what it needs among: ``task``, ``result``, ``output``,
``target``, ``messages``, ``sandbox``, ``context``, ``grading_spec``,
``state``. It returns a number, or a mapping of numbers whose entry under
the function's own name is the weighted value and whose other entries become
extra (weight 0) metrics of the same namespace.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

import attrs

from agentkit._errors import AgentkitError, ValidationError
from agentkit._result import INFRA_ERROR_KINDS

__all__ = [
    "REWARD_ARGUMENTS",
    "GradedAsFailure",
    "GradingUnavailable",
    "RewardFunction",
    "Rubric",
    "ScoreResult",
    "call_reward",
    "reward",
]

#: The names a reward function may declare as parameters.
REWARD_ARGUMENTS: tuple[str, ...] = (
    "task",
    "result",
    "output",
    "target",
    "messages",
    "sandbox",
    "context",
    "grading_spec",
    "state",
)

RewardCallable = Callable[
    ..., "float | Mapping[str, float] | Awaitable[float | Mapping[str, float]]"
]


def _check_name(_inst: Any, _attr: Any, value: str) -> None:
    if not value or any(c.isspace() for c in value):
        raise ValidationError("name", f"reward function name {value!r} is empty or has spaces")


@attrs.frozen(kw_only=True)
class RewardFunction:
    """One named reward function with its weight in the total reward."""

    name: str = attrs.field(validator=_check_name)
    fn: RewardCallable = attrs.field(eq=False)
    weight: float = 1.0
    description: str = ""

    def manifest(self) -> dict[str, Any]:
        """A JSON description: name, weight, description and where the code lives."""
        fn = self.fn
        return {
            "name": self.name,
            "weight": self.weight,
            "description": self.description,
            "function": f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}",
        }


def reward(
    fn: RewardCallable | None = None,
    *,
    name: str | None = None,
    weight: float = 1.0,
    description: str | None = None,
) -> Any:
    """Turn a function into a :class:`RewardFunction`.

    Usable bare (``@reward``) or with arguments (``@reward(weight=0)``).
    """

    def wrap(f: RewardCallable) -> RewardFunction:
        doc = description
        if doc is None:
            doc = (inspect.getdoc(f) or "").strip().splitlines()[0] if inspect.getdoc(f) else ""
        fn_name: str = name or str(getattr(f, "__name__", "reward"))
        return RewardFunction(name=fn_name, fn=f, weight=weight, description=doc or "")

    return wrap(fn) if fn is not None else wrap


class Rubric:
    """An ordered group of reward functions.

    >>> rubric = Rubric([exact_match], weights=[1.0])  # doctest: +SKIP
    """

    def __init__(
        self,
        functions: Iterable[RewardFunction | RewardCallable] = (),
        *,
        weights: Iterable[float] | None = None,
        name: str | None = None,
    ) -> None:
        self.name = name
        self.functions: list[RewardFunction] = []
        funcs = list(functions)
        ws = list(weights) if weights is not None else None
        if ws is not None and len(ws) != len(funcs):
            raise ValidationError(
                "weights", f"{len(ws)} weights given for {len(funcs)} reward functions"
            )
        for i, f in enumerate(funcs):
            self.add(f, weight=ws[i] if ws is not None else None)

    def add(
        self,
        fn: RewardFunction | RewardCallable,
        *,
        name: str | None = None,
        weight: float | None = None,
    ) -> Rubric:
        """Append a reward function; a duplicate name in this rubric is an error."""
        if isinstance(fn, RewardFunction):
            rf = fn
            if name is not None or weight is not None:
                rf = attrs.evolve(
                    rf, name=name or rf.name, weight=rf.weight if weight is None else weight
                )
        else:
            rf = reward(fn, name=name, weight=1.0 if weight is None else weight)
        if any(existing.name == rf.name for existing in self.functions):
            raise ValidationError(
                f"rubric.{rf.name}", "duplicate reward function name in the same rubric"
            )
        self.functions.append(rf)
        return self

    def __iter__(self) -> Any:
        return iter(self.functions)

    def __len__(self) -> int:
        return len(self.functions)

    def manifest(self) -> list[dict[str, Any]]:
        """JSON description of every function, in order."""
        return [f.manifest() for f in self.functions]

    def __repr__(self) -> str:
        names = ", ".join(f"{f.name}×{f.weight:g}" for f in self.functions)
        return f"Rubric({names})"


async def call_reward(func: RewardFunction, available: Mapping[str, Any]) -> dict[str, float]:
    """Call ``func`` with the arguments it declares and return its metrics.

    The result maps ``func.name`` (and, for mapping results, the extra keys)
    to finite floats. Anything else (a non-number, NaN, a missing main key)
    raises :class:`ValueError` naming the function.
    """
    fn = func.fn
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        params = {}  # type: ignore[assignment]
    takes_kwargs = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    kwargs = {k: v for k, v in available.items() if takes_kwargs or k in params}
    value = fn(**kwargs)
    if inspect.isawaitable(value):
        value = await value
    return _metrics_of(func.name, value)


class GradedAsFailure(AgentkitError):
    """Raised by a reward function when the rollout itself left nothing it can grade.

    The verifier's command was missing or replaced, its reward file unreadable,
    its folder destroyed: grading the agent broke is the agent's failure, not a
    rollout that could not be scored. The function's metric is scored
    ``value`` (0 by default; a mapping gives its metrics, as a reward function
    returns them), counted in every mean, pass@k and export like any score, and
    the rollout's ``error_kind`` becomes ``kind`` (when its harness named none),
    its ``scoring_errors`` say what happened (``"scored": "as a failure"``).
    """

    def __init__(
        self, message: str, *, kind: str, value: float | Mapping[str, float] = 0.0
    ) -> None:
        if not kind or any(c.isspace() for c in kind):
            raise ValueError(f"GradedAsFailure: kind {kind!r} must be one word, like 'no_reward'")
        self.kind = kind
        self.value = value
        super().__init__(message)


class GradingUnavailable(AgentkitError):
    """Raised by a reward function when grading could not run for a reason that is not
    the rollout's: the verifier's own sandbox could not start, say.

    The rollout then *could not run*, as an infrastructure failure: ``kind`` must
    be one of :data:`~agentkit.INFRA_ERROR_KINDS` (``sandbox_start`` by default,
    retried like a sandbox that did not start); it gets no reward and
    ``--resume`` runs it again.
    """

    def __init__(self, message: str, *, kind: str = "sandbox_start") -> None:
        if kind not in INFRA_ERROR_KINDS:
            raise ValueError(
                f"GradingUnavailable: kind {kind!r} is not an infrastructure failure "
                f"(one of {', '.join(sorted(INFRA_ERROR_KINDS))})"
            )
        self.kind = kind
        super().__init__(message)


@attrs.frozen
class ScoreResult:
    """Scores of one rollout: metric values, the total, and any scoring errors.

    ``failure`` (``kind``, ``error``) is the first :class:`GradedAsFailure` a
    reward function raised (its value is in the total); ``unavailable`` the
    first :class:`GradingUnavailable` (the total is then None).
    """

    rewards: dict[str, float]
    total: float | None
    errors: list[dict[str, str]]
    failure: dict[str, str] | None = None
    unavailable: dict[str, str] | None = None


def _as_float(name: str, value: Any) -> float:
    if isinstance(value, bool):
        return float(value)
    if not isinstance(value, (int, float)):
        raise ValueError(
            f"reward function {name!r} returned {type(value).__name__} {value!r}; expected a number"
        )
    f = float(value)
    if not math.isfinite(f):
        raise ValueError(f"reward function {name!r} returned a non-finite value {f!r}")
    return f


def _metrics_of(name: str, value: Any) -> dict[str, float]:
    if isinstance(value, Mapping):
        if name not in value:
            raise ValueError(
                f"reward function {name!r} returned a mapping without its own key {name!r} "
                f"(keys: {', '.join(map(str, value))})"
            )
        return {str(k): _as_float(f"{name}.{k}", v) for k, v in value.items()}
    return {name: _as_float(name, value)}
