"""The unbiased pass@k estimator, the k values reported for a group, and a group's table.

The runner's groups and summaries (:mod:`agentkit.env`), the summary of a run and
the leaderboards all use it.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["DEFAULT_PASS_THRESHOLD", "pass_at_k", "pass_ks", "pass_table"]

#: A rollout "passes" when its total reward is at least this value.
DEFAULT_PASS_THRESHOLD = 1.0


def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased pass@k estimator of Chen et al. (2021).

    ``n`` samples of which ``c`` passed: the probability that at least one of
    ``k`` samples drawn without replacement passes, ``1 - C(n-c, k) / C(n, k)``,
    computed as a stable product. ``k > n`` is an error.
    """
    if n < 0 or c < 0 or c > n:
        raise ValueError(f"pass_at_k: need 0 <= c <= n, got n={n}, c={c}")
    if k < 1 or k > n:
        raise ValueError(f"pass_at_k: need 1 <= k <= n, got k={k}, n={n}")
    if n - c < k:
        return 1.0
    product = 1.0
    for i in range(n - c + 1, n + 1):
        product *= 1.0 - k / i
    return 1.0 - product


def pass_ks(n: int) -> list[int]:
    """The k values reported for groups of ``n``: 1, 2, 4, ... and ``n`` itself."""
    ks: list[int] = []
    k = 1
    while k < n:
        ks.append(k)
        k *= 2
    if n >= 1:
        ks.append(n)
    return ks


def pass_table(rewards: Sequence[float], threshold: float) -> dict[str, float]:
    """pass@k of one group's scored ``rewards`` for each reported k (by k as a string,
    as summary.json and groups.jsonl hold it): a reward passes at ``threshold`` or more."""
    n = len(rewards)
    c = sum(1 for r in rewards if r >= threshold)
    return {str(k): pass_at_k(n, c, k) for k in pass_ks(n)}
