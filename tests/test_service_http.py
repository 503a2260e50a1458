"""The rollout service's HTTP front, driven by a trainer in another process (a real
Python process speaking HTTP over loopback with urllib), the service running the chat
harness against the scripted model server."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import anyio
import pytest
from _trainer_client import client

from agentkit.env import AgentEnv, RunOptions
from agentkit.service import RolloutService, ServiceFront
from agentkit.testing.model_server import ScriptedModelServer

pytestmark = pytest.mark.anyio

TRAINER = (
    client(60)
    + r"""
url, token = sys.argv[1], sys.argv[2]

out = {}
out["unauthorized"] = call("GET", "/report", key="wrong")[0]
out["requested"] = call("POST", "/groups", {"groups": 2})
out["first"] = call("POST", "/groups/next")
out["policy"] = call("POST", "/policy", {"version": 1, "model": "policy-1"})
out["stale_version"] = call("POST", "/policy", {"version": 1})
out["bad_field"] = call("POST", "/policy", {"version": "two"})
out["second"] = call("POST", "/groups/next")
out["none_left"] = call("POST", "/groups/next")
out["report"] = call("GET", "/report")
print(json.dumps(out))
"""
)


async def test_a_trainer_in_another_process_takes_groups_and_sets_the_policy(
    tmp_path: Path, model_server: ScriptedModelServer
) -> None:
    model_server.set_script({"default": {"content": "4"}})
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(json.dumps({"id": "a", "input": "2+2?", "target": "4"}) + "\n")
    env = AgentEnv.from_names(f"jsonl:{tasks}", "chat")
    options = RunOptions(
        model="scripted-model",
        base_url=model_server.base_url,
        concurrency=2,
        token_ids=True,
        out=tmp_path / "run",
        preflight=False,
    )
    with anyio.fail_after(120):
        async with (
            RolloutService(env, options, group_size=2, max_staleness=1) as service,
            ServiceFront(service) as front,
        ):
            proc = await anyio.run_process(
                [sys.executable, "-c", TRAINER, front.url, front.token], check=False
            )
    assert proc.returncode == 0, proc.stderr.decode()
    out = json.loads(proc.stdout)
    assert out["unauthorized"] == 401
    assert out["requested"] == [200, {"group_ids": [0, 1]}]
    status, first = out["first"]
    assert status == 200 and first["group"]["rewards"] == [1.0, 1.0]
    assert first["group"]["data"]["response_ids"]  # SkyRL's GeneratorOutput
    assert out["policy"] == [200, {"policy": {"version": 1, "base_url": None, "model": "policy-1"}}]
    assert out["stale_version"][0] == 400 and "must grow" in out["stale_version"][1]["error"]
    assert out["bad_field"][0] == 400 and "version: expected" in out["bad_field"][1]["error"]
    assert out["second"][0] == 200
    assert {out["second"][1]["group"]["group_id"], first["group"]["group_id"]} == {0, 1}
    assert out["none_left"][0] == 409
    assert out["report"][1]["delivered"] == 2
