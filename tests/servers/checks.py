"""What every run against a real server must hold, checked from the outside.

- :func:`assert_complete_ids`: every model call of a run has the completion's
  ids, as many as the server counted (``usage.completion_tokens``), and the
  prompt's;
- :func:`export`: ``agentkit export`` of a run to SkyRL's, Tinker's and
  verifiers' formats (``--require-token-ids``);
- :func:`assert_the_trainers_load`: SkyRL, Tinker and verifiers load those
  files with their own packages;
- :func:`assert_a_forward_pass_reproduces`: the trainer's check. Every
  sequence read back from those files (not from agentkit's records), run
  through the served weights with ``transformers`` (prompt and completion in one
  forward pass, float32 on the CPU), gives every sampled token (mask 1) the
  logprob the file records for it (within :data:`TOLERANCE`); the tokens marked
  not sampled (mask 0) are as many as the sequence's tokens less what the server
  counted its calls sampled.
"""

from __future__ import annotations

import functools
import json
import subprocess
import sys
import types
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import agentkit.runs
from agentkit.testing.programs import exported_sequences

#: How far a recomputed logprob may be from the sampler's (float32 on the CPU).
TOLERANCE = 1e-4
FORMATS = ("skyrl", "tinker", "verifiers")


def assert_complete_ids(run_dir: Path) -> list[Any]:
    """Every model call of every rollout in ``run_dir`` carries the server's prompt ids
    and completion ids, as many completion ids as ``usage.completion_tokens``, and a
    logprob for each; returns the calls."""
    run = agentkit.runs.open(run_dir)
    calls = [c for r in run.rollouts() for c in run.calls(r.rollout_id)]
    assert calls, f"no model calls recorded in {run_dir}"
    for call in calls:
        where = f"call {call.index} of rollout {call.rollout_id}"
        assert call.token_source == "server", f"{where}: {call.token_source} ({call.token_note})"
        assert call.prompt_token_ids, where
        ids = call.completion_token_ids or []
        counted = call.usage.output_tokens if call.usage else None
        assert len(ids) == counted, f"{where}: {len(ids)} ids, the server counted {counted}"
        assert len(call.completion_logprobs or []) == len(ids), where
    return calls


