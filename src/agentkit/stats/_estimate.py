"""The two estimators: a mean with a standard error clustered by task, and a paired t-test.

Both take per-task numbers (a task's scored rollouts and their mean reward),
which are all either needs: the clustered variance of a mean depends on the
rollouts only through each task's count and mean. The Student t distribution
comes from scipy (``scipy.special.stdtr`` and ``stdtrit``, the functions
behind ``scipy.stats.t``), imported when an interval is first computed. The
formulas, with a worked example, are in docs/statistics.md.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence

import attrs

__all__ = [
    "DEFAULT_CONFIDENCE",
    "Estimate",
    "PairedTest",
    "clustered_mean",
    "clustered_mean_of_groups",
    "paired_t_test",
]

#: The confidence level of every interval unless one is asked for.
DEFAULT_CONFIDENCE = 0.95


@attrs.frozen(kw_only=True)
class Estimate:
    """A mean reward with its standard error clustered by task and a confidence interval.

    ``se`` is the cluster-robust (CR1) standard error: the sandwich variance
    ``Σ_task (Σ_rollout (r - mean))² / n²`` times ``G / (G - 1)`` for ``G``
    tasks, so that with one rollout per task it is the ordinary standard
    error of a mean. The interval is ``mean ± t(G - 1) · se`` with Student's t
    on ``G - 1`` degrees of freedom. With fewer than two tasks there is no
    standard error (``se``, ``ci_low``, ``ci_high`` and ``df`` are None);
    with no rollout at all ``mean`` is None too.
    """

    #: Rollouts in the estimate (scored ones).
    n: int
    #: Tasks (clusters) in the estimate.
    clusters: int
    mean: float | None
    se: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    #: Degrees of freedom of the t distribution: ``clusters - 1``.
    df: int | None = None
    confidence: float


@attrs.frozen(kw_only=True)
class PairedTest:
    """A paired t-test of per-task differences (A minus B): mean, interval, p-value.

    ``se`` is the standard deviation of the differences (``n - 1`` in its
    denominator) over ``√n``; the interval is ``mean ± t(n - 1) · se``; ``t``
    is ``mean / se`` and ``p_value`` its two-sided p-value, as
    ``scipy.stats.ttest_rel`` computes them. With fewer than two
    differences, or when every difference is the same number (no variance:
    the t statistic is undefined), ``t`` and ``p_value`` are None and
    ``note`` says why; with one difference ``se`` and the interval are None
    too, and with every difference equal the interval is that one number.
    """

    n: int
    mean: float | None
    se: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    df: int | None = None
    t: float | None = None
    p_value: float | None = None
    confidence: float
    note: str | None = None


def _check_confidence(confidence: float) -> None:
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be between 0 and 1, got {confidence!r}")


def _t_quantile(df: int, confidence: float) -> float:
    """The two-sided critical value: the ``(1 + confidence) / 2`` quantile of t(df)."""
    # scipy (a core dependency) is heavy to import: only when an interval is computed,
    # so that importing agentkit.stats, and every command that may use it, stays fast
    from scipy import special

    return float(special.stdtrit(df, (1.0 + confidence) / 2.0))


def _two_sided_p(df: int, t: float) -> float:
    """``P(|T| >= |t|)`` for ``T`` distributed as t(df)."""
    from scipy import special

    return float(2.0 * special.stdtr(df, -abs(t)))


def clustered_mean_of_groups(
    groups: Sequence[tuple[int, float]], *, confidence: float = DEFAULT_CONFIDENCE
) -> Estimate:
    """The mean of every rollout and its task-clustered interval, from ``(count, mean)`` per task.

    ``groups`` holds one ``(scored rollouts, their mean reward)`` pair per
    task; tasks with no scored rollout are left out. See :class:`Estimate`.
    """
    _check_confidence(confidence)
    groups = [(n, m) for n, m in groups if n > 0]
    total = sum(n for n, _ in groups)
    g = len(groups)
    if total == 0:
        return Estimate(n=0, clusters=0, mean=None, confidence=confidence)
    mean = math.fsum(n * m for n, m in groups) / total
    if g < 2:
        return Estimate(n=total, clusters=g, mean=mean, confidence=confidence)
    # Σ_task (Σ_rollout (r - mean))² = Σ_task (n_task · (mean_task - mean))²
    spread = math.fsum((n * (m - mean)) ** 2 for n, m in groups)
    se = math.sqrt(g / (g - 1) * spread) / total
    half = _t_quantile(g - 1, confidence) * se
    return Estimate(
        n=total,
        clusters=g,
        mean=mean,
        se=se,
        ci_low=mean - half,
        ci_high=mean + half,
        df=g - 1,
        confidence=confidence,
    )


def clustered_mean(
    values: Sequence[float],
    clusters: Sequence[Hashable] | None = None,
    *,
    confidence: float = DEFAULT_CONFIDENCE,
) -> Estimate:
    """The mean of ``values`` with a standard error clustered by ``clusters`` (task ids).

    ``clusters[i]`` names the task of ``values[i]``; without ``clusters``
    every value is its own cluster (the ordinary standard error of a mean).
    See :class:`Estimate`.
    """
    if clusters is None:
        return clustered_mean_of_groups([(1, float(v)) for v in values], confidence=confidence)
    if len(clusters) != len(values):
        raise ValueError(f"{len(values)} values but {len(clusters)} cluster labels")
    by_cluster: dict[Hashable, list[float]] = {}
    for value, cluster in zip(values, clusters, strict=True):
        by_cluster.setdefault(cluster, []).append(float(value))
    return clustered_mean_of_groups(
        [(len(v), math.fsum(v) / len(v)) for v in by_cluster.values()], confidence=confidence
    )


def paired_t_test(
    differences: Sequence[float], *, confidence: float = DEFAULT_CONFIDENCE
) -> PairedTest:
    """The paired t-test of per-task differences (A minus B). See :class:`PairedTest`."""
    _check_confidence(confidence)
    diffs = [float(d) for d in differences]
    n = len(diffs)
    if n == 0:
        return PairedTest(
            n=0, mean=None, confidence=confidence, note="no shared task: nothing to compare"
        )
    mean = math.fsum(diffs) / n
    if n == 1:
        return PairedTest(
            n=1,
            mean=mean,
            confidence=confidence,
            note="one shared task: no standard error, interval or p-value (they need two)",
        )
    if len(set(diffs)) == 1:
        same = diffs[0]
        why = (
            "A and B have the same mean reward on every shared task"
            if same == 0
            else f"A - B is exactly {same:g} on every shared task"
        )
        return PairedTest(
            n=n,
            mean=same,
            se=0.0,
            ci_low=same,
            ci_high=same,
            df=n - 1,
            confidence=confidence,
            note=f"{why}: the differences have no variance, so there is no t-test (no p-value)",
        )
    sd = math.sqrt(math.fsum((d - mean) ** 2 for d in diffs) / (n - 1))
    se = sd / math.sqrt(n)
    half = _t_quantile(n - 1, confidence) * se
    t = mean / se
    return PairedTest(
        n=n,
        mean=mean,
        se=se,
        ci_low=mean - half,
        ci_high=mean + half,
        df=n - 1,
        t=t,
        p_value=_two_sided_p(n - 1, t),
        confidence=confidence,
        note=None,
    )
