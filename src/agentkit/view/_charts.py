"""What the charts draw: the distributions of reward, duration, tokens and cost, binned here.

The page gets a few hundred numbers per chart whatever the size of the runs:
for every run of a chart, its count, quantiles (the box of a box plot:
5th, 25th, 50th, 75th and 95th percentiles, with the least, the greatest
and the mean) and its counts in bins that all the runs of the chart share,
so that their histograms line up. The values are read once per run
(:func:`values_of`) and kept until the run changes.

Which rollouts count is what docs/statistics.md says: the reward of scored
rollouts only (one that could not run, or ran without a total reward, has
none); duration, tokens and cost of every finished rollout that has one,
since they were spent.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

import attrs
import numpy as np

from agentkit.runs import Rollout

__all__ = ["METRICS", "Values", "distributions", "values_of"]

#: The charted quantities: key, label, unit.
METRICS: tuple[tuple[str, str, str], ...] = (
    ("reward", "Reward", ""),
    ("duration_s", "Duration", "s"),
    ("tokens", "Tokens (input + output)", "tokens"),
    ("cost", "Cost", "$"),
)
#: Bins of a histogram of continuous values.
BINS = 20
#: Rewards taking at most this many distinct values are counted per value (0 and 1, say).
DISCRETE_REWARDS = 12


@attrs.frozen
class Values:
    """One run's charted values, one float array per metric (see :data:`METRICS`)."""

    reward: np.ndarray
    duration_s: np.ndarray
    tokens: np.ndarray
    cost: np.ndarray

    def of(self, key: str) -> np.ndarray:
        """The values of metric ``key``."""
        found: np.ndarray = getattr(self, key)
        return found


def values_of(rollouts: Iterable[Rollout]) -> Values:
    """The charted values of finished rollouts (see the module doc for which count)."""
    reward: list[float] = []
    duration: list[float] = []
    tokens: list[float] = []
    cost: list[float] = []
    for r in rollouts:
        if r.reward is not None and not r.infrastructure and _finite(r.reward):
            reward.append(float(r.reward))
        d = r.timings.duration_s
        if isinstance(d, (int, float)) and _finite(d):
            duration.append(float(d))
        tokens.append(float(r.usage.input_tokens + r.usage.output_tokens))
        if r.cost is not None and _finite(r.cost):
            cost.append(float(r.cost))
    return Values(
        reward=np.asarray(reward, dtype=float),
        duration_s=np.asarray(duration, dtype=float),
        tokens=np.asarray(tokens, dtype=float),
        cost=np.asarray(cost, dtype=float),
    )


def _finite(value: Any) -> bool:
    return not isinstance(value, bool) and math.isfinite(value)


def _edges(low: float, high: float, *, integers: bool) -> np.ndarray:
    """About :data:`BINS` bins of a round width (1, 2, 2.5 or 5 times a power of ten;
    whole numbers for counts) from a multiple of it at or below ``low`` to ``high`` (the
    last bin holds its upper edge, as numpy's do)."""
    if high <= low:
        width = 1.0 if integers or low == 0 else 10.0 ** math.floor(math.log10(abs(low)))
        return np.array([low, low + width])
    raw = (high - low) / BINS
    power = 10.0 ** math.floor(math.log10(raw))
    width = next(m * power for m in (1.0, 2.0, 2.5, 5.0, 10.0) if m * power >= raw)
    if integers:
        width = max(1.0, math.ceil(width))
    start = math.floor(low / width) * width
    count = max(1, math.ceil((high - start) / width))
    if integers and start + count * width <= high:
        count += 1  # a bin per whole number: the greatest sits in a bin of its own
    return start + width * np.arange(count + 1)


def _summary(values: np.ndarray) -> dict[str, float] | None:
    if not len(values):
        return None
    p = np.quantile(values, [0.0, 0.05, 0.25, 0.5, 0.75, 0.95, 1.0])
    names = ("min", "p5", "q1", "median", "q3", "p95", "max")
    out = {name: float(x) for name, x in zip(names, p, strict=True)}
    out["mean"] = float(values.mean())
    return out


def _chart(key: str, label: str, unit: str, named: Sequence[tuple[str, Values]]) -> dict[str, Any]:
    arrays = [v.of(key) for _, v in named]
    present = [a for a in arrays if len(a)]
    chart: dict[str, Any] = {"key": key, "label": label, "unit": unit}
    if not present:
        chart.update(kind="empty", edges=[], values=[])
        chart["series"] = [
            {"run": name, "n": 0, "counts": [], "summary": None} for name, _ in named
        ]
        return chart
    everything = np.concatenate(present)
    distinct = np.unique(everything)
    if key == "reward" and len(distinct) <= DISCRETE_REWARDS:
        # a few reward values (0 and 1, say): a bar per value, not bins between them
        chart.update(kind="discrete", values=[float(x) for x in distinct], edges=[])
        series_counts = [
            [int(c) for c in np.bincount(np.searchsorted(distinct, a), minlength=len(distinct))]
            for a in arrays
        ]
    else:
        edges = _edges(float(distinct[0]), float(distinct[-1]), integers=key == "tokens")
        chart.update(kind="bins", edges=[float(x) for x in edges], values=[])
        series_counts = [[int(c) for c in np.histogram(a, bins=edges)[0]] for a in arrays]
    chart["series"] = [
        {"run": name, "n": len(a), "counts": c, "summary": _summary(a)}
        for (name, _), a, c in zip(named, arrays, series_counts, strict=True)
    ]
    return chart


def distributions(named: Sequence[tuple[str, Values]]) -> dict[str, Any]:
    """The charts of runs ``(name, values)``: one per metric, every run a series with its
    count, quantiles and counts in the chart's shared bins (``edges``) or, for rewards
    of a few distinct values, per value (``values``)."""
    return {
        "runs": [name for name, _ in named],
        "charts": [_chart(key, label, unit, named) for key, label, unit in METRICS],
    }
