"""A job with a real agent program in one cell: OpenCode on the Harbor hello-world task,
against the scripted model server, beside the oracle; both graded by the task's verifier."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from agentkit.testing.model_server import ScriptedModelServer

ROOT = Path(__file__).resolve().parents[1]
HARBOR = ROOT / "examples" / "harbor"
API_KEY = "sk-agentkit-job-5e1f9a7c3b2d"

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
            },
        },
        {"match": {"after_tool": True}, "reply": {"content": "Created /app/hello.txt."}},
    ]
}


@pytest.fixture
def opencode() -> Path:
    """The opencode program (CI installs it; the tests session sets AGENTKIT_OPENCODE_BIN)."""
    pytest.importorskip("agentkit_harbor", reason="the Harbor plugin is not installed")
    plugin = pytest.importorskip("agentkit_opencode", reason="the OpenCode plugin is not installed")
    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap (bwrap) is not installed")
    try:
        found = plugin.find_opencode(cwd=ROOT)
    except Exception as exc:  # HarnessError: not installed
        pytest.skip(f"the opencode CLI is not installed (or set AGENTKIT_OPENCODE_BIN): {exc}")
    return Path(found.path)


@pytest.mark.model_script(HELLO_WORLD)
def test_a_job_runs_a_real_agent_program_in_a_cell(
    model_server: ScriptedModelServer, opencode: Path, tmp_path: Path
) -> None:
    model_server.set_api_key(API_KEY)
    job = tmp_path / "job.toml"
    job.write_text(
        f"""
[job]
name = "agents"
concurrency = 2
sandbox_options = {{ image = "host" }}
task_ids = ["harbor:hello-world"]

[[tasksets]]
spec = "harbor:{HARBOR}"
label = "hello"

[[harnesses]]
name = "oracle"

[[harnesses]]
name = "opencode"

[[models]]
name = "scripted-model"
label = "scripted"
base_url = "{model_server.base_url}"
api_key_env = "AGENTKIT_TEST_JOB_KEY"
"""
    )
    job_dir = tmp_path / "job"
    proc = subprocess.run(
        [sys.executable, "-m", "agentkit", "job", "run", str(job), "--out", str(job_dir), "--json"],
        capture_output=True,
        text=True,
        timeout=280,
        env={
            **os.environ,
            "AGENTKIT_TEST_JOB_KEY": API_KEY,
            "AGENTKIT_OPENCODE_BIN": str(opencode),
        },
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads(proc.stdout)
    assert [c["name"] for c in report["cells"]] == [
        "hello.oracle.scripted",
        "hello.opencode.scripted",
    ]
    assert report["complete"] is True
    for cell in report["cells"]:
        assert cell["summary"]["mean_reward"] == 1.0, cell
    [line] = (
        (job_dir / "cells" / "hello.opencode.scripted" / "rollouts.jsonl").read_text().splitlines()
    )
    rollout = json.loads(line)
    assert (
        rollout["rewards"]["core.reward"] == 1.0 and rollout["rewards"]["harness.tool_calls"] == 1.0
    )
    # the program's model calls reached the server with the key, which no file of the job holds
    assert model_server.model_requests and all(r.api_key_sent for r in model_server.model_requests)
    for path in job_dir.rglob("*"):
        if path.is_file():
            assert API_KEY.encode() not in path.read_bytes(), path
