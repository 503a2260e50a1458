"""The real opencode program under agentkit's rollout service (agentkit.service): its
calls tagged with the policy version that answered them across an update, graded by the
Harbor task's verifier; closing the service with rollouts in flight leaves no process.

Every wait is on an event (the scripted server's request log), never on the clock.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from agentkit.env import AgentEnv, RunOptions
from agentkit.service import RolloutService
from agentkit.testing.model_server import ScriptedModelServer
from agentkit.testing.programs import hello_world_token_script, processes_with

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("opencode_bin", "requires_bwrap")]

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "harbor"
HANG = 240  # every wait is on an event; this only turns a hang (a bug) into a failure


def _service(server: ScriptedModelServer, run_dir: Path, **kwargs: object) -> RolloutService:
    env = AgentEnv.from_names(f"harbor:{EXAMPLES}", "opencode")
    options = RunOptions(
        model="scripted-model",
        base_url=server.base_url,
        concurrency=2,
        token_ids=True,
        task_ids=["harbor:hello-world"],
        sandbox_options={"image": "host"},
        out=run_dir,
        preflight=False,
    )
    return RolloutService(env, options, group_size=2, **kwargs)  # type: ignore[arg-type]


async def test_opencode_calls_name_the_policy_across_an_update(
    model_server: ScriptedModelServer, tmp_path: Path
) -> None:
    model_server.set_script(hello_world_token_script(describe=True, submit=None))
    with anyio.fail_after(HANG):
        async with _service(model_server, tmp_path / "run", format="tinker") as service:
            model_server.hold()
            service.request()
            await model_server.wait_for_requests(2)  # each rollout's first call, at v0
            await service.set_policy(1, model="policy-1")
            model_server.release()
            group = await service.next_group()
    assert group.rewards == [1.0, 1.0]
    for rollout in group.rollouts:
        versions = [c.policy_version for c in rollout.model_calls]
        assert versions[0] == 0 and versions[-1] == 1 and versions == sorted(versions)
        for call in rollout.model_calls:
            sent = call.forwarded.get("model", call.model)
            assert sent == ("policy-1" if call.policy_version == 1 else "scripted-model")
    # the Tinker datums of both rollouts' sequences, with the server's ids
    assert group.data and all(d["model_input"]["chunks"] for d in group.data)
    assert {r.body["model"] for r in model_server.chat_requests[2:]} == {"policy-1"}


async def test_closing_the_service_stops_opencode_and_keeps_finished_rollouts(
    model_server: ScriptedModelServer, tmp_path: Path
) -> None:
    model_server.set_script(hello_world_token_script(describe=True, submit=None))
    run_dir = tmp_path / "run"
    with anyio.fail_after(HANG):
        async with _service(model_server, run_dir) as service:
            model_server.hold()
            service.request()
            await model_server.wait_for_requests(2)  # both programs wait on the model
            assert processes_with(str(tmp_path))
            report = service.report()
    assert report.in_flight == 2
    after = service.report()
    assert after.in_flight == 0 and after.rollouts_finished == 0
    assert not processes_with(str(tmp_path))
    model_server.release()
