"""The terminal harness (a sandboxed tool-call loop) under agentkit's rollout service:
a policy update restarts the rollouts running then, each in a fresh sandbox, and the
group that comes back was all answered by the new policy and graded by the Harbor
verifier; the run directory keeps no sandbox files of finished or restarted rollouts.

Every wait is on an event (the scripted server's request log), never on the clock.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
from terminal_helpers import HARBOR, HELLO, HOST, needs_bwrap, script

from agentkit.env import AgentEnv, RunOptions
from agentkit.runs import open_run
from agentkit.service import RolloutService
from agentkit.testing.model_server import ScriptedModelServer

pytestmark = [pytest.mark.anyio, needs_bwrap]


async def test_an_update_restarts_sandboxed_rollouts_under_the_new_policy(
    model_server: ScriptedModelServer, tmp_path: Path
) -> None:
    model_server.set_script(script(*HELLO))
    env = AgentEnv.from_names(f"harbor:{HARBOR}", "terminal")
    run_dir = tmp_path / "run"
    options = RunOptions(
        model="scripted-model",
        base_url=model_server.base_url,
        concurrency=2,
        token_ids=True,
        task_ids=["harbor:hello-world"],
        sandbox_options=HOST,
        out=run_dir,
        preflight=False,
    )
    with anyio.fail_after(240):
        async with RolloutService(
            env, options, group_size=2, restart_on_update=True, format="verifiers"
        ) as service:
            model_server.hold()
            service.request()
            await model_server.wait_for_requests(2)  # both sandboxes up, at v0's first call
            assert len(list((run_dir / "rollouts").iterdir())) == 2  # their sandboxes
            await service.set_policy(1, model="policy-1")
            model_server.release()
            group = await service.next_group()
            report = service.report()
    assert group.rewards == [1.0, 1.0]
    assert report.restarted_rollouts == 2
    for rollout in group.rollouts:
        assert {c.policy_version for c in rollout.model_calls} == {1}
    assert len(group.data) == 2  # a verifiers trace per rollout
    assert len(open_run(run_dir).rollouts()) == 2
    # finished rollouts' sandboxes removed, the restarted attempts' never left behind
    assert not (run_dir / "rollouts").exists()
