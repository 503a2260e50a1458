"""Codex by name through AgentEnv and ``agentkit run`` on a Harbor example task,
graded by its own verifier (local sandbox)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from agentkit_codex import CODEX_VERSION
from codex_helpers import files_containing

from agentkit import AgentEnv, Event
from agentkit.programs import ProgramBinary
from agentkit.testing.model_server import ScriptedModelServer

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("harbor_installed", "bwrap_installed")]

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "harbor"
API_KEY = "sk-agentkit-codex-env-8b2f6d1e3a"

HELLO_WORLD: dict[str, Any] = {
    "rules": [
        {
            "match": {"after_tool": False, "last_user_contains": "hello.txt"},
            "reply": {
                "content": "I will create the file.",
                "tool_calls": [
                    {
                        "name": "exec_command",
                        "arguments": {"cmd": "printf 'Hello, world!\\n' > /app/hello.txt"},
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


@pytest.fixture
def bwrap_installed() -> None:
    import shutil

    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap (bwrap) is not installed")


@pytest.mark.model_script(HELLO_WORLD)
async def test_harbor_task_passes_its_verifier(
    model_server: ScriptedModelServer,
    codex_bin: ProgramBinary,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AGENTKIT_TEST_CODEX_KEY", API_KEY)
    seen: list[Event] = []
    env = AgentEnv.from_names(f"harbor:{EXAMPLES}", "codex", trace_callback=seen.append)
    metrics = env.describe_rubric()["metrics"]
    harness_metrics = {m["name"]: m["weight"] for m in metrics if m["namespace"] == "harness"}
    assert harness_metrics == {
        "harness.turns": 0.0,
        "harness.tool_calls": 0.0,
        "harness.tool_errors": 0.0,
        "harness.tokens": 0.0,
    }
    run_dir = tmp_path / "run"
    results = await env.evaluate(
        task_ids=["harbor:hello-world"],
        model="scripted-model",
        base_url=model_server.base_url,
        api_key_env="AGENTKIT_TEST_CODEX_KEY",
        out=run_dir,
        sandbox_options={"image": "host"},
    )
    [rollout] = results.rollouts
    assert rollout.status == "completed", rollout.error
    assert rollout.rewards["core.reward"] == 1.0
    assert rollout.rewards["harness.turns"] == 2.0
    assert rollout.rewards["harness.tool_calls"] == 1.0
    assert rollout.rewards["harness.tool_errors"] == 0.0
    assert rollout.rewards["harness.tokens"] == 900 + 25 + 950 + 8
    assert rollout.usage["input_tokens"] == 1850
    assert rollout.usage["cached_tokens"] == 100
    assert rollout.raw["codex_version"] == CODEX_VERSION
    # the runner shows the binary's directory read-only (Codex.sandbox_ro_binds): no copy
    assert not [e for e in seen if "is not visible in the sandbox" in str(e.data)]
    assert {"tool.call", "tool.result", "harness.end"} <= {e.type for e in seen}
    assert all(r.api_key_sent for r in model_server.model_requests)
    # the key reached the model server and nothing else
    assert files_containing(run_dir, API_KEY) == []
    assert API_KEY not in json.dumps([e.data for e in seen])


@pytest.mark.model_script(HELLO_WORLD)
def test_agentkit_run_codex_by_name(
    model_server: ScriptedModelServer, codex_bin: ProgramBinary, tmp_path: Path
) -> None:
    run_dir = tmp_path / "cli-run"
    proc = subprocess.run(
        [
            sys.executable, "-m", "agentkit", "run", f"harbor:{EXAMPLES}", "codex",
            "--task", "harbor:hello-world", "--model", "scripted-model",
            "--base-url", model_server.base_url, "--api-key-env", "AGENTKIT_TEST_CODEX_KEY",
            "--out", str(run_dir),
        ],
        capture_output=True,
        text=True,
        timeout=280,
        check=False,
        env={**os.environ, "AGENTKIT_TEST_CODEX_KEY": API_KEY, "NO_COLOR": "1"},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    [line] = (run_dir / "rollouts.jsonl").read_text().splitlines()
    record = json.loads(line)
    assert record["status"] == "completed", record["error"]
    assert record["rewards"]["core.reward"] == 1.0
    assert API_KEY not in proc.stdout + proc.stderr
    assert files_containing(run_dir, API_KEY) == []
