"""OpenCode by name through AgentEnv on a Harbor example task, graded by its own verifier."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from agentkit_opencode import OPENCODE_VERSION, OpenCodeBinary
from opencode_helpers import files_containing

from agentkit import AgentEnv, Event
from agentkit.testing.model_server import ScriptedModelServer

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("requires_bwrap")]

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "harbor"
API_KEY = "sk-agentkit-env-3a9c5e7f1b2d"

HELLO_WORLD: dict[str, Any] = {
    "rules": [
        {
            "match": {"after_tool": False, "last_user_contains": "hello.txt"},
            "reply": {
                "content": "I will create the file.",
                "tool_calls": [
                    {
                        "name": "bash",
                        "arguments": {
                            "command": "printf 'Hello, world!\\n' > /app/hello.txt",
                            "description": "Write the greeting",
                        },
                    }
                ],
                "usage": {"prompt_tokens": 900, "completion_tokens": 25, "cached_tokens": 100},
            },
        },
        {
            "match": {"after_tool": True},
            "reply": {
                "content": "Created /app/hello.txt.",
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
    opencode_bin: OpenCodeBinary,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AGENTKIT_TEST_OPENCODE_KEY", API_KEY)
    seen: list[Event] = []
    env = AgentEnv.from_names(
        f"harbor:{EXAMPLES}",
        "opencode",
        trace_callback=seen.append,
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
        api_key_env="AGENTKIT_TEST_OPENCODE_KEY",
        out=run_dir,
        sandbox_options={"image": "host"},
    )
    [group] = results.groups
    [rollout] = group.rollouts
    assert rollout.status == "completed", rollout.error
    assert rollout.rewards["core.reward"] == 1.0
    assert rollout.rewards["harness.turns"] == 2.0
    assert rollout.rewards["harness.tool_calls"] == 1.0
    assert rollout.rewards["harness.tool_errors"] == 0.0
    assert rollout.rewards["harness.tokens"] == 900 + 25 + 950 + 8
    assert rollout.usage["input_tokens"] == 1850
    assert rollout.usage["cached_tokens"] == 100
    # The runner shows the harness's binary directory read-only in the sandbox
    # (OpenCode.sandbox_ro_binds), so the 185 MB binary is never copied in.
    assert not [e for e in seen if "is not visible in the sandbox" in str(e.data)]
    assert rollout.raw["opencode_version"] == OPENCODE_VERSION
    assert {"tool.call", "tool.result", "harness.end"} <= {e.type for e in seen}
    assert all(r.api_key_sent for r in model_server.chat_requests)

    # the key reached the model server and nothing else: not the run directory,
    # not the events, not opencode's own files
    assert files_containing(run_dir, API_KEY) == []
    assert API_KEY not in json.dumps([e.data for e in seen])
    events_file = run_dir / rollout.events_file if rollout.events_file else None
    assert events_file is not None and "tool.result" in events_file.read_text()


@pytest.mark.usefixtures("harbor_installed")
@pytest.mark.model_script(HELLO_WORLD)
async def test_cli_runs_opencode_by_name(
    model_server: ScriptedModelServer, opencode_bin: OpenCodeBinary, tmp_path: Path
) -> None:
    import subprocess
    import sys

    agentkit_cli = shutil.which("agentkit") or f"{sys.executable} -m agentkit"
    run_dir = tmp_path / "cli-run"
    proc = subprocess.run(
        [
            *agentkit_cli.split(),
            "run",
            f"harbor:{EXAMPLES}",
            "opencode",
            "--task",
            "harbor:hello-world",
            "--model",
            "scripted-model",
            "--base-url",
            model_server.base_url,
            "--out",
            str(run_dir),
        ],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    [line] = (run_dir / "rollouts.jsonl").read_text().splitlines()
    record = json.loads(line)
    assert record["status"] == "completed"
    assert record["rewards"]["core.reward"] == 1.0
