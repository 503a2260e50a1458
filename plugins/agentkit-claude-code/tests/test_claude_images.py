"""Claude Code unchanged in a task's own image: a no-network Harbor task in the docker
sandbox through `agentkit run`, and in the local sandbox on the image's root.

The sandbox has no network, yet Claude Code (its binary bound read-only
from the host, never copied; it runs on the image's glibc) reaches the
scripted model server through the sandbox's relay, runs its Bash tool with
the image's tools and ENV, and the task's verifier passes. The API key
reaches the model server and nothing else."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agentkit import AgentEnv, Event
from agentkit.programs import ProgramBinary
from agentkit.testing.model_server import ScriptedModelServer
from agentkit.testing.programs import (
    agentkit_run,
    assert_key_only_reached_the_model,
    harbor_rollout,
)
from agentkit.testing.sandbox_fixtures import need_docker, need_image_tool

TASKS = Path(__file__).resolve().parents[3] / "examples" / "harbor-docker"
API_KEY = "sk-agentkit-claude-docker-8f2a6c1d4e"

TOTAL: dict[str, Any] = {
    "rules": [
        {
            "match": {"after_tool": False, "last_user_contains": "prices.json"},
            "reply": {
                "content": "I will add the prices with jq.",
                "tool_calls": [
                    {
                        "name": "Bash",
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


@pytest.mark.anyio
@pytest.mark.model_script(TOTAL)
async def test_claude_code_solves_a_no_network_task_on_its_image_root(
    model_server: ScriptedModelServer,
    claude_bin: ProgramBinary,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    image_cache: Path,
) -> None:
    need_image_tool()
    pytest.importorskip("agentkit_harbor", reason="the Harbor plugin is not installed")
    monkeypatch.setenv("AGENTKIT_TEST_CLAUDE_KEY", API_KEY)
    model_server.set_api_key(API_KEY)  # any other key: a 401
    seen: list[Event] = []
    env = AgentEnv.from_names(f"harbor:{TASKS}", "claude-code", trace_callback=seen.append)
    run_dir = tmp_path / "run"
    rollout = await harbor_rollout(
        env,
        "harbor-docker:tools-in-image",
        server=model_server,
        out=run_dir,
        api_key_env="AGENTKIT_TEST_CLAUDE_KEY",
        sandbox_options={"image_cache": str(image_cache)},
    )
    assert rollout.rewards["core.reward"] == 1.0
    assert rollout.rewards["harness.tool_calls"] == 1.0
    assert rollout.rewards["harness.turns"] == 2.0
    results_text = json.dumps([e.data for e in seen if e.type == "tool.result"])
    assert "12 EUR" in results_text
    # read-only bind of the binary's directory: never copied in
    assert not [e for e in seen if "is not visible in the sandbox" in str(e.data)]
    assert_key_only_reached_the_model(API_KEY, server=model_server, run_dir=run_dir, events=seen)


@pytest.mark.model_script(TOTAL)
def test_claude_code_solves_a_no_network_task_in_docker_through_agentkit_run(
    model_server: ScriptedModelServer, claude_bin: ProgramBinary, tmp_path: Path
) -> None:
    need_docker()
    pytest.importorskip("agentkit_harbor", reason="the Harbor plugin is not installed")
    run_dir = tmp_path / "run"
    model_server.set_api_key(API_KEY)
    proc, rollout = agentkit_run(
        f"harbor:{TASKS}",
        "claude-code",
        "--task",
        "harbor-docker:tools-in-image",
        "--sandbox",
        "docker",
        "--model",
        "scripted-model",
        "--base-url",
        model_server.base_url,
        "--api-key-env",
        "AGENTKIT_TEST_CLAUDE_KEY",
        "--out",
        str(run_dir),
        env={"AGENTKIT_TEST_CLAUDE_KEY": API_KEY},
    )
    assert rollout["status"] == "completed", rollout["error"]
    assert rollout["rewards"]["core.reward"] == 1.0
    assert rollout["rewards"]["harness.tool_calls"] == 1.0
    assert rollout["rewards"]["harness.turns"] == 2.0
    events = [json.loads(x) for x in (run_dir / rollout["events_file"]).read_text().splitlines()]
    assert "12 EUR" in json.dumps([e["data"] for e in events if e["type"] == "tool.result"])
    # read-only bind of the binary's directory: never copied in
    assert not [e for e in events if "is not visible in the sandbox" in json.dumps(e["data"])]
    # the key reached the model server and nothing else: not the run directory (events
    # included), not the output
    assert_key_only_reached_the_model(API_KEY, server=model_server, run_dir=run_dir)
    assert API_KEY not in proc.stdout + proc.stderr
