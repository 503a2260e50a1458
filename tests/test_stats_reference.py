"""agentkit.stats against maintained implementations: statsmodels' OLS with a covariance
clustered by task (``use_t=True``) for the mean reward's interval, and
``scipy.stats.ttest_rel`` for the paired comparison; on real runs and random numbers."""

from __future__ import annotations

import json
import math
import tomllib
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import scipy.stats
import statsmodels.api as sm
from _stats_runs import make_example_runs
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import agentkit.stats
from agentkit.stats import Scores, TaskScores, Totals

ROOT = Path(__file__).resolve().parents[1]


def statsmodels_interval(
    values: list[float], clusters: list[str]
) -> tuple[float, float, float, float]:
    """Mean, SE and 95% interval of an OLS of ``values`` on a constant, clustered."""
    codes = {c: i for i, c in enumerate(dict.fromkeys(clusters))}
    fit = sm.OLS(np.asarray(values, dtype=float), np.ones(len(values))).fit(
        cov_type="cluster", cov_kwds={"groups": np.array([codes[c] for c in clusters])}, use_t=True
    )
    low, high = fit.conf_int(alpha=0.05)[0]
    return float(fit.params[0]), float(fit.bse[0]), float(low), float(high)


def close(a: float | None, b: float) -> bool:
    return a is not None and math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return make_example_runs(tmp_path_factory.mktemp("stats-reference"))


def read_rewards(run: Path) -> list[tuple[str, float]]:
    """(task, reward) of every scored rollout, read from rollouts.jsonl by hand."""
    last: dict[str, dict[str, Any]] = {}
    for line in (run / "rollouts.jsonl").read_text().splitlines():
        d = json.loads(line)
        last[d["rollout_id"]] = d  # the last line of a rollout wins
    return [(d["task_id"], float(d["reward"])) for d in last.values() if d["reward"] is not None]


@pytest.mark.parametrize("name", ["A", "B", "C"])
def test_run_interval_equals_statsmodels(runs: dict[str, Path], name: str) -> None:
    pairs = read_rewards(runs[name])
    mean, se, low, high = statsmodels_interval([r for _, r in pairs], [t for t, _ in pairs])
    row = agentkit.stats.run_stats(runs[name]).reward
    assert row.n == len(pairs) and row.clusters == len({t for t, _ in pairs})
    assert close(row.mean, mean) and close(row.se, se)
    assert close(row.ci_low, low) and close(row.ci_high, high)


def test_paired_comparison_equals_ttest_rel(runs: dict[str, Path]) -> None:
    means = {}
    for name in ("A", "B"):
        by_task: dict[str, list[float]] = {}
        for task, reward in read_rewards(runs[name]):
            by_task.setdefault(task, []).append(reward)
        means[name] = {t: float(np.mean(v)) for t, v in by_task.items()}
    shared = [t for t in means["A"] if t in means["B"]]
    a = [means["A"][t] for t in shared]
    b = [means["B"][t] for t in shared]
    ref = scipy.stats.ttest_rel(a, b)
    ci = ref.confidence_interval(0.95)
    got = agentkit.stats.compare_runs(runs["A"], runs["B"]).test
    assert got.n == len(shared) == 4 and got.df == int(ref.df)
    assert close(got.t, float(ref.statistic)) and close(got.p_value, float(ref.pvalue))
    assert close(got.ci_low, float(ci.low)) and close(got.ci_high, float(ci.high))
    assert close(got.mean, float(np.mean(np.subtract(a, b))))


# -- random numbers ---------------------------------------------------------------------

#: rewards as graders give them: pass/fail, partial credit, and any real number
REWARDS = st.one_of(
    st.sampled_from([0.0, 1.0]),
    st.integers(0, 8).map(lambda i: i / 8),
    st.floats(-100, 100, allow_nan=False, allow_infinity=False),
)


