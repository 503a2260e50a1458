"""The rollout service's trainer adapters, loaded by the trainers' own packages.

A real service (the chat harness through the model proxy, the scripted model
server on loopback, token ids on) feeds:

- SkyRL 0.3.0: :class:`agentkit_skyrl.generator.AgentkitGenerator` answers the
  batch SkyRL's own ``prepare_generator_input`` builds; its output passes SkyRL's
  ``validate_generator_output`` (step-wise) and pads into the batch tensors its
  trainer builds; the policy version follows the batch's ``global_step``;
- tinker-cookbook 0.6.1: :func:`agentkit_tinker.trajectory_group` of each group
  goes through the cookbook's ``compute_advantages`` and ``assemble_training_data``,
  whose datums are the service's own Tinker-format data;
- verifiers 0.4.0: :func:`agentkit_verifiers.traces.traces` loads each rollout as
  ``WireTrace``, its branches the group's training sequences.
"""

from __future__ import annotations

import json
import types
from pathlib import Path
from typing import Any

import anyio
import pytest

from agentkit.env import AgentEnv, RunOptions
from agentkit.service import RolloutService
from agentkit.testing.model_server import ScriptedModelServer

pytestmark = pytest.mark.anyio

# every wait is on the service's own groups; this only turns a hang (a bug) into a failure
HANG = 120

TASKS = [
    {"id": "add", "input": "2+2?", "target": "4"},
    {"id": "mul", "input": "3*3?", "target": "9"},
]


def _env(tmp_path: Path) -> AgentEnv:
    path = tmp_path / "tasks.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in TASKS))
    return AgentEnv.from_names(f"jsonl:{path}", "chat")


def _options(server: ScriptedModelServer, tmp_path: Path) -> RunOptions:
    return RunOptions(
        model="scripted-model",
        base_url=server.base_url,
        concurrency=4,
        token_ids=True,
        out=tmp_path / "run",
        preflight=False,
    )


@pytest.fixture
def script(model_server: ScriptedModelServer) -> ScriptedModelServer:
    # always right on "add"; on "mul" right the first time only: a "mul" group's rewards
    # differ, and so do its advantages
    model_server.set_script(
        {
            "rules": [
                {"match": {"last_user_contains": "2+2"}, "reply": {"content": "4"}},
                {"match": {"last_user_contains": "3*3"}, "times": 1, "reply": {"content": "9"}},
            ],
            "default": {"content": "I do not know"},
        }
    )
    return model_server


async def test_skyrl_generator_answers_skyrls_batch_and_passes_its_validation(
    tmp_path: Path, script: ScriptedModelServer
) -> None:
    from agentkit_skyrl.generator import AgentkitGenerator, GeneratorMismatch
    from skyrl.train.dataset.preprocess import convert_prompts_responses_to_batch_tensors
    from skyrl.train.generators.utils import prepare_generator_input
    from skyrl.train.utils.trainer_utils import validate_generator_output

    service = RolloutService(
        _env(tmp_path),
        _options(script, tmp_path),
        group_size=2,
        max_staleness=0,
        on_stale="rerun",
    )
    generator = AgentkitGenerator(service, ahead=1)
    prompts = [
        # one prompt names its agentkit task; the other takes the next group to finish
        {"prompt": [{"role": "user", "content": "-"}], "env_class": None,
         "env_extras": {"task_id": "tasks:mul"}, "uid": "u-mul"},
        {"prompt": [{"role": "user", "content": "-"}], "env_class": None,
         "env_extras": {}, "uid": "u-next"},
    ]  # fmt: skip
    try:
        with anyio.fail_after(HANG):
            batch, uids = prepare_generator_input(prompts, 2, {}, "agentkit", "train", 1)
            output = await generator.generate(batch)
            validate_generator_output(len(batch["prompts"]), output, step_wise=True)

            # the batch's own trajectories, each of its instances a group of the service
            assert {t.instance_id for t in output["trajectory_ids"]} == set(uids)
            assert sorted({(t.instance_id, t.repetition_id) for t in output["trajectory_ids"]}) == [
                ("u-mul", 0), ("u-mul", 1), ("u-next", 0), ("u-next", 1)
            ]  # fmt: skip
            mul, other = generator.last_groups
            assert mul.task_id == "tasks:mul" and sorted(mul.rewards) == [0.0, 1.0]
            # global_step 1 was announced before any rollout ran: every call names it
            assert service.policy.version == 1
            versions = {c.policy_version for g in generator.last_groups for r in g.rollouts
                        for c in r.model_calls}  # fmt: skip
            assert versions == {1}
            rows = len(mul.data["response_ids"]) + len(other.data["response_ids"])
            assert len(output["response_ids"]) == rows == 4
            # the rows are the groups' own ids, exactly
            assert output["response_ids"][:2] == mul.data["response_ids"]
            assert output["rollout_logprobs"] is not None
            assert output["rollout_metrics"]["agentkit/max_staleness"] == 0

            # the padded batch SkyRL's trainer builds from it
            rewards = [[0.0] * (len(r) - 1) + [w] for r, w in
                       zip(output["response_ids"], output["rewards"], strict=True)]  # fmt: skip
            tensors = convert_prompts_responses_to_batch_tensors(
                types.SimpleNamespace(pad_token_id=0),
                output["prompt_token_ids"],
                output["response_ids"],
                rewards,
                output["loss_masks"],
                output["rollout_logprobs"],
            )
            assert tensors[0].shape[0] == 4

            # the next step: the group asked for ahead ran under version 1; at step 2
            # with max_staleness=0 it is past the bound and run again, never delivered
            batch, _ = prepare_generator_input(prompts[1:], 2, {}, "agentkit", "train", 2)
            output = await generator.generate(batch)
            validate_generator_output(len(batch["prompts"]), output, step_wise=True)
            (group,) = generator.last_groups
            assert group.oldest_version == 2 and group.staleness == 0

            with pytest.raises(GeneratorMismatch, match="set n_samples_per_prompt to 2"):
                batch, _ = prepare_generator_input(prompts, 3, {}, "agentkit", "train", 3)
                await generator.generate(batch)
    finally:
        await generator.aclose()


