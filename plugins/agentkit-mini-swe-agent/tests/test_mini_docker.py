"""mini-swe-agent unchanged in the docker sandbox, through `agentkit run`: a no-network
task whose image has no Python (nor OpenSSL, libffi or SQLite).

mini runs from its portable runtime (interpreter, libraries and glibc loader,
bound read-only from the host), reaches the scripted model server through the
sandbox's relay, runs its bash tool with the image's shell, ENV and WORKDIR,
and the task's verifier passes. The API key reaches the model server and
nothing else.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from agentkit_mini_swe_agent import MiniSweAgentInstall

from agentkit.testing.model_server import ScriptedModelServer
from agentkit.testing.programs import agentkit_run, assert_key_only_reached_the_model
from agentkit.testing.sandbox_fixtures import requires_docker

pytestmark = [requires_docker]

TASKS = Path(__file__).resolve().parent / "data"
API_KEY = "sk-agentkit-docker-3f7a9c1e5b"

GREET: dict[str, Any] = {
    "rules": [
        {
            "match": {"turn": 0, "last_user_contains": "GREETING"},
            "reply": {
                "content": "I will write the greeting.",
                "tool_calls": [
                    {
                        "name": "bash",
                        "arguments": {
                            "command": 'echo "$GREETING" > greeting.txt && '
                            "(command -v python3 || echo none) > python.txt && "
                            "cat greeting.txt python.txt && pwd"
                        },
                    }
                ],
            },
        },
        {
            "match": {"turn": 1},
            "reply": {
                "content": "Done.",
                "tool_calls": [
                    {
                        "name": "bash",
                        "arguments": {"command": "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"},
                    }
                ],
            },
        },
    ]
}


@pytest.mark.model_script(GREET)
def test_mini_solves_a_task_in_an_image_without_python(
    model_server: ScriptedModelServer, mini_install: MiniSweAgentInstall, tmp_path: Path
) -> None:
    pytest.importorskip("agentkit_harbor", reason="the Harbor plugin is not installed")
    run_dir = tmp_path / "run"
    model_server.set_api_key(API_KEY)
    proc, rollout = agentkit_run(
        f"harbor:{TASKS}",
        "mini-swe-agent",
        "--task",
        "data:no-python",
        "--sandbox",
        "docker",
        "--model",
        "scripted-model",
        "--base-url",
        model_server.base_url,
        "--api-key-env",
        "AGENTKIT_TEST_MINI_KEY",
        "-H",
        "retry_attempts=1",
        "--out",
        str(run_dir),
        env={"AGENTKIT_TEST_MINI_KEY": API_KEY},
    )
    assert rollout["status"] == "completed", rollout["error"]
    assert rollout["rewards"]["core.reward"] == 1.0
    assert rollout["rewards"]["harness.tool_calls"] == 2.0
    events = [json.loads(x) for x in (run_dir / rollout["events_file"]).read_text().splitlines()]
    outputs = [e["data"]["output"] for e in events if e["type"] == "tool.result"]
    assert outputs[0] == "bonjour\nnone\n/srv/work\n"
    # the key reached the model server and nothing else: not the run directory (events
    # included), not the output
    assert_key_only_reached_the_model(API_KEY, server=model_server, run_dir=run_dir)
    assert API_KEY not in proc.stdout + proc.stderr
