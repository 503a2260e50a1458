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

from agentkit import HarnessResult, Rubric, RunContext, Sandbox, Task, reward
from agentkit_harbor._errors import HarborGradingError
from agentkit_harbor._trial import HarborTrial
from agentkit_harbor._verify import check_main_reward

__all__ = ["harbor_reward", "harbor_rubric"]


async def harbor_reward(
    sandbox: Sandbox | None,
    task: Task,
    result: HarnessResult | None = None,
    context: RunContext | None = None,
    *,
    main_reward: str = "mean",
) -> dict[str, float]:
    """Run Harbor's verifier for ``task`` in ``sandbox`` and return its rewards.

    ``main_reward`` picks the total when reward.json has several keys and
    no ``reward`` key (see :class:`~agentkit_harbor.HarborTaskset`).
    """
    if sandbox is None:
        raise HarborGradingError(
            "Harbor grading runs tests/test.sh in the rollout's sandbox, and none was given"
        )
    trial = HarborTrial.open(task, sandbox, context)
    return await trial.grade(result, main_reward_strategy=main_reward)


def harbor_rubric(main_reward: str = "mean") -> Rubric:
    """The rubric of every Harbor taskset: one ``reward`` function (``core.reward``).

    ``main_reward`` (``mean``, ``min``, ``max``, ``sum`` or ``key:NAME``)
    derives the total from several reward.json keys without a ``reward`` key.
    """
    strategy = check_main_reward(main_reward)

    async def graded(
        sandbox: Sandbox | None,
        task: Task,
        result: HarnessResult | None = None,
        context: RunContext | None = None,
    ) -> dict[str, float]:
        return await harbor_reward(sandbox, task, result, context, main_reward=strategy)

    graded.__qualname__ = graded.__name__ = harbor_reward.__qualname__  # the manifest's name
    total = (
        f"key {strategy[4:]!r}"
        if strategy.startswith("key:")
        else f"the 'reward' key, the only key, else the {strategy} of the keys"
    )
    fn = reward(
        graded,
        name="reward",
        description="Harbor verifier: tests/test.sh, then /logs/verifier/reward.json or "
        f"reward.txt; total: {total}",
    )
    return Rubric([fn], name="harbor")