async def test_cookbook_assembles_the_groups_into_the_services_own_datums(
    tmp_path: Path, script: ScriptedModelServer
) -> None:
    import tinker
    from agentkit_tinker import trajectory_group
    from tinker_cookbook.rl.data_processing import assemble_training_data, compute_advantages
    from tinker_cookbook.rl.train import _remove_mask

    async with RolloutService(
        _env(tmp_path), _options(script, tmp_path), group_size=3, format="tinker"
    ) as service:
        service.request(2)
        with anyio.fail_after(HANG):
            groups = [await service.next_group(), await service.next_group()]
    cookbook_groups = [trajectory_group(g) for g in groups]
    assert [len(g.trajectories_G) for g in cookbook_groups] == [3, 3]
    advantages = compute_advantages(cookbook_groups)
    datums, _meta = assemble_training_data(cookbook_groups, advantages, include_provenance=False)
    # the cookbook's advantages: reward minus the group mean, as the service's records
    assert sorted(r for g in groups for r in g.rewards) == [0.0, 0.0, 1.0, 1.0, 1.0, 1.0]
    assert any(a != 0 for adv in advantages for a in adv.tolist())
    for group, adv in zip(groups, advantages, strict=True):
        mean = sum(r or 0.0 for r in group.rewards) / len(group.rewards)
        assert adv.tolist() == pytest.approx([(r or 0.0) - mean for r in group.rewards])

    def key(d: Any) -> tuple[Any, ...]:
        inputs = {k: v.tolist() for k, v in d.loss_fn_inputs.items()}
        advantages = inputs.pop("advantages")
        return (d.model_input.to_ints(), sorted(inputs.items()), advantages)

    # what the cookbook's train step sends forward_backward is the service's tinker data
    ours = [
        tinker.Datum(
            model_input=tinker.ModelInput.model_validate(d["model_input"]),
            loss_fn_inputs={k: tinker.TensorData(**v) for k, v in d["loss_fn_inputs"].items()},
        )
        for g in groups
        for d in g.data
    ]
    assert len(datums) == len(ours) == 6
    theirs = sorted(map(key, map(_remove_mask, datums)))
    for mine, cookbook in zip(sorted(map(key, ours)), theirs, strict=True):
        assert mine[:2] == cookbook[:2]  # the ids, logprobs and targets: exactly
        # the advantages: the cookbook computes them in float32 (2/3 differs in the last bit)
        assert mine[2] == pytest.approx(cookbook[2], rel=1e-6)


async def test_verifiers_loads_the_groups_as_traces(
    tmp_path: Path, script: ScriptedModelServer
) -> None:
    from agentkit_verifiers.traces import traces

    async with RolloutService(
        _env(tmp_path), _options(script, tmp_path), group_size=2, format="verifiers"
    ) as service:
        service.request(task_id="tasks:add")
        with anyio.fail_after(HANG):
            group = await service.next_group()
    loaded = traces(group)
    assert [t.id for t in loaded] == [r.rollout_id for r in group.rollouts]
    assert [t.reward for t in loaded] == group.rewards == [1.0, 1.0]
    for trace, record in zip(loaded, group.records, strict=True):
        (branch,) = trace.branches
        assert record.prompt_token_ids is not None and record.completion_token_ids is not None
        assert branch.token_ids == record.prompt_token_ids + record.completion_token_ids
        n = len(record.prompt_token_ids)
        assert branch.logprobs == [0.0] * n + record.completion_logprobs
        assert branch.sampled_mask == [False] * n + [bool(m) for m in record.completion_mask]
    with pytest.raises(ValueError, match="format='verifiers'"):
        traces(type(group)(**{**{f: getattr(group, f) for f in (
            "group_id", "task_id", "data", "records", "rollouts", "oldest_version",
            "newest_version", "version")}, "format": "skyrl"}))  # fmt: skip
