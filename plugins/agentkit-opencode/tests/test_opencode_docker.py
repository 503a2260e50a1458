"""OpenCode unchanged in the docker sandbox: a no-network task in its own image.

The container has no network, yet opencode (its binary bound read-only from
the host, never copied) reaches the scripted model server through the
sandbox's relay, runs its bash tool with the image's tools and ENV, and the
task's verifier passes. The API key reaches the model server and nothing else.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from agentkit_opencode import OpenCodeBinary

import agentkit.runs
from agentkit import AgentEnv, Event
from agentkit.testing.model_server import ScriptedModelServer
from agentkit.testing.programs import assert_key_only_reached_the_model, harbor_rollout
from agentkit.testing.sandbox_fixtures import requires_docker

pytestmark = [pytest.mark.anyio, requires_docker]

TASKS = Path(__file__).resolve().parents[3] / "examples" / "harbor-docker"
API_KEY = "sk-agentkit-docker-7e1f0c2a9b"

TOTAL: dict[str, Any] = {
    "rules": [
        {
            "match": {"after_tool": False, "last_user_contains": "prices.json"},
            "reply": {
                "content": "I will add the prices with jq.",
                "tool_calls": [
                    {
                        "name": "bash",
                        "arguments": {
                            "command": "cd /srv/work && echo \"$(jq '[.items[].price] | add' "
                            '/srv/data/prices.json) $CURRENCY" > total.txt && cat total.txt',
                            "description": "Add up the prices",
                        },
                    }
                ],
            },
        },
        {"match": {"after_tool": True}, "reply": {"content": "Wrote total.txt."}},
    ]
}


@pytest.mark.model_script(TOTAL)
async def test_opencode_solves_a_no_network_task_in_its_image(
    model_server: ScriptedModelServer,
    opencode_bin: OpenCodeBinary,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pytest.importorskip("agentkit_harbor", reason="the Harbor plugin is not installed")
    monkeypatch.setenv("AGENTKIT_TEST_OPENCODE_KEY", API_KEY)
    model_server.set_api_key(API_KEY)  # any other key: a 401
    seen: list[Event] = []
    env = AgentEnv.from_names(
        f"harbor:{TASKS}", "opencode", trace_callback=seen.append, sandbox="docker"
    )
    run_dir = tmp_path / "run"
    rollout = await harbor_rollout(
        env,
        "harbor-docker:tools-in-image",
        server=model_server,
        out=run_dir,
        api_key_env="AGENTKIT_TEST_OPENCODE_KEY",
    )
    assert rollout.rewards["core.reward"] == 1.0
    assert rollout.rewards["harness.tool_calls"] == 1.0
    results_text = json.dumps([e.data for e in seen if e.type == "tool.result"])
    assert "12 EUR" in results_text
    # read-only bind of the binary's directory: never copied in
    assert not [e for e in seen if "is not visible in the sandbox" in str(e.data)]
    assert_key_only_reached_the_model(API_KEY, server=model_server, run_dir=run_dir, events=seen)
    # the container's relay carried the model proxy's address: every call was recorded
    calls = agentkit.runs.open(run_dir).calls(rollout.rollout_id)
    assert len(calls) == len(model_server.model_requests) >= 2
    assert {(c.protocol, c.status) for c in calls} == {("chat", 200)}
