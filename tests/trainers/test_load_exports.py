"""``agentkit export`` files loaded by the trainers' own packages, not by agentkit.

One real run (chat harness, scripted model) whose rollouts carry recorded model
calls: the worked example of docs/training-data.md (3 calls, a prefix break: 2
sequences), two-call rollouts that merge, and one whose second call returned no
token ids. Each format is checked with the library that consumes it:

- SkyRL 0.3.0: ``validate_generator_output`` (step-wise), the batch tensors its
  trainer builds, and its own prefix merging (``merge_stepwise_output``) of the
  same calls, as its Harbor generator writes them (the reward on a trajectory's
  last step, 0.0 before), giving the same sequences and rewards;
- Tinker 0.38.0 / tinker-cookbook 0.6.1: ``tinker.Datum`` built from each line
  equals what the cookbook's RL loop sends ``forward_backward`` (``compute_advantages``,
  ``assemble_training_data``, then ``train_step``'s ``_remove_mask``) from the
  same calls, the line's ``mask`` the one the cookbook built, and encodes as a
  forward-backward request;
- verifiers 0.4.0: ``WireTrace`` loads each line, and its branches (what prime-rl
  trains on) are the sequences; the model's thinking (vLLM's ``reasoning``) is
  the assistant message's ``reasoning_content``;
- SFT: HF ``datasets`` loads both files; tool calls and the model's thinking
  read as tinker-cookbook's ``openai_messages_to_tinker`` reads them.
"""

from __future__ import annotations

import json
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

import pytest
from _calls_runs import THINKING, make_run

import agentkit.runs
from agentkit.testing.model_server import ScriptedModelServer
from agentkit.training import from_run_dir, prepare

pytestmark = pytest.mark.anyio


@pytest.fixture
async def run_dir(tmp_path: Path, model_server: ScriptedModelServer) -> Path:
    return await make_run(tmp_path, model_server)


