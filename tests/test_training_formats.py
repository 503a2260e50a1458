"""The trainer formats worked out by hand, position by position: what the files hold is
checked against numbers written here, not against what agentkit computes elsewhere.

- Tinker: the worked example of docs/training-data.md (sequence 0: prompt
  ``[1, 2, 3]``, completion ``[10, 11, 4, 5, 12, 13]``, mask ``[1, 1, 0, 0, 1, 1]``,
  advantage 0.5), and a sequence without a prompt; ``loss_fn_inputs`` is what
  tinker-cookbook's ``train_step`` sends ``forward_backward`` (no ``mask``), the
  mask beside it.
- SkyRL: a rollout's reward on its last row, 0.0 on the rows before (as SkyRL's
  Harbor generator writes a trajectory's steps).
- verifiers: a sequence without the sampler's logprobs marks no token trainable.

The trainers' own packages load these files in the ``trainers`` nox session
(tests/trainers/test_load_exports.py).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from agentkit.training import TrainingRecord, write_records


def write_tinker(records: list[TrainingRecord], out: Path) -> int:
    return write_records(records, out, format="tinker")


def write_skyrl(records: list[TrainingRecord], out: Path) -> int:
    return write_records(records, out, format="skyrl")


def write_verifiers(records: list[TrainingRecord], out: Path) -> int:
    return write_records(records, out, format="verifiers")


def record(**fields: Any) -> TrainingRecord:
    base: dict[str, Any] = {
        "rollout_id": "add-r0",
        "task_id": "tasks:add",
        "example_id": "add",
        "rollout_index": 0,
        "group": 0,
        "status": "completed",
        "reward": 1.0,
        "advantage": 0.5,
    }
    return TrainingRecord(**{**base, **fields})


#: The worked example's two sequences (docs/training-data.md, "A worked example").
SEQ0 = record(
    sequence=0,
    calls=[0, 1],
    sequence_start="first",
    prompt_token_ids=[1, 2, 3],
    completion_token_ids=[10, 11, 4, 5, 12, 13],
    completion_mask=[1, 1, 0, 0, 1, 1],
    completion_logprobs=[-0.1, -0.2, 0.0, 0.0, -0.3, -0.4],
    stop_reason="tool_calls",
)
SEQ1 = record(
    sequence=1,
    calls=[2],
    sequence_start="prefix_break",
    prompt_token_ids=[1, 2, 3, 6, 7],
    completion_token_ids=[14, 15],
    completion_mask=[1, 1],
    completion_logprobs=[-0.5, -0.6],
    stop_reason="stop",
)


def tensor(data: list[Any], dtype: str) -> dict[str, Any]:
    return {"data": data, "dtype": dtype, "shape": [len(data)]}


def test_a_tinker_datum_by_position(tmp_path: Path) -> None:
    """Position i of the inputs predicts token i + 1: targets are the tokens from the
    second on; logprobs, advantages and mask follow the targets."""
    out = tmp_path / "t.jsonl"
    assert write_tinker([SEQ0, SEQ1], out) == 2
    first, second = (json.loads(x) for x in out.read_text().splitlines())
    #          targets:  2    3    10    11   4    5    12    13
    assert first["model_input"] == {
        "chunks": [{"type": "encoded_text", "tokens": [1, 2, 3, 10, 11, 4, 5, 12]}]
    }
    assert first["loss_fn_inputs"] == {
        "target_tokens": tensor([2, 3, 10, 11, 4, 5, 12, 13], "int64"),
        "logprobs": tensor([0.0, 0.0, -0.1, -0.2, 0.0, 0.0, -0.3, -0.4], "float32"),
        "advantages": tensor([0.0, 0.0, 0.5, 0.5, 0.0, 0.0, 0.5, 0.5], "float32"),
    }
    assert first["mask"] == tensor([0.0, 0.0, 1.0, 1.0, 0.0, 0.0, 1.0, 1.0], "float32")
    assert first["agentkit"]["calls"] == [0, 1] and first["agentkit"]["sequence"] == 0
    #          targets:  2    3    6    7    14    15
    assert second["model_input"]["chunks"][0]["tokens"] == [1, 2, 3, 6, 7, 14]
    assert second["loss_fn_inputs"] == {
        "target_tokens": tensor([2, 3, 6, 7, 14, 15], "int64"),
        "logprobs": tensor([0.0, 0.0, 0.0, 0.0, -0.5, -0.6], "float32"),
        "advantages": tensor([0.0, 0.0, 0.0, 0.0, 0.5, 0.5], "float32"),
    }
    assert second["mask"] == tensor([0.0, 0.0, 0.0, 0.0, 1.0, 1.0], "float32")


def test_a_tinker_datum_without_a_prompt_or_logprobs(tmp_path: Path) -> None:
    """No prompt: the first completion token is no target (nothing predicts it). No
    logprobs: no ``logprobs`` input, which Tinker's importance-sampling loss refuses
    rather than train on zeros. No advantage (no reward): no datum."""
    alone = record(
        prompt_token_ids=[],
        completion_token_ids=[7, 8, 9],
        completion_mask=[1, 0, 1],
        completion_logprobs=None,
        advantage=-0.25,
    )
    unscored = record(rollout_id="x", reward=None, advantage=None, **_tokens(SEQ1))
    out = tmp_path / "t.jsonl"
    assert write_tinker([alone, unscored], out) == 1
    (line,) = (json.loads(x) for x in out.read_text().splitlines())
    assert line["model_input"]["chunks"][0]["tokens"] == [7, 8]
    assert line["loss_fn_inputs"] == {
        "target_tokens": tensor([8, 9], "int64"),
        "advantages": tensor([0.0, -0.25], "float32"),
    }
    assert line["mask"] == tensor([0.0, 1.0], "float32")


def _tokens(r: TrainingRecord) -> dict[str, Any]:
    return {
        "prompt_token_ids": r.prompt_token_ids,
        "completion_token_ids": r.completion_token_ids,
        "completion_mask": r.completion_mask,
        "completion_logprobs": r.completion_logprobs,
    }


def test_skyrl_puts_the_reward_on_a_rollouts_last_row(tmp_path: Path) -> None:
    """The worked example's rollout (2 sequences, reward 1.0) and a rollout of one
    sequence (reward 0.25): SkyRL's trainer takes a step-wise trajectory's reward from
    its last step, and its metrics average rewards over rows."""
    other = record(rollout_id="add-r1", rollout_index=1, reward=0.25, **_tokens(SEQ1))
    out = tmp_path / "s.json"
    assert write_skyrl([SEQ0, SEQ1, other], out) == 3
    data = json.loads(out.read_text())
    assert data["rewards"] == [0.0, 1.0, 0.25]
    assert data["is_last_step"] == [False, True, True]
    assert [m["reward"] for m in data["env_metrics"]] == [1.0, 1.0, 0.25]  # the rollout's


def test_verifiers_marks_nothing_trainable_without_the_samplers_logprobs(
    tmp_path: Path,
) -> None:
    """verifiers' ``MessageNode.logprobs`` is a list that ``Trace.logprobs`` spreads
    with 0.0 where it is short: a sequence without logprobs has mask all False, no
    logprobs, and its ``info`` entry says so; a sequence with them is as it was."""
    blind = record(**{**_tokens(SEQ1), "completion_logprobs": None})
    out = tmp_path / "v.jsonl"
    assert write_verifiers([blind], out) == 1
    (trace,) = (json.loads(x) for x in out.read_text().splitlines())
    (answer,) = [n for n in trace["nodes"] if n.get("sampled")]
    assert answer["token_ids"] == [1, 2, 3, 6, 7, 14, 15]
    assert answer["mask"] == [False] * 7
    assert answer["logprobs"] == [] and answer["advantages"] == []
    assert trace["info"]["agentkit"]["sequences"][0]["logprobs"] is False
    write_verifiers([SEQ1], out)
    (trace,) = (json.loads(x) for x in out.read_text().splitlines())
    (answer,) = [n for n in trace["nodes"] if n.get("sampled")]
    assert answer["mask"] == [False] * 5 + [True, True]
    assert answer["logprobs"] == [-0.5, -0.6] and answer["advantages"] == [0.5, 0.5]
    assert trace["info"]["agentkit"]["sequences"][0]["logprobs"] is True
