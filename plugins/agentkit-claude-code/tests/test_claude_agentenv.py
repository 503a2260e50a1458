"""Claude Code by name through AgentEnv and ``agentkit run`` on a Harbor example task,
graded by its own verifier (local sandbox)."""

from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from agentkit_claude_code import CLAUDE_CODE_VERSION

import agentkit.runs
from agentkit import AgentEnv, Event
from agentkit.programs import ProgramBinary
from agentkit.testing.model_server import ScriptedModelServer
from agentkit.testing.programs import (
    TELEMETRY_WEIGHTS,
    agentkit_run,
    assert_calls_carry_the_server_tokens,
    assert_exports_hold_the_calls_tokens,
    assert_key_only_reached_the_model,
    harbor_rollout,
    need_harbor_task,
    telemetry_weights,
)
from agentkit.testing.sandbox_fixtures import requires_bwrap

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("harbor_installed"), requires_bwrap]

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "harbor"
API_KEY = "sk-agentkit-claude-env-2e7c4a9f1b"

HELLO_WORLD: dict[str, Any] = {
    "rules": [
        {
            "match": {"after_tool": False, "last_user_contains": "hello.txt"},
            "reply": {
                "content": "I will create the file.",
                "tool_calls": [
                    {
                        "name": "Bash",
                        "arguments": {
                            "command": "printf 'Hello, world!\\n' > /app/hello.txt",
                            "description": "Write the greeting",
                        },
                    }
                ],
                "usage": {
                    "prompt_tokens": 900,
                    "completion_tokens": 25,
                    "cached_tokens": 100,
                    "cache_creation_tokens": 50,
                },
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


#: The same task, the model reasoning before its tool call (translated: a thinking block,
#: a reasoning item, which the program sends back with the call).
THINKING: dict[str, Any] = copy.deepcopy(HELLO_WORLD)
THINKING["rules"][0]["reply"]["reasoning"] = "Write it with printf."
# a server that returns token ids counts a completion's tokens as its ids (vLLM's usage): no
# completion_tokens of the script's own, which the proxy would take for ids that went missing
for rule in THINKING["rules"]:
    rule["reply"]["usage"].pop("completion_tokens")


@pytest.fixture
def harbor_installed() -> None:
    need_harbor_task(EXAMPLES / "hello-world")


@pytest.mark.model_script(HELLO_WORLD)
async def test_harbor_task_passes_its_verifier(
    model_server: ScriptedModelServer,
    claude_bin: ProgramBinary,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AGENTKIT_TEST_CLAUDE_KEY", API_KEY)
    model_server.set_api_key(API_KEY)  # any other key: a 401
    seen: list[Event] = []
    env = AgentEnv.from_names(f"harbor:{EXAMPLES}", "claude-code", trace_callback=seen.append)
    assert telemetry_weights(env) == TELEMETRY_WEIGHTS
    run_dir = tmp_path / "run"
    rollout = await harbor_rollout(
        env,
        "harbor:hello-world",
        server=model_server,
        out=run_dir,
        api_key_env="AGENTKIT_TEST_CLAUDE_KEY",
        sandbox_options={"image": "host"},
    )
    assert rollout.rewards["core.reward"] == 1.0
    assert rollout.rewards["harness.turns"] == 2.0
    assert rollout.rewards["harness.tool_calls"] == 1.0
    assert rollout.rewards["harness.tool_errors"] == 0.0
    assert rollout.rewards["harness.tokens"] == 900 + 25 + 950 + 8
    assert rollout.usage["input_tokens"] == 1850
    assert rollout.usage["cached_tokens"] == 100
    assert rollout.raw["claude_code_version"] == CLAUDE_CODE_VERSION
    # the runner shows the binary's directory read-only (ClaudeCode.sandbox_ro_binds): no copy
    assert not [e for e in seen if "is not visible in the sandbox" in str(e.data)]
    assert {"tool.call", "tool.result", "harness.end"} <= {e.type for e in seen}
    # the key reached the model server and nothing else
    assert_key_only_reached_the_model(API_KEY, server=model_server, run_dir=run_dir, events=seen)


@pytest.mark.model_script(HELLO_WORLD)
def test_agentkit_run_claude_code_by_name(
    model_server: ScriptedModelServer, claude_bin: ProgramBinary, tmp_path: Path
) -> None:
    run_dir = tmp_path / "cli-run"
    model_server.set_api_key(API_KEY)
    proc, record = agentkit_run(
        f"harbor:{EXAMPLES}", "claude-code", "--task", "harbor:hello-world",
        "--model", "scripted-model", "--base-url", model_server.base_url,
        "--api-key-env", "AGENTKIT_TEST_CLAUDE_KEY", "--out", str(run_dir),
        env={"AGENTKIT_TEST_CLAUDE_KEY": API_KEY, "NO_COLOR": "1"},
    )  # fmt: skip
    assert record["status"] == "completed", record["error"]
    assert record["rewards"]["core.reward"] == 1.0
    assert API_KEY not in proc.stdout + proc.stderr
    assert_key_only_reached_the_model(API_KEY, server=model_server, run_dir=run_dir)


@pytest.mark.usefixtures("harbor_installed")
@pytest.mark.model_script(HELLO_WORLD)
async def test_every_model_call_is_recorded_with_the_servers_tokens(
    model_server: ScriptedModelServer,
    claude_bin: ProgramBinary,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Through the model proxy, asked for token ids: Claude Code's calls (Anthropic
    Messages) are each recorded; the Messages protocol gives no token ids, and every
    call says so; the program still passes, and the real key reached only the server."""
    monkeypatch.setenv("AGENTKIT_TEST_CLAUDE_KEY", API_KEY)
    model_server.set_api_key(API_KEY)
    env = AgentEnv.from_names(f"harbor:{EXAMPLES}", "claude-code")
    run_dir = tmp_path / "run"
    rollout = await harbor_rollout(
        env,
        "harbor:hello-world",
        server=model_server,
        out=run_dir,
        api_key_env="AGENTKIT_TEST_CLAUDE_KEY",
        sandbox_options={"image": "host"},
        token_ids=True,
    )
    assert rollout.rewards["core.reward"] == 1.0
    calls = agentkit.runs.open(run_dir).calls(rollout.rollout_id)
    assert len(calls) >= 2 and rollout.calls == len(calls)
    assert {c.protocol for c in calls} == {"messages"}
    assert assert_calls_carry_the_server_tokens(calls, model_server) == []
    assert all("Messages protocol returns no token ids" in (c.token_note or "") for c in calls)
    assert rollout.calls_without_tokens == [
        {"note": calls[0].token_note, "calls": [c.index for c in calls]}
    ]
    assert_key_only_reached_the_model(API_KEY, server=model_server, run_dir=run_dir)


@pytest.mark.usefixtures("harbor_installed")
@pytest.mark.model_script(THINKING)
async def test_translated_to_chat_every_call_has_the_servers_exact_tokens(
    model_server: ScriptedModelServer,
    claude_bin: ProgramBinary,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """In the proxy's translation mode, against a server that serves chat completions
    only: Claude Code's Messages calls are served from chat completions, the task passes
    with its tool call, every call carries exactly the ids and logprobs the server sent,
    and the SkyRL, Tinker and verifiers exports hold those ids, in one sequence (the
    model's reasoning went to Claude Code as a thinking block, and came back with the
    tool call as the reasoning the next prompt renders)."""
    monkeypatch.setenv("AGENTKIT_TEST_CLAUDE_KEY", API_KEY)
    model_server.set_api_key(API_KEY)
    model_server.set_apis({"chat"})  # /v1/messages: 404, as from vLLM without it
    env = AgentEnv.from_names(f"harbor:{EXAMPLES}", "claude-code")
    run_dir = tmp_path / "run"
    rollout = await harbor_rollout(
        env,
        "harbor:hello-world",
        server=model_server,
        out=run_dir,
        api_key_env="AGENTKIT_TEST_CLAUDE_KEY",
        sandbox_options={"image": "host"},
        token_ids=True,
        translate_to_chat=True,
    )
    assert rollout.rewards["core.reward"] == 1.0
    assert rollout.rewards["harness.tool_calls"] == 1.0
    calls = agentkit.runs.open(run_dir).calls(rollout.rollout_id)
    assert len(calls) >= 2 and rollout.calls == len(calls)
    assert {(c.protocol, c.upstream_protocol) for c in calls} == {("messages", "chat")}
    assert {r.api for r in model_server.model_requests} == {"chat"}
    assert assert_calls_carry_the_server_tokens(calls, model_server) == calls
    assert all(c.completion_logprobs for c in calls)
    assert rollout.calls_without_tokens == []
    listed = subprocess.run(
        [sys.executable, "-m", "agentkit", "show", str(run_dir), "--rollout", rollout.rollout_id,
         "--calls"],
        capture_output=True, text=True, timeout=60, check=True,
    ).stdout  # fmt: skip
    assert "[0] messages (served from chat) stream scripted-model  200 tool_use" in listed
    exported = assert_exports_hold_the_calls_tokens(run_dir, calls)
    # each prompt extends the one before and its completion: one sequence in each format
    assert {fmt: len(sequences) for fmt, sequences in exported.items()} == {
        "skyrl": 1,
        "tinker": 1,
        "verifiers": 1,
    }
    assert_key_only_reached_the_model(API_KEY, server=model_server, run_dir=run_dir)