@st.composite
def clustered(draw: st.DrawFn) -> tuple[list[float], list[str]]:
    """Rewards of rollouts with their tasks: 2 to 12 tasks, 1 to 6 rollouts each."""
    kind = draw(st.sampled_from(["binary", "eighths", "real"]))
    value = {
        "binary": st.sampled_from([0.0, 1.0]),
        "eighths": st.integers(0, 8).map(lambda i: i / 8),
        "real": st.floats(-100, 100, allow_nan=False, allow_infinity=False),
    }[kind]
    tasks = draw(st.integers(2, 12))
    values, clusters = [], []
    for t in range(tasks):
        for _ in range(draw(st.integers(1, 6))):
            values.append(draw(value))
            clusters.append(f"t{t}")
    order = draw(st.permutations(range(len(values))))
    return [values[i] for i in order], [clusters[i] for i in order]


@settings(max_examples=150, deadline=None)
@given(clustered())
def test_clustered_mean_equals_statsmodels(data: tuple[list[float], list[str]]) -> None:
    values, clusters = data
    mean, se, low, high = statsmodels_interval(values, clusters)
    got = agentkit.stats.clustered_mean(values, clusters)
    tol = 1e-9 * max(1.0, max(abs(v) for v in values))
    assert got.mean == pytest.approx(mean, rel=1e-9, abs=tol)
    assert got.se == pytest.approx(se, rel=1e-7, abs=tol)
    assert got.ci_low == pytest.approx(low, rel=1e-7, abs=tol)
    assert got.ci_high == pytest.approx(high, rel=1e-7, abs=tol)
    assert got.df == len(set(clusters)) - 1


@settings(max_examples=100, deadline=None)
@given(st.lists(REWARDS, min_size=2, max_size=40))
def test_one_rollout_per_task_is_the_ordinary_standard_error(values: list[float]) -> None:
    got = agentkit.stats.clustered_mean(values)  # every value its own task
    sem = float(scipy.stats.sem(values))
    tol = 1e-9 * max(1.0, max(abs(v) for v in values))
    assert got.se == pytest.approx(sem, rel=1e-7, abs=tol)
    if sem > 0:
        low, high = scipy.stats.t.interval(0.95, len(values) - 1, loc=np.mean(values), scale=sem)
        assert got.ci_low == pytest.approx(low, rel=1e-7, abs=tol)
        assert got.ci_high == pytest.approx(high, rel=1e-7, abs=tol)


@settings(max_examples=100, deadline=None)
@given(
    st.integers(2, 15).flatmap(
        lambda g: st.tuples(
            st.integers(1, 5),
            st.lists(
                st.lists(st.sampled_from([0.0, 1.0]), min_size=5, max_size=5),
                min_size=g,
                max_size=g,
            ),
        )
    )
)
def test_equal_rollouts_per_task_give_the_standard_error_of_task_means(
    data: tuple[int, list[list[float]]],
) -> None:
    k, rows = data
    values = [v for row in rows for v in row[:k]]
    clusters = [f"t{i}" for i, _ in enumerate(rows) for _ in range(k)]
    task_means = [float(np.mean(row[:k])) for row in rows]
    got = agentkit.stats.clustered_mean(values, clusters)
    assert got.se == pytest.approx(float(scipy.stats.sem(task_means)), rel=1e-9, abs=1e-12)


@settings(max_examples=150, deadline=None)
@given(
    st.integers(2, 30).flatmap(
        lambda n: st.lists(st.tuples(st.integers(0, 8), st.integers(0, 8)), min_size=n, max_size=n)
    )
)
def test_paired_t_test_equals_ttest_rel(pairs: list[tuple[int, int]]) -> None:
    a = [x / 8 for x, _ in pairs]
    b = [y / 8 for _, y in pairs]
    diffs = [x - y for x, y in zip(a, b, strict=True)]
    assume(len(set(diffs)) > 1)  # equal differences: no t-test (tested below)
    ref = scipy.stats.ttest_rel(a, b)
    ci = ref.confidence_interval(0.95)
    got = agentkit.stats.paired_t_test(diffs)
    assert got.t == pytest.approx(float(ref.statistic), rel=1e-9)
    assert got.p_value == pytest.approx(float(ref.pvalue), rel=1e-7, abs=1e-15)
    assert got.ci_low == pytest.approx(float(ci.low), rel=1e-9, abs=1e-12)
    assert got.ci_high == pytest.approx(float(ci.high), rel=1e-9, abs=1e-12)
    assert got.df == int(ref.df) and got.note is None