def export(run_dir: Path, fmt: str) -> Path:
    """``agentkit export RUN_DIR --format FMT --require-token-ids --no-overlong-filter``
    into the run directory (``export.FMT``). Without the overlong filter, which zeroes
    the mask of a response that stopped for length (the tiny models' often do), the
    mask says exactly which tokens were sampled."""
    out = run_dir / f"export.{fmt}"
    done = subprocess.run(
        [sys.executable, "-m", "agentkit", "export", str(run_dir), "--format", fmt,
         "--out", str(out), "--require-token-ids", "--no-overlong-filter"],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, f"agentkit export --format {fmt}: {done.stderr}"
    return out


def assert_the_trainers_load(files: dict[str, Path]) -> None:
    """SkyRL validates the step-wise generator output and makes its training batch of
    it; every Tinker line is a ``tinker.Datum``; every verifiers line a ``WireTrace``
    whose branches hold the file's tokens."""
    import tinker  # deferred: the trainers' packages, in the servers session only
    import verifiers.v1 as vf  # deferred: as above
    from skyrl.train.dataset.preprocess import (  # deferred: as above
        convert_prompts_responses_to_batch_tensors,
    )
    from skyrl.train.generators.base import TrajectoryID  # deferred: as above
    from skyrl.train.utils.trainer_utils import validate_generator_output  # deferred

    output = json.loads(files["skyrl"].read_text())
    rollouts = {t["instance_id"] + "/" + str(t["repetition_id"]) for t in output["trajectory_ids"]}
    output["trajectory_ids"] = [TrajectoryID(**t) for t in output["trajectory_ids"]]
    validate_generator_output(len(rollouts), output, step_wise=True)
    rewards = [
        [0.0] * (len(r) - 1) + [w]
        for r, w in zip(output["response_ids"], output["rewards"], strict=True)
    ]
    tensors = convert_prompts_responses_to_batch_tensors(
        types.SimpleNamespace(pad_token_id=0), output["prompt_token_ids"],
        output["response_ids"], rewards, output["loss_masks"], output["rollout_logprobs"],
    )  # fmt: skip
    assert tensors[0].shape[0] == len(output["response_ids"])

    for line in files["tinker"].read_text().splitlines():
        data = json.loads(line)
        datum = tinker.Datum(
            model_input=tinker.ModelInput.model_validate(data["model_input"]),
            loss_fn_inputs={k: tinker.TensorData(**v) for k, v in data["loss_fn_inputs"].items()},
        )
        targets = datum.loss_fn_inputs["target_tokens"].tolist()
        assert datum.model_input.to_ints()[1:] == targets[:-1]

    for line in files["verifiers"].read_text().splitlines():
        trace = vf.WireTrace.model_validate_json(line)
        assert trace.branches and all(b.token_ids for b in trace.branches)


@functools.lru_cache(maxsize=2)
def _model(model_dir: Path) -> Any:
    import torch  # deferred: the trainer's forward pass, in the servers session only
    from transformers import AutoModelForCausalLM  # deferred: as above

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    model.eval()
    return model


@functools.lru_cache(maxsize=64)
def forward_logprobs(model_dir: Path, tokens: tuple[int, ...]) -> list[float]:
    """``log p(tokens[i] | tokens[:i])`` for ``i >= 1`` (index 0 is ``nan``): one forward
    pass of the weights in ``model_dir`` over ``tokens``, as a trainer computes it."""
    import torch  # deferred: as above

    with torch.no_grad():
        logits = _model(model_dir)(torch.tensor([list(tokens)])).logits[0]
        logprobs = torch.log_softmax(logits.double(), dim=-1)
        picked = logprobs[:-1].gather(1, torch.tensor(tokens[1:]).unsqueeze(1)).squeeze(1)
    return [float("nan"), *picked.tolist()]


def assert_a_forward_pass_reproduces(
    model_dir: Path, files: dict[str, Path], calls: Sequence[Any]
) -> int:
    """The trainer's check on every sequence of the SkyRL, Tinker and verifiers
    ``files``: each sampled token's recorded logprob is the forward pass's (max
    ``|delta| <`` :data:`TOLERANCE`), the first token is not sampled, and the tokens
    marked sampled are, over all sequences of a format, as many as the server counted
    for all the ``calls`` (``usage.completion_tokens``): a token of the prompt, a
    template's or an observation, is never marked sampled, and no sampled token is
    left unmarked. Returns how many sampled tokens were checked."""
    counted = sum(c.usage.output_tokens for c in calls)
    checked = 0
    for fmt, path in files.items():
        sequences = exported_sequences(path, fmt)
        assert sequences, f"{fmt}: no sequences in {path}"
        marked = 0
        for n, (tokens, sampled, recorded) in enumerate(sequences):
            assert recorded is not None, f"{fmt}: sequence {n} has no logprobs"
            assert not sampled[0], f"{fmt}: sequence {n} starts with a sampled token"
            positions = [i for i, s in enumerate(sampled) if s]
            assert len(positions) == len(recorded), f"{fmt}: sequence {n}"
            mine = forward_logprobs(model_dir, tuple(tokens))
            worst = max(
                ((abs(mine[i] - lp), i) for i, lp in zip(positions, recorded, strict=True)),
                default=(0.0, -1),
            )
            assert worst[0] < TOLERANCE, (
                f"{fmt}: sequence {n}, token {worst[1]} ({tokens[worst[1]]}): the forward pass "
                f"gives {mine[worst[1]]}, the file {recorded[positions.index(worst[1])]}"
            )
            marked += len(positions)
            checked += len(positions)
        assert marked == counted, (
            f"{fmt}: {marked} tokens marked sampled, the server sampled {counted}"
        )
    return checked
