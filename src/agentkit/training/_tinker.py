"""Tinker: one ``tinker.Datum`` per training sequence, as JSONL.

As the tinker-cookbook RL loop trains on them: its ``trajectory_to_data``
(``tinker_cookbook.rl.data_processing``) turns the sequence's tokens ``T``
(prompt, then the completion with the observation tokens between responses)
into ``model_input`` = ``T[:-1]`` and ``loss_fn_inputs``: ``target_tokens`` =
``T[1:]``, ``logprobs`` (the sampler's, 0.0 on tokens it did not sample),
``advantages`` (the rollout's advantage on sampled tokens, 0.0 elsewhere: that
is what keeps the loss off the other tokens) and a ``mask``, each shifted the
same way; its ``train_step`` then takes the ``mask`` out before
``forward_backward`` (``_remove_mask``: the built-in losses take
``target_tokens``, ``logprobs`` and ``advantages`` only). A line's
``loss_fn_inputs`` is what ``forward_backward`` is sent; the mask (1.0 on
sampled tokens), which the cookbook's metrics read, is beside it:

```json
{"model_input": {"chunks": [{"type": "encoded_text", "tokens": [...]}]},
 "loss_fn_inputs": {"target_tokens": {"data": [...], "dtype": "int64", "shape": [n]},
                    "logprobs": {...}, "advantages": {...}},
 "mask": {"data": [...], "dtype": "float32", "shape": [n]},
 "agentkit": {"rollout_id": ..., "sequence": ..., ...}}
```

so ``tinker.ModelInput.model_validate(line["model_input"])`` and
``tinker.TensorData(**value)`` rebuild the Datum (``line["mask"]`` added to its
inputs gives the cookbook's own, before ``_remove_mask``). A sequence whose
calls returned no logprobs has no ``logprobs`` input (Tinker's
importance-sampling loss then refuses it rather than train on zeros); a
rollout without an advantage (no reward) is left out.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from typing import Any

import orjson

from agentkit.training._files import write_lines
from agentkit.training._records import TrainingRecord
from agentkit.training._rows import row_metadata

__all__ = ["datum_json", "write_tinker"]


def _tensor(data: list[Any], dtype: str) -> dict[str, Any]:
    return {"data": data, "dtype": dtype, "shape": [len(data)]}


def datum_json(record: TrainingRecord) -> dict[str, Any] | None:
    """The Datum of one record, or None without token ids, an advantage or 2 tokens."""
    return _datum(record, fragments=False)


#: bytes.translate table: 0 -> b"a", anything else -> b"b" (see _flags_json).
_FLAGS = bytes([0x61] + [0x62] * 255)


def _flags_json(pad: int, mask: list[int], value: float) -> orjson.Fragment:
    """The JSON array of ``pad`` zeros, then per mask entry ``value`` where it is set
    and 0.0 elsewhere, written as text in C (``bytes.translate``, ``replace``): no
    Python float and no Python step per token, where lists of floats cost a fifth
    of a Tinker export (bench/export.py)."""
    try:
        flags = bytes(mask)
    except ValueError:  # an entry outside 0..255: only whether it is set matters
        flags = bytes(map(bool, mask))
    on = orjson.dumps(float(value)) + b","
    body = b"0.0," * pad + flags.translate(_FLAGS).replace(b"a", b"0.0,").replace(b"b", on)
    return orjson.Fragment(b"[" + body[:-1] + b"]" if body else b"[]")


def _datum(record: TrainingRecord, *, fragments: bool) -> dict[str, Any] | None:
    """:func:`datum_json`; with ``fragments`` the advantages and the mask are JSON
    text (``orjson.Fragment``) that orjson writes as the same arrays."""
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
    pad = n_prompt - 1 if n_prompt else 0
    flags = mask if n_prompt else mask[1:]
    weights = [0.0] * pad
    inputs: dict[str, Any] = {"target_tokens": _tensor(tokens[1:], "int64")}
    if record.completion_logprobs is not None:
        logprobs = record.completion_logprobs if n_prompt else record.completion_logprobs[1:]
        inputs["logprobs"] = _tensor([*weights, *logprobs], "float32")
    if fragments:
        n = len(tokens) - 1
        inputs["advantages"] = _fragment(_flags_json(pad, flags, advantage), n)
        weight = _fragment(_flags_json(pad, flags, 1.0), n)
    else:
        advantages = [*weights, *(advantage if m else 0.0 for m in flags)]
        inputs["advantages"] = _tensor(advantages, "float32")
        weight = _tensor([*weights, *(1.0 if m else 0.0 for m in flags)], "float32")
    return {
        "model_input": {"chunks": [{"type": "encoded_text", "tokens": tokens[:-1]}]},
        "loss_fn_inputs": inputs,  # what forward_backward is sent: no mask
        "mask": weight,
        "agentkit": row_metadata(record),
    }


def _fragment(data: orjson.Fragment, n: int) -> dict[str, Any]:
    return {"data": data, "dtype": "float32", "shape": [n]}


def _datums(records: Iterable[TrainingRecord]) -> Iterator[dict[str, Any]]:
    for record in records:
        datum = _datum(record, fragments=True)
        if datum is not None:
            yield datum


def write_tinker(records: Iterable[TrainingRecord], out: str | os.PathLike[str]) -> int:
    """Write one Datum per line; returns how many."""
    return write_lines(_datums(records), out)
