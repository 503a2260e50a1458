"""The rollout service's groups from a real agent program against the real vLLM, loaded by
each trainer's own code.

opencode does the Harbor hello-world task in the local sandbox against the session's
vLLM (the scripted tiny model: one tool call, then the final answer), its calls through
the model proxy with token ids; the service hands its groups to:

- SkyRL 0.3.0: :class:`agentkit_skyrl.generator.AgentkitGenerator` answers the batch
  SkyRL's own ``prepare_generator_input`` builds, and its output passes SkyRL's
  ``validate_generator_output`` (step-wise) and pads into the batch tensors its
  trainer builds;
- tinker-cookbook 0.6.1: :func:`agentkit_tinker.trajectory_group` of the same group
  through the cookbook's ``compute_advantages`` and ``assemble_training_data``;
- verifiers 0.4.0: :func:`agentkit_verifiers.traces.traces` of a group handed over in
  verifiers' format.

Every token id the trainers get is one vLLM sampled or rendered: the rows equal the
calls' recorded ids, which ``assert_complete_ids`` checks against vLLM's own counts.
"""

from __future__ import annotations

import os
import shutil
import types
from pathlib import Path
from typing import Any

import anyio
import pytest
from checks import assert_complete_ids

from agentkit.env import AgentEnv, RunOptions
from agentkit.service import RolloutService
from agentkit.testing.programs import need_harbor_task
from conftest import Server

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[2]
HARBOR = ROOT / "examples" / "harbor"
# every wait is on the service's own groups; this only turns a hang (a bug) into a failure
HANG = 600


def _need_opencode() -> None:
    need_harbor_task(HARBOR / "hello-world")
    missing = [] if shutil.which("bwrap") else ["bubblewrap (bwrap)"]
    if not os.environ.get("AGENTKIT_OPENCODE_BIN"):
        missing.append("opencode ($AGENTKIT_OPENCODE_BIN)")
    if missing:
        message = f"not installed: {', '.join(missing)} (python3 -m nox -s servers installs them)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)


def _service(vllm: Server, tmp_path: Path, name: str, **settings: Any) -> RolloutService:
    env = AgentEnv.from_names(f"harbor:{HARBOR}", "opencode")
    [task_id] = [t.task_id for t in env.taskset if t.task_id.endswith(":hello-world")]
    options = RunOptions(
        model=vllm.model,
        base_url=vllm.base_url,
        task_ids=[task_id],
        concurrency=2,
        token_ids=True,
        out=tmp_path / name,
        sandbox_options={"image": "host"},
    )
    return RolloutService(env, options, **settings)


def _sequences(group: Any) -> list[tuple[list[int], list[int]]]:
    """Each rollout's calls' (prompt ids, completion ids), in order: what vLLM rendered and
    sampled, as recorded."""
    return [
        (list(c.prompt_token_ids or []), list(c.completion_token_ids or []))
        for r in group.rollouts
        for c in r.model_calls
    ]


async def test_opencode_groups_from_vllm_reach_skyrl_the_cookbook_and_verifiers(
    vllm: Server, tmp_path: Path
) -> None:
    import tinker
    from agentkit_skyrl.generator import AgentkitGenerator
    from agentkit_tinker import trajectory_group
    from agentkit_verifiers.traces import traces
    from skyrl.train.dataset.preprocess import convert_prompts_responses_to_batch_tensors
    from skyrl.train.generators.utils import prepare_generator_input
    from skyrl.train.utils.trainer_utils import validate_generator_output
    from tinker_cookbook.rl.data_processing import assemble_training_data, compute_advantages

    _need_opencode()
    # SkyRL: its trainer's batch of one prompt × 2 samples is one group of the service
    service = _service(vllm, tmp_path, "skyrl", group_size=2, max_staleness=0)
    generator = AgentkitGenerator(service)
    prompts = [{"prompt": [{"role": "user", "content": "-"}], "env_class": None,
                "env_extras": {}, "uid": "u-hello"}]  # fmt: skip
    try:
        with anyio.fail_after(HANG):
            batch, _uids = prepare_generator_input(prompts, 2, {}, "agentkit", "train", 1)
            output = await generator.generate(batch)
    finally:
        await generator.aclose()
    validate_generator_output(len(batch["prompts"]), output, step_wise=True)
    (group,) = generator.last_groups
    assert group.rewards == [1.0, 1.0], [r.error for r in group.rollouts]
    assert {c.policy_version for r in group.rollouts for c in r.model_calls} == {1}
    calls = assert_complete_ids(tmp_path / "skyrl")  # vLLM's counts, every call
    assert len(calls) == 4  # two rollouts, two calls each
    # the rows are the group's training sequences, each starting at a call's prompt as
    # vLLM rendered it and ending with a call's answer as vLLM sampled it
    rows = list(zip(output["prompt_token_ids"], output["response_ids"], strict=True))
    assert rows == [(r.prompt_token_ids, r.completion_token_ids) for r in group.records]
    sequences = _sequences(group)
    _assert_made_of_calls(group.records, sequences)
    tensors = convert_prompts_responses_to_batch_tensors(
        types.SimpleNamespace(pad_token_id=0),
        output["prompt_token_ids"],
        output["response_ids"],
        [
            [0.0] * (len(r) - 1) + [w]
            for r, w in zip(output["response_ids"], output["rewards"], strict=True)
        ],
        output["loss_masks"],
        output["rollout_logprobs"],
    )
    assert tensors[0].shape[0] == len(group.records) == len(output["response_ids"])

    # tinker-cookbook: the same group as its TrajectoryGroup, through its own training-data
    # assembly: one transition per call, the ids and logprobs vLLM gave
    cookbook = trajectory_group(group)
    advantages = compute_advantages([cookbook])
    datums, _meta = assemble_training_data([cookbook], advantages, include_provenance=False)
    assert datums and all(isinstance(d, tinker.Datum) for d in datums)
    transitions = [(t.ob.to_ints(), t.ac.tokens) for tr in cookbook.trajectories_G
                   for t in tr.transitions]  # fmt: skip
    assert transitions == sequences
    assert all(
        t.ac.maybe_logprobs is not None and len(t.ac.maybe_logprobs) == len(t.ac.tokens)
        for tr in cookbook.trajectories_G
        for t in tr.transitions
    )

    # verifiers: a group handed over in its format, loaded as its WireTraces
    verifiers_service = _service(vllm, tmp_path, "verifiers", group_size=1, format="verifiers")
    async with verifiers_service:
        verifiers_service.request()
        with anyio.fail_after(HANG):
            vgroup = await verifiers_service.next_group()
    (trace,) = traces(vgroup)
    assert trace.reward == 1.0 and trace.id == vgroup.rollouts[0].rollout_id
    assert [b.token_ids for b in trace.branches] == [
        (r.prompt_token_ids or []) + (r.completion_token_ids or []) for r in vgroup.records
    ]
    _assert_made_of_calls(vgroup.records, _sequences(vgroup))
    assert_complete_ids(tmp_path / "verifiers")


def _assert_made_of_calls(records: Any, calls: list[tuple[list[int], list[int]]]) -> None:
    """Each training record starts at a call's prompt ids and ends with a call's prompt
    and completion ids, as recorded from vLLM."""
    assert records
    for record in records:
        prompt = list(record.prompt_token_ids or [])
        full = prompt + list(record.completion_token_ids or [])
        assert prompt in [p for p, _ in calls], "a record does not start at a call's prompt"
        assert any(full[-len(p + c) :] == p + c for p, c in calls), (
            "a record does not end with a call's answer"
        )
