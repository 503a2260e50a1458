"""mini-swe-agent by name through AgentEnv and `agentkit run` on a Harbor example task,
graded by its own verifier, in the local sandbox: on the host userland, and on the
task's image root (the default)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
from agentkit_mini_swe_agent import MINI_SWE_AGENT_VERSION, MiniSweAgentInstall

import agentkit.runs
from agentkit import AgentEnv, Event
from agentkit.testing.model_server import ScriptedModelServer
from agentkit.testing.programs import (
    TELEMETRY_WEIGHTS,
    agentkit_run,
    assert_calls_carry_the_server_tokens,
    assert_exports_carry_the_server_tokens,
    assert_key_only_reached_the_model,
    harbor_rollout,
    hello_world_token_script,
    need_harbor_task,
    telemetry_weights,
)
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

#: HELLO_WORLD as a server that returns token ids answers it: a completion's tokens are
#: counted as its ids (vLLM's usage), not by the script, whose own count the proxy would
#: take for ids that went missing.
HELLO_WORLD_IDS: dict[str, Any] = copy.deepcopy(HELLO_WORLD)
for _rule in HELLO_WORLD_IDS["rules"]:
    _rule["reply"]["usage"].pop("completion_tokens")


@pytest.fixture
def harbor_installed() -> None:
    need_harbor_task(EXAMPLES / "hello-world")


@pytest.mark.usefixtures("harbor_installed")
@pytest.mark.model_script(HELLO_WORLD)
async def test_harbor_task_passes_its_verifier(
    model_server: ScriptedModelServer,
    mini_install: MiniSweAgentInstall,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AGENTKIT_TEST_MINI_KEY", API_KEY)
    model_server.set_api_key(API_KEY)  # any other key: a 401
    seen: list[Event] = []
    env = AgentEnv.from_names(
        f"harbor:{EXAMPLES}",
        "mini-swe-agent",
        trace_callback=seen.append,
        retry_attempts=1,
    )
    assert telemetry_weights(env) == TELEMETRY_WEIGHTS
    [hello] = [t.task_id for t in env.taskset if t.task_id.endswith(":hello-world")]
    run_dir = tmp_path / "run"
    rollout = await harbor_rollout(
        env,
        hello,
        server=model_server,
        out=run_dir,
        api_key_env="AGENTKIT_TEST_MINI_KEY",
        sandbox_options={"image": "host"},  # the host userland (the CLI test: the image's)
    )
    assert rollout.rewards["core.reward"] == 1.0
    assert rollout.rewards["harness.turns"] == 2.0
    assert rollout.rewards["harness.tool_calls"] == 2.0
    assert rollout.rewards["harness.tool_errors"] == 0.0
    assert rollout.rewards["harness.tokens"] == 900 + 25 + 950 + 8
    assert rollout.usage["input_tokens"] == 1850
    assert rollout.usage["cached_tokens"] == 100
    assert rollout.raw["mini_swe_agent_version"] == MINI_SWE_AGENT_VERSION
    assert {"tool.call", "tool.result", "harness.end"} <= {e.type for e in seen}
    # the key reached the model server and nothing else: not the run directory,
    # not the events, not mini's own files
    assert_key_only_reached_the_model(API_KEY, server=model_server, run_dir=run_dir, events=seen)
    events_file = run_dir / rollout.events_file if rollout.events_file else None
    assert events_file is not None and "tool.result" in events_file.read_text()


@pytest.mark.usefixtures("harbor_installed")
@pytest.mark.model_script(HELLO_WORLD)
def test_cli_runs_mini_swe_agent_by_name(
    model_server: ScriptedModelServer, mini_install: MiniSweAgentInstall, tmp_path: Path
) -> None:
    run_dir = tmp_path / "cli-run"
    _, record = agentkit_run(
        f"harbor:{EXAMPLES}", "mini-swe-agent", "--task", "harbor:hello-world",
        "--model", "scripted-model", "--base-url", model_server.base_url,
        "-H", "retry_attempts=1", "--out", str(run_dir),
    )  # fmt: skip
    assert record["status"] == "completed"
    assert record["rewards"]["core.reward"] == 1.0
    assert record["raw"]["exit_status"] == "Submitted"


@pytest.mark.usefixtures("harbor_installed")
@pytest.mark.model_script(HELLO_WORLD_IDS)
async def test_every_model_call_is_recorded_with_the_servers_tokens(
    model_server: ScriptedModelServer,
    mini_install: MiniSweAgentInstall,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Through the model proxy, asked for token ids: mini-swe-agent's calls (chat
    completions through litellm) are each recorded with exactly the token ids and
    logprobs the server sent in vLLM's fields; the program still passes, and the real
    key reached only the server."""
    monkeypatch.setenv("AGENTKIT_TEST_MINI_KEY", API_KEY)
    model_server.set_api_key(API_KEY)
    env = AgentEnv.from_names(f"harbor:{EXAMPLES}", "mini-swe-agent", retry_attempts=1)
    [hello] = [t.task_id for t in env.taskset if t.task_id.endswith(":hello-world")]
    run_dir = tmp_path / "run"
    rollout = await harbor_rollout(
        env,
        hello,
        server=model_server,
        out=run_dir,
        api_key_env="AGENTKIT_TEST_MINI_KEY",
        sandbox_options={"image": "host"},
        token_ids=True,
    )
    assert rollout.rewards["core.reward"] == 1.0
    calls = agentkit.runs.open(run_dir).calls(rollout.rollout_id)
    assert len(calls) >= 2 and rollout.calls == len(calls)
    assert {c.protocol for c in calls} == {"chat"}
    assert all(c.stream is False for c in calls)
    with_ids = assert_calls_carry_the_server_tokens(calls, model_server)
    assert with_ids == calls  # every call: the server's ids, exactly
    assert all(c.completion_logprobs and c.token_note is None for c in calls)
    assert rollout.calls_without_tokens == []
    assert_key_only_reached_the_model(API_KEY, server=model_server, run_dir=run_dir)


@pytest.mark.usefixtures("harbor_installed")
@pytest.mark.model_script(
    hello_world_token_script(describe=False, submit="echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT")
)
async def test_the_export_holds_the_servers_tokens_merged_and_after_a_prefix_break(
    model_server: ScriptedModelServer, mini_install: MiniSweAgentInstall, tmp_path: Path
) -> None:
    """``agentkit export`` of a real mini-swe-agent run through the model proxy with
    token ids: the SkyRL, Tinker and verifiers records hold exactly the ids and
    logprobs the server sent, call by call; the second call's prompt extends the first
    call's tokens and merges into its sequence, the third's shows a tool call otherwise
    than it was sampled (a prefix break) and starts a second sequence."""
    env = AgentEnv.from_names(f"harbor:{EXAMPLES}", "mini-swe-agent", retry_attempts=1)
    [hello] = [t.task_id for t in env.taskset if t.task_id.endswith(":hello-world")]
    run_dir = tmp_path / "run"
    rollout = await harbor_rollout(
        env, hello, server=model_server, out=run_dir, sandbox_options={"image": "host"},
        token_ids=True,
    )  # fmt: skip
    assert rollout.rewards["core.reward"] == 1.0
    sequences = assert_exports_carry_the_server_tokens(run_dir, rollout.rollout_id, model_server)
    assert sequences == [[0, 1], [2]]
