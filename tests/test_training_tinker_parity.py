"""The training pieces the Fleet Tinker loop and SkyRL use, as they compute them.

Upstream: NovaSky-AI/SkyRL 55a822642, ``skyrl-train/integrations/fleet/
entrypoints/main_fleet_tinker.py`` (``compute_advantages_grpo`` and
``normalize_advantages``, lines 128-175; ``prepare_training_data`` line 304)
and ``skyrl-train/skyrl_train/generators/utils.py`` (``apply_overlong_filtering``,
lines 262-278). The expected advantages are the numbers upstream's functions
returned for the same rewards.
"""

from __future__ import annotations

import math
from typing import Any

import pytest

from agentkit import StepOutput
from agentkit._errors import ValidationError
from agentkit.training import (
    TrainingRecord,
    assign_advantages,
    batch_normalize,
    filter_overlong,
    is_overlong,
    prepare,
)


def rec(task: str, i: int, reward: float | None, **kw: Any) -> TrainingRecord:
    return TrainingRecord(
        rollout_id=f"{task}-{i}",
        task_id=task,
        example_id=task,
        rollout_index=i,
        group=0,
        status="completed",
        reward=reward,
        **kw,
    )


def batch(rewards: list[float], group_size: int) -> list[TrainingRecord]:
    return [rec(f"t{i // group_size}", i % group_size, r) for i, r in enumerate(rewards)]


@pytest.mark.parametrize(
    ("rewards", "group_size", "expected"),
    [
        (
            [1, 0, 0, 1, 0, 0, 0, 0, 1, 1, 1, 0.5],
            4,
            [
                1.5894387779517385,
                -1.5894387779517385,
                -1.5894387779517385,
                1.5894387779517385,
                0.0,
                0.0,
                0.0,
                0.0,
                0.3973596944879346,
                0.3973596944879346,
                0.3973596944879346,
                -1.1920790834638038,
            ],
        ),
        ([1.0, 1.0, 1.0, 1.0], 2, [0.0, 0.0, 0.0, 0.0]),  # std below 1e-8: zeros
        ([0.25], 1, [0.0]),  # one value: returned as centred
        ([1, 0, 1], 3, [0.7071067661865478, -1.4142135323730955, 0.7071067661865478]),
    ],
)
def test_batch_normalisation_is_the_tinker_loops(
    rewards: list[float], group_size: int, expected: list[float]
) -> None:
    # main_fleet_tinker.py:139-175 with normalize=True, as the loop calls it (line 812)
    out = assign_advantages(batch(rewards, group_size), normalize="batch")
    assert [r.advantage for r in out] == pytest.approx(expected, rel=1e-12, abs=1e-12)
    via_prepare = prepare(batch(rewards, group_size), normalize="batch", filter_overlong=False)
    assert [r.advantage for r in via_prepare] == [r.advantage for r in out]


def test_batch_normalisation_differs_from_per_group_and_skips_unscored() -> None:
    records = [*batch([1, 0, 0, 1, 1, 1, 1, 0.5], 4), rec("t9", 0, None)]
    per_group = [r.advantage for r in assign_advantages(records, normalize=True)]
    per_batch = [r.advantage for r in assign_advantages(records, normalize="batch")]
    assert per_group[-1] is None and per_batch[-1] is None
    assert per_group[:8] != pytest.approx(per_batch[:8])
    scored = [a for a in per_batch if a is not None]
    assert math.fsum(scored) == pytest.approx(0.0, abs=1e-9)
    assert batch_normalize([2.0, None, 4.0], eps=1e-8) == pytest.approx([-1.0, None, 1.0])
    with pytest.raises(ValidationError, match="normalize"):
        assign_advantages(records, normalize="tokens")  # type: ignore[arg-type]


def test_dapo_filter_keyed_on_the_eos_token() -> None:
    # utils.py:262-278: every token's mask is zeroed when the response does not end with
    # the eos token id (or is empty); the stop reason is not consulted
    eos = 2
    ended = rec("a", 0, 1.0, completion_token_ids=[5, 6, eos], completion_mask=[1, 1, 1])
    cut = rec("a", 1, 1.0, completion_token_ids=[5, 6, 7], completion_mask=[1, 0, 1])
    empty = rec("a", 2, 1.0, completion_token_ids=[], completion_mask=[])
    length_but_eos = rec(
        "a", 3, 1.0, completion_token_ids=[5, eos], completion_mask=[1, 1], stop_reason="length"
    )
    no_ids = rec("a", 4, 1.0, stop_reason="length")
    records = [ended, cut, empty, length_but_eos, no_ids]
    assert [is_overlong(r, eos_token_id=eos) for r in records] == [
        False,
        True,
        True,
        False,
        True,  # without token ids, the stop reason decides
    ]
    out = filter_overlong(records, eos_token_id=eos)
    assert out[0] == ended and out[3] == length_but_eos
    assert (out[1].completion_mask, out[1].loss_mask, out[1].overlong) == ([0, 0, 0], 0.0, True)
    # keyed on the stop reason (the default), the same records filter differently
    assert [is_overlong(r) for r in records] == [False, False, False, True, True]


def test_step_output_reads_like_skyrl_gyms_typed_dict() -> None:
    # main_fleet_tinker.py:486-495 reads step_output["observations"], ["reward"], ["done"]
    out = StepOutput(
        observations=[{"role": "user", "content": "Tool result:\n42"}],
        reward=0.0,
        done=False,
        metadata={"turn": 1},
    )
    assert out["observations"][0].get("content", "") == "Tool result:\n42"
    assert (out["reward"], out["done"], out["metadata"]) == (0.0, False, {"turn": 1})
    assert out.get("metadata") == {"turn": 1} and out.get("postprocessed_action") is None
    assert "done" in out and "other" not in out and next(iter(out.keys())) == "observations"
    with pytest.raises(KeyError):
        out["other"]
