"""Harbor grading as an agentkit rubric: the taskset's ``default_grading_spec``.

One reward function, ``reward``, compiled as ``core.reward``. It opens the
rollout's :class:`~agentkit_harbor.HarborTrial` on the sandbox the harness
used and grades it (:meth:`~agentkit_harbor.HarborTrial.grade`): for a
single-step task, artifacts then the verifier; for a multi-step task, the
step records the harness left in ``result.raw["harbor"]["steps"]`` (or every
step verified now, when a harness ran the task in one go). The total
(``core.reward``) is the ``reward`` key, the only key, or the taskset's
``main_reward`` choice over several keys; every key is also a metric
``core.<key>``. Every failure raises, so the runner records a scoring error
instead of a silent 0.
"""

from __future__ import annotations

import math

from agentkit import HarnessResult, Rubric, RunContext, Sandbox, Task, reward
from agentkit_harbor._errors import HarborGradingError, RewardOutOfRangeError
from agentkit_harbor._rewards import check_main_reward
from agentkit_harbor._trial import HarborTrial

__all__ = ["DEFAULT_REWARD_RANGE", "check_reward_range", "harbor_reward", "harbor_rubric"]

#: The total rewards a Harbor task may give unless ``-T reward_range`` says otherwise.
DEFAULT_REWARD_RANGE = "0,1"


def check_reward_range(text: str | None) -> tuple[float, float] | None:
    """``"LOW,HIGH"`` (finite numbers, LOW <= HIGH) as a pair; None (or ``none``): no bound.

    Anything else is a :class:`ValueError` saying what was expected.
    """
    if text is None or text.strip().lower() in ("none", ""):
        return None
    parts = text.split(",")
    try:
        low, high = (float(p) for p in parts) if len(parts) == 2 else (math.nan, math.nan)
    except ValueError:
        low = high = math.nan
    if not (math.isfinite(low) and math.isfinite(high) and low <= high):
        raise ValueError(f"reward_range must be 'LOW,HIGH' (like '0,1') or 'none', got {text!r}")
    return low, high


async def harbor_reward(
    sandbox: Sandbox | None,
    task: Task,
    result: HarnessResult | None = None,
    context: RunContext | None = None,
    *,
    main_reward: str = "mean",
    reward_range: tuple[float, float] | None = (0.0, 1.0),
) -> dict[str, float]:
    """Run Harbor's verifier for ``task`` and return its rewards.

    ``sandbox`` is the agent's; the verifier runs where the task's isolation
    level says (``shared``, ``fork``, ``separate``; see
    :class:`~agentkit_harbor.HarborTaskset`). ``main_reward`` picks the
    total when reward.json has several keys and no ``reward`` key; a total
    outside ``reward_range`` is a :class:`RewardOutOfRangeError`. Grading
    the agent broke raises an error that is also an
    :class:`agentkit.GradedAsFailure` (scored 0).
    """
    if sandbox is None:
        raise HarborGradingError(
            "Harbor grading runs tests/test.sh in the rollout's sandbox, and none was given"
        )
    trial = HarborTrial.open(task, sandbox, context)
    metrics = await trial.grade(result, main_reward_strategy=main_reward)
    total = metrics.get("reward")
    if reward_range is not None and total is not None:
        low, high = reward_range
        if not low <= total <= high:
            raise RewardOutOfRangeError(
                f"the total reward {total:g} is outside the taskset's reward_range "
                f"[{low:g}, {high:g}] (-T reward_range=LOW,HIGH or none to change it)"
            )
    return metrics


def harbor_rubric(
    main_reward: str = "mean", reward_range: str | None = DEFAULT_REWARD_RANGE
) -> Rubric:
    """The rubric of every Harbor taskset: one ``reward`` function (``core.reward``).

    ``main_reward`` (``mean``, ``min``, ``max``, ``sum`` or ``key:NAME``)
    derives the total from several reward.json keys without a ``reward`` key;
    ``reward_range`` (``"LOW,HIGH"`` or None) bounds the total.
    """
    strategy = check_main_reward(main_reward)
    bounds = check_reward_range(reward_range)

    async def graded(
        sandbox: Sandbox | None,
        task: Task,
        result: HarnessResult | None = None,
        context: RunContext | None = None,
    ) -> dict[str, float]:
        return await harbor_reward(
            sandbox, task, result, context, main_reward=strategy, reward_range=bounds
        )

    graded.__qualname__ = graded.__name__ = harbor_reward.__qualname__  # the manifest's name
    total = (
        f"key {strategy[4:]!r}"
        if strategy.startswith("key:")
        else f"the 'reward' key, the only key, else the {strategy} of the keys"
    )
    bounded = "" if bounds is None else f", within [{bounds[0]:g}, {bounds[1]:g}]"
    fn = reward(
        graded,
        name="reward",
        description="Harbor verifier: tests/test.sh, then /logs/verifier/reward.json or "
        f"reward.txt; total: {total}{bounded}",
    )
    return Rubric([fn], name="harbor")