def export(run_dir: Path, fmt: str, out: Path) -> Path:
    done = subprocess.run(
        [sys.executable, "-m", "agentkit", "export", str(run_dir), "--format", fmt, "--out",
         str(out)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return out


def calls_by_rollout(run_dir: Path) -> dict[str, list[Any]]:
    run = agentkit.runs.open(run_dir)  # the public reader
    return {r.rollout_id: run.calls(r.rollout_id) for r in run.rollouts(0, len(run))}


async def test_skyrl_loads_the_generator_output(run_dir: Path, tmp_path: Path) -> None:
    from skyrl.train.dataset.preprocess import convert_prompts_responses_to_batch_tensors
    from skyrl.train.generators.base import TrajectoryID
    from skyrl.train.generators.utils import merge_stepwise_output
    from skyrl.train.utils.trainer_utils import validate_generator_output

    output = json.loads(export(run_dir, "skyrl", tmp_path / "out.json").read_text())
    output["trajectory_ids"] = [TrajectoryID(**t) for t in output["trajectory_ids"]]
    validate_generator_output(4, output, step_wise=True)  # 4 rollouts, 6 sequences
    assert len(output["response_ids"]) == 6

    # SkyRL's own prefix merging of the same calls, one row per call with token ids
    records = {r.rollout_id: r for r in prepare(from_run_dir(run_dir))}
    steps: dict[str, list[Any]] = {k: [] for k in ("prompt_token_ids", "response_ids",
        "loss_masks", "rollout_logprobs", "rewards", "stop_reasons", "trajectory_ids",
        "is_last_step")}  # fmt: skip
    for rollout_id, calls in calls_by_rollout(run_dir).items():
        with_ids = [c for c in calls if c.has_tokens]
        record = records[rollout_id]
        for n, c in enumerate(with_ids):
            last = n == len(with_ids) - 1
            steps["prompt_token_ids"].append(c.prompt_token_ids)
            steps["response_ids"].append(c.completion_token_ids)
            steps["loss_masks"].append([1] * len(c.completion_token_ids))
            steps["rollout_logprobs"].append(c.completion_logprobs)
            # as SkyRL's Harbor generator: the reward on the last step, 0.0 before
            steps["rewards"].append(record.reward if last else 0.0)
            steps["stop_reasons"].append(c.finish_reason)
            steps["trajectory_ids"].append(TrajectoryID(record.task_id, record.rollout_index))
            steps["is_last_step"].append(last)
    steps["rollout_expert_indices"] = None
    merged = merge_stepwise_output(steps)  # type: ignore[arg-type]
    by_trajectory = lambda out: sorted(  # noqa: E731
        zip(
            [t.to_string() for t in out["trajectory_ids"]],
            out["prompt_token_ids"],
            out["response_ids"],
            out["loss_masks"],
            out["rollout_logprobs"],
            out["rewards"],
            strict=True,
        )
    )
    assert by_trajectory(merged) == by_trajectory(output)
    # the trainer's step-wise reward of each trajectory (its last step's) is the rollout's
    last_rewards = [w for w, end in zip(output["rewards"], output["is_last_step"], strict=True)
                    if end]  # fmt: skip
    assert sorted(last_rewards) == sorted(r.reward for r in records.values())
    assert sum(output["rewards"]) == sum(r.reward or 0.0 for r in records.values())

    # the padded batch its trainer trains on (only the tokenizer's pad id is read)
    rewards = [[0.0] * (len(r) - 1) + [w] for r, w in zip(output["response_ids"],
               output["rewards"], strict=True)]  # fmt: skip
    tensors = convert_prompts_responses_to_batch_tensors(
        types.SimpleNamespace(pad_token_id=0),
        output["prompt_token_ids"],
        output["response_ids"],
        rewards,
        output["loss_masks"],
        output["rollout_logprobs"],
    )
    sequences, _attention, action_mask, _rewards, loss_masks, logprobs, _ = tensors
    assert sequences.shape[0] == 6 and loss_masks.sum().item() == sum(
        sum(m) for m in output["loss_masks"]
    )
    assert logprobs is not None and action_mask.shape == loss_masks.shape


async def test_tinker_datums_are_what_the_cookbook_builds(run_dir: Path, tmp_path: Path) -> None:
    import tinker
    from tinker.proto.request_conv import forward_backward_request_to_proto
    from tinker.types import ForwardBackwardInput, ForwardBackwardRequest
    from tinker_cookbook.completers import TokensWithLogprobs
    from tinker_cookbook.rl.data_processing import assemble_training_data, compute_advantages
    from tinker_cookbook.rl.train import _remove_mask
    from tinker_cookbook.rl.types import Trajectory, TrajectoryGroup, Transition

    lines = [json.loads(x) for x in export(run_dir, "tinker", tmp_path / "t.jsonl").open()]
    datums = [
        tinker.Datum(
            model_input=tinker.ModelInput.model_validate(line["model_input"]),
            loss_fn_inputs={k: tinker.TensorData(**v) for k, v in line["loss_fn_inputs"].items()},
        )
        for line in lines
    ]
    assert len(datums) == 6

    # the cookbook's RL loop over the same calls: one trajectory per rollout, grouped by task
    records = {r.rollout_id: r for r in from_run_dir(run_dir)}
    groups: dict[str, list[tuple[str, Trajectory]]] = {}
    for rollout_id, calls in calls_by_rollout(run_dir).items():
        transitions = [
            Transition(
                ob=tinker.ModelInput.from_ints(c.prompt_token_ids),
                ac=TokensWithLogprobs(c.completion_token_ids, c.completion_logprobs),
                reward=0.0,
                episode_done=False,
            )
            for c in calls
            if c.has_tokens
        ]
        trajectory = Trajectory(transitions=transitions, final_ob=tinker.ModelInput.empty())
        groups.setdefault(records[rollout_id].task_id, []).append((rollout_id, trajectory))
    trajectory_groups = [
        TrajectoryGroup(
            trajectories_G=[t for _, t in members],
            final_rewards_G=[float(records[r].reward or 0.0) for r, _ in members],
            metrics_G=[{} for _ in members],
        )
        for members in groups.values()
    ]
    expected, _meta = assemble_training_data(
        trajectory_groups, compute_advantages(trajectory_groups), include_provenance=False
    )

    def key(d: Any) -> tuple[Any, ...]:
        inputs = d.loss_fn_inputs
        return (d.model_input.to_ints(), sorted((k, v.tolist()) for k, v in inputs.items()))

    # what the cookbook's train_step sends forward_backward: its datums less their mask
    sent = [_remove_mask(d) for d in expected]
    assert sorted(map(key, datums)) == sorted(map(key, sent))
    assert all(set(d.loss_fn_inputs) == {"target_tokens", "logprobs", "advantages"} for d in datums)
    # the mask beside them is the one the cookbook built (its metrics read it)
    with_mask = [
        tinker.Datum(model_input=d.model_input,
                     loss_fn_inputs={**d.loss_fn_inputs, "mask": tinker.TensorData(**line["mask"])})
        for d, line in zip(datums, lines, strict=True)
    ]  # fmt: skip
    assert sorted(map(key, with_mask)) == sorted(map(key, expected))

    request = ForwardBackwardRequest(
        forward_backward_input=ForwardBackwardInput(data=datums, loss_fn="importance_sampling"),
        model_id="m",
        seq_id=1,
    )
    assert len(forward_backward_request_to_proto(request).data) == 6


async def test_verifiers_traces_load_and_their_branches_are_the_sequences(
    run_dir: Path, tmp_path: Path
) -> None:
    import verifiers.v1 as vf

    lines = export(run_dir, "verifiers", tmp_path / "v.jsonl").read_text().splitlines()
    traces = {t.id: t for t in (vf.WireTrace.model_validate_json(x) for x in lines)}
    assert len(traces) == 4
    records = prepare(from_run_dir(run_dir))
    for rollout_id, trace in traces.items():
        mine = [r for r in records if r.rollout_id == rollout_id]
        branches = trace.branches
        assert len(branches) == len(mine)
        for branch, record in zip(branches, mine, strict=True):
            assert record.prompt_token_ids is not None and record.completion_token_ids is not None
            n = len(record.prompt_token_ids)
            assert branch.token_ids == record.prompt_token_ids + record.completion_token_ids
            assert branch.sampled_mask == [False] * n + [bool(m) for m in record.completion_mask]
            assert branch.logprobs == [0.0] * n + record.completion_logprobs
            assert branch.advantages == [
                record.advantage if m else 0.0 for m in branch.sampled_mask
            ]
        assert trace.reward == mine[0].reward and not trace.has_error
    add = next(t for t in traces.values() if t.task.key.endswith(":add"))
    assert [m.role for m in add.branches[0].messages] == ["user", "assistant", "tool", "assistant"]
    assert add.branches[0].messages[1].tool_calls[0].name == "calc"
    # the first answer's thinking, vLLM's ``reasoning``, as verifiers' AssistantMessage has it
    assert add.branches[0].messages[1].reasoning_content == THINKING


async def test_sft_files_load_with_datasets_and_keep_tool_calls(
    run_dir: Path, tmp_path: Path
) -> None:
    import datasets
    from tinker_cookbook.renderers.base import ToolCall
    from tinker_cookbook.third_party.openai_compat import openai_messages_to_tinker

    chat = export(run_dir, "sft-chat", tmp_path / "chat.jsonl")
    loaded = datasets.load_dataset("json", data_files=str(chat), split="train")
    assert len(loaded) == 2  # the two "add" rollouts passed
    row = loaded[0]
    assert row["tools"][0]["function"]["name"] == "calc"
    roles = [m["role"] for m in row["messages"]]
    assert roles[0] == "user" and roles[-1] == "assistant"
    calls = [
        ToolCall.model_validate(call)
        for message in json.loads(chat.read_text().splitlines()[0])["messages"]
        for call in message.get("tool_calls") or []
    ]
    assert [c.function.name for c in calls] == ["calc"]
    # the transcript's thinking (vLLM's ``reasoning``) is the cookbook's ThinkingPart
    messages = openai_messages_to_tinker(json.loads(chat.read_text().splitlines()[0])["messages"])
    asked = next(m for m in messages if m.get("tool_calls"))
    assert asked["content"] == [{"type": "thinking", "thinking": THINKING}]
    assert [c.function.name for c in asked["tool_calls"]] == ["calc"]

    sharegpt = export(run_dir, "sharegpt", tmp_path / "sharegpt.jsonl")
    loaded = datasets.load_dataset("json", data_files=str(sharegpt), split="train")
    turns = loaded[0]["conversations"]
    assert [t["from"] for t in turns] == ["human", "function_call", "observation", "gpt"]
    assert json.loads(turns[1]["value"]) == {"name": "calc", "arguments": {"expr": "2+3"}}
    assert json.loads(loaded[0]["tools"])[0]["function"]["name"] == "calc"
