"""mini-swe-agent by name through AgentEnv and `agentkit run` on a Harbor example task,
graded by its own verifier, in the local sandbox: on the host userland, and on the
task's image root (the default)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from agentkit_mini_swe_agent import MINI_SWE_AGENT_VERSION, MiniSweAgentInstall
from mini_helpers import files_containing

from agentkit import AgentEnv, Event
from agentkit.testing.model_server import ScriptedModelServer
from agentkit.testing.sandbox_fixtures import requires_bwrap

pytestmark = [pytest.mark.anyio, requires_bwrap]

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "harbor"
API_KEY = "sk-agentkit-env-9d4b1e6c2a7f"

HELLO_WORLD: dict[str, Any] = {
    "rules": [
        {
            "match": {"turn": 0, "last_user_contains": "hello.txt"},
            "reply": {
                "content": "I will create the file.",
                "tool_calls": [
                    {
                        "name": "bash",
                        "arguments": {"command": "printf 'Hello, world!\\n' > /app/hello.txt"},
                    }
                ],
                "usage": {"prompt_tokens": 900, "completion_tokens": 25, "cached_tokens": 100},
            },
        },
        {
            "match": {"turn": 1},
            "reply": {
                "content": "Created /app/hello.txt.",
                "tool_calls": [
                    {
                        "name": "bash",
                        "arguments": {"command": "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"},
                    }
                ],
                "usage": {"prompt_tokens": 950, "completion_tokens": 8},
            },
        },
    ]
}


@pytest.fixture
def harbor_installed() -> None:
    pytest.importorskip("agentkit_harbor", reason="the Harbor plugin is not installed")
    if not (EXAMPLES / "hello-world" / "task.toml").exists():
        pytest.skip(f"the Harbor examples are not at {EXAMPLES}")


@pytest.mark.usefixtures("harbor_installed")
@pytest.mark.model_script(HELLO_WORLD)
async def test_harbor_task_passes_its_verifier(
    model_server: ScriptedModelServer,
    mini_install: MiniSweAgentInstall,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AGENTKIT_TEST_MINI_KEY", API_KEY)
    seen: list[Event] = []
    env = AgentEnv.from_names(
        f"harbor:{EXAMPLES}",
        "mini-swe-agent",
        trace_callback=seen.append,
        retry_attempts=1,
    )
    metrics = env.describe_rubric()["metrics"]
    harness_metrics = {m["name"]: m["weight"] for m in metrics if m["namespace"] == "harness"}
    assert harness_metrics == {
        "harness.turns": 0.0,
        "harness.tool_calls": 0.0,
        "harness.tool_errors": 0.0,
        "harness.tokens": 0.0,
    }
    hello = [t.task_id for t in env.taskset if t.task_id.endswith(":hello-world")]
    run_dir = tmp_path / "run"
    results = await env.evaluate(
        task_ids=hello,
        model="scripted-model",
        base_url=model_server.base_url,
        api_key_env="AGENTKIT_TEST_MINI_KEY",
        out=run_dir,
        sandbox_options={"image": "host"},  # the host userland (the CLI test: the image's)
    )
    [rollout] = results.rollouts
    assert rollout.status == "completed", rollout.error
    assert rollout.rewards["core.reward"] == 1.0
    assert rollout.rewards["harness.turns"] == 2.0
    assert rollout.rewards["harness.tool_calls"] == 2.0
    assert rollout.rewards["harness.tool_errors"] == 0.0
    assert rollout.rewards["harness.tokens"] == 900 + 25 + 950 + 8
    assert rollout.usage["input_tokens"] == 1850
    assert rollout.usage["cached_tokens"] == 100
    assert rollout.raw["mini_swe_agent_version"] == MINI_SWE_AGENT_VERSION
    assert {"tool.call", "tool.result", "harness.end"} <= {e.type for e in seen}
    assert all(r.api_key_sent for r in model_server.chat_requests)

    # the key reached the model server and nothing else: not the run directory,
    # not the events, not mini's own files
    assert files_containing(run_dir, API_KEY) == []
    assert API_KEY not in json.dumps([e.data for e in seen])
    events_file = run_dir / rollout.events_file if rollout.events_file else None
    assert events_file is not None and "tool.result" in events_file.read_text()


@pytest.mark.usefixtures("harbor_installed")
@pytest.mark.model_script(HELLO_WORLD)
def test_cli_runs_mini_swe_agent_by_name(
    model_server: ScriptedModelServer, mini_install: MiniSweAgentInstall, tmp_path: Path
) -> None:
    agentkit_cli = shutil.which("agentkit") or f"{sys.executable} -m agentkit"
    run_dir = tmp_path / "cli-run"
    proc = subprocess.run(
        [
            *agentkit_cli.split(),
            "run",
            f"harbor:{EXAMPLES}",
            "mini-swe-agent",
            "--task",
            "harbor:hello-world",
            "--model",
            "scripted-model",
            "--base-url",
            model_server.base_url,
            "-H",
            "retry_attempts=1",
            "--out",
            str(run_dir),
        ],
        capture_output=True,
        text=True,
        timeout=280,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    [line] = (run_dir / "rollouts.jsonl").read_text().splitlines()
    record = json.loads(line)
    assert record["status"] == "completed"
    assert record["rewards"]["core.reward"] == 1.0
    assert record["raw"]["exit_status"] == "Submitted"
