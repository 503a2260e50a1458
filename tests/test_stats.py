"""Group statistics: the unbiased pass@k estimator and GRPO advantages."""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentkit.stats import group_advantages, pass_at_k, pass_ks


def brute_force_pass_at_k(outcomes: list[bool], k: int) -> float:
    """Fraction of all k-subsets that contain at least one success."""
    subsets = list(itertools.combinations(outcomes, k))
    return sum(any(s) for s in subsets) / len(subsets)


@given(st.lists(st.booleans(), min_size=1, max_size=9), st.data())
def test_pass_at_k_equals_the_fraction_of_k_subsets_with_a_success(
    outcomes: list[bool], data: st.DataObject
) -> None:
    k = data.draw(st.integers(min_value=1, max_value=len(outcomes)))
    expected = brute_force_pass_at_k(outcomes, k)
    assert pass_at_k(len(outcomes), sum(outcomes), k) == pytest.approx(expected, abs=1e-12)


def test_pass_at_k_known_values() -> None:
    assert pass_at_k(10, 0, 1) == 0.0
    assert pass_at_k(10, 10, 5) == 1.0
    assert pass_at_k(10, 3, 1) == pytest.approx(0.3)
    # 1 - C(7,2)/C(10,2) = 1 - 21/45
    assert pass_at_k(10, 3, 2) == pytest.approx(1 - 21 / 45)
    assert pass_at_k(4, 1, 4) == 1.0


def test_pass_at_k_rejects_impossible_arguments() -> None:
    with pytest.raises(ValueError, match="k="):
        pass_at_k(3, 1, 4)
    with pytest.raises(ValueError, match="c <= n"):
        pass_at_k(3, 4, 1)


def test_reported_ks_are_powers_of_two_and_n() -> None:
    assert pass_ks(1) == [1]
    assert pass_ks(5) == [1, 2, 4, 5]
    assert pass_ks(8) == [1, 2, 4, 8]


def test_advantages_are_reward_minus_group_mean() -> None:
    adv = group_advantages([1.0, 0.0, 0.0, 1.0])
    assert adv == [0.5, -0.5, -0.5, 0.5]
    assert math.fsum(a for a in adv if a is not None) == 0.0


def test_normalized_advantages_divide_by_std_plus_eps() -> None:
    adv = group_advantages([1.0, 0.0], normalize=True, eps=1e-6)
    assert adv[0] == pytest.approx(0.5 / (0.5 + 1e-6))
    assert adv[1] == pytest.approx(-0.5 / (0.5 + 1e-6))
    # a constant group: std 0, advantages 0 (no division by zero)
    assert group_advantages([0.7, 0.7, 0.7], normalize=True) == pytest.approx([0, 0, 0], abs=1e-9)


def test_group_of_one_gets_zero_and_unscored_get_none() -> None:
    assert group_advantages([0.3]) == [0.0]
    assert group_advantages([None, 1.0]) == [None, 0.0]
    assert group_advantages([None, 1.0, 0.0]) == [None, 0.5, -0.5]