@given(st.integers(2, 20), st.integers(-8, 8))
def test_equal_differences_have_no_p_value(n: int, eighths: int) -> None:
    got = agentkit.stats.paired_t_test([eighths / 8] * n)
    assert got.mean == eighths / 8 and got.se == 0.0
    assert got.ci_low == got.ci_high == eighths / 8
    assert got.t is None and got.p_value is None and got.note
    assert ("same mean reward" in got.note) == (eighths == 0)


def test_fewer_than_two_tasks() -> None:
    one = agentkit.stats.paired_t_test([0.5])
    assert one.mean == 0.5 and one.se is None and one.p_value is None and one.ci_low is None
    assert one.note and "one shared task" in one.note
    none = agentkit.stats.paired_t_test([])
    assert none.mean is None and none.note
    single = agentkit.stats.clustered_mean([1.0, 0.0, 1.0], ["t", "t", "t"])
    assert single.mean == pytest.approx(2 / 3) and single.se is None and single.ci_low is None
    empty = agentkit.stats.clustered_mean([])
    assert empty.mean is None and empty.n == 0


def scores(means: dict[str, tuple[int, float]]) -> Scores:
    return Scores(
        tasks=[
            TaskScores(
                task_id=t, rollouts=n, scored=n, could_not_run=0, unscored=0, mean=m,
                passed=round(m * n),
            )
            for t, (n, m) in means.items()
        ],
        totals=Totals(),
        pass_threshold=1.0,
    )  # fmt: skip


TASK_MEANS = st.dictionaries(
    st.sampled_from([f"t{i}" for i in range(12)]),
    st.integers(1, 4).flatmap(
        lambda n: st.tuples(st.just(n), st.integers(0, n).map(lambda c: c / n))
    ),
    min_size=0,
    max_size=12,
)


@given(TASK_MEANS, TASK_MEANS)
def test_comparison_is_antisymmetric_and_counts_every_task(
    a: dict[str, tuple[int, float]], b: dict[str, tuple[int, float]]
) -> None:
    ab = agentkit.stats.compare_scores(scores(a), scores(b))
    ba = agentkit.stats.compare_scores(scores(b), scores(a))
    shared = set(a) & set(b)
    assert ab.shared == len(shared) and set(ab.only_a) == set(a) - shared
    assert set(ab.only_b) == set(b) - shared
    assert ab.wins_a + ab.wins_b + ab.ties == len(shared)
    assert (ab.wins_a, ab.wins_b, ab.ties) == (ba.wins_b, ba.wins_a, ba.ties)
    if shared:
        assert ab.test.mean == pytest.approx(-(ba.test.mean or 0.0), abs=1e-12)
        assert ab.test.p_value == ba.test.p_value or (
            ab.test.p_value == pytest.approx(ba.test.p_value, rel=1e-12)
        )
    top = ab.top(3)
    assert len(top) == min(3, sum(1 for d in ab.tasks if d.difference != 0))
    sizes = [abs(d.difference) for d in top]
    assert sizes == sorted(sizes, reverse=True)
    assert all(abs(d.difference) <= sizes[-1] for d in ab.tasks if d not in top) if top else True


def test_scipy_comes_with_the_core() -> None:
    """``agentkit compare`` must work after ``pip install agentkit``: scipy is a core
    dependency, not an extra."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert any(d.split(">")[0].split("=")[0].strip() == "scipy" for d in project["dependencies"])
