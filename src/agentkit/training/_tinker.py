"""Tinker: one ``tinker.Datum`` per training sequence, as JSONL.

As the tinker-cookbook RL loop builds them (``tinker_cookbook.rl.
data_processing.trajectory_to_data``): the sequence's tokens ``T`` (prompt,
then the completion with the observation tokens between responses) become
``model_input`` = ``T[:-1]`` and ``loss_fn_inputs``: ``target_tokens`` =
``T[1:]``, ``logprobs`` (the sampler's, 0.0 on tokens it did not sample),
``advantages`` (the rollout's advantage on sampled tokens, 0 elsewhere) and
``mask`` (1.0 on sampled tokens), each shifted the same way. Each line is

```json
{"model_input": {"chunks": [{"type": "encoded_text", "tokens": [...]}]},
 "loss_fn_inputs": {"target_tokens": {"data": [...], "dtype": "int64", "shape": [n]}, ...},
 "agentkit": {"rollout_id": ..., "sequence": ..., ...}}
```

so ``tinker.ModelInput.model_validate(line["model_input"])`` and
``tinker.TensorData(**value)`` rebuild the Datum. A sequence whose calls
returned no logprobs has no ``logprobs`` input (Tinker's importance-sampling
loss then refuses it rather than train on zeros); a rollout without an
advantage (no reward) is left out.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from typing import Any

from agentkit.training._files import write_lines
from agentkit.training._records import TrainingRecord
from agentkit.training._skyrl import row_metadata

__all__ = ["datum_json", "write_tinker"]


def _tensor(data: list[Any], dtype: str) -> dict[str, Any]:
    return {"data": data, "dtype": dtype, "shape": [len(data)]}


def datum_json(record: TrainingRecord) -> dict[str, Any] | None:
    """The Datum of one record, or None without token ids, an advantage or 2 tokens."""
    prompt, completion = record.prompt_token_ids, record.completion_token_ids
    mask = record.completion_mask
    if prompt is None or completion is None or mask is None or record.advantage is None:
        return None
    tokens = prompt + completion
    if len(tokens) < 2:
        return None
    advantage = record.advantage
    n_prompt = len(prompt)
    # position i of the inputs predicts token i + 1: drop the first prompt position
    weights = [0.0] * (n_prompt - 1) if n_prompt else []
    skip = 0 if n_prompt else 1
    # the mask as floats, and the advantage where it is set (map: C-speed, no Python loop)
    sampled = list(map(float, mask[skip:]))
    advantages = list(map((0.0, advantage).__getitem__, map(bool, mask[skip:])))
    inputs: dict[str, Any] = {
        "target_tokens": _tensor(tokens[1:], "int64"),
        "advantages": _tensor(weights + advantages, "float32"),
        "mask": _tensor(weights + sampled, "float32"),
    }
    if record.completion_logprobs is not None:
        inputs["logprobs"] = _tensor(weights + record.completion_logprobs[skip:], "float32")
    return {
        "model_input": {"chunks": [{"type": "encoded_text", "tokens": tokens[:-1]}]},
        "loss_fn_inputs": inputs,
        "agentkit": row_metadata(record),
    }


def _datums(records: Iterable[TrainingRecord]) -> Iterator[dict[str, Any]]:
    for record in records:
        datum = datum_json(record)
        if datum is not None:
            yield datum


def write_tinker(records: Iterable[TrainingRecord], out: str | os.PathLike[str]) -> int:
    """Write one Datum per line; returns how many."""
    return write_lines(_datums(records), out)
