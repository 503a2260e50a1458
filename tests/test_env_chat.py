"""The chat harness on a jsonl taskset through AgentEnv, against the scripted model server."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentkit import Event
from agentkit.env import AgentEnv
from agentkit.testing.model_server import ScriptedModelServer

pytestmark = pytest.mark.anyio


@pytest.fixture
def tasks_file(tmp_path: Path) -> Path:
    path = tmp_path / "qa.jsonl"
    rows = [
        {"id": "capital", "input": "Capital of France?", "target": "Paris"},
        {"id": "sum", "input": "1+1?", "target": "2"},
        {
            "id": "chat",
            "input": [{"role": "user", "content": "hi"}, {"role": "user", "content": "again"}],
            "target": "ok",
        },
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


async def test_chat_rollouts_are_scored_grouped_and_traced(
    tmp_path: Path, tasks_file: Path, model_server: ScriptedModelServer
) -> None:
    model_server.set_script(
        {
            "rules": [
                {"match": {"last_user_contains": "France"}, "reply": {"content": "Paris"}},
                {"match": {"last_user_contains": "1+1"}, "reply": {"content": "3"}},
            ],
            "default": {"content": "ok", "latency": 0.05},
        }
    )
    events: list[Event] = []
    env = AgentEnv.from_names(f"jsonl:{tasks_file}", "chat", trace_callback=events.append)
    results = await env.evaluate(
        rollouts_per_task=2,
        concurrency=4,
        model="scripted-model",
        base_url=model_server.base_url,
        out=tmp_path / "run",
    )
    rewards = {(r.task_id, r.rollout_index): r.reward for r in results.rollouts}
    assert rewards == {
        ("qa:capital", 0): 1.0,
        ("qa:capital", 1): 1.0,
        ("qa:sum", 0): 0.0,
        ("qa:sum", 1): 0.0,
        ("qa:chat", 0): 1.0,
        ("qa:chat", 1): 1.0,
    }
    chat = next(r for r in results.rollouts if r.task_id == "qa:chat")
    assert chat.usage["requests"] == 2 and chat.example_id == "chat"
    assert [m["role"] for m in chat.messages] == ["user", "assistant", "user", "assistant"]
    types = [e.type for e in events if e.rollout_id == chat.rollout_id]
    assert types[0] == "harness.start" and types[-1] == "harness.end"
    assert types.count("model.request") == 2
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert manifest["rubric"]["metrics"][0]["name"] == "core.correct"
    assert manifest["harness"]["distribution"] == "agentkit"


async def test_rate_limits_are_retried_then_succeed(
    tasks_file: Path, model_server: ScriptedModelServer
) -> None:
    model_server.set_script(
        {
            "rules": [{"match": {}, "times": 2, "reply": {"fail": "rate_limit"}}],
            "default": {"content": "Paris"},
        }
    )
    env = AgentEnv.from_names(f"jsonl:{tasks_file}", "chat", contributors=())
    results = await env.evaluate(
        task_ids=["qa:capital"], model="m", base_url=model_server.base_url, retry_base_delay=0.01
    )
    rec = results.rollouts[0]
    assert rec.status == "completed" and rec.reward == 1.0, rec.error
    assert rec.attempts == 3
    assert {r["error_kind"] for r in rec.retries} == {"model_rate_limit"}


async def test_server_errors_that_persist_are_recorded_not_raised(
    tasks_file: Path, model_server: ScriptedModelServer
) -> None:
    model_server.set_script({"default": {"fail": "server_error"}})
    env = AgentEnv.from_names(f"jsonl:{tasks_file}", "chat")
    results = await env.evaluate(
        limit=1, model="m", base_url=model_server.base_url, max_retries=2, retry_base_delay=0.01
    )
    rec = results.rollouts[0]
    assert rec.status == "failed" and rec.error_kind == "model_server_error"
    # the rollout could not run: no reward (not a zero), left out of the statistics
    assert rec.attempts == 3 and rec.reward is None and rec.infra_error
    assert results.summary["error_kinds"] == {"model_server_error": 1}
    assert results.summary["infra_errors"] == 1 and results.summary["mean_reward"] is None


async def test_unreachable_server_is_one_clear_error(tasks_file: Path) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = AgentEnv.from_names(f"jsonl:{tasks_file}", "chat")
    with pytest.raises(Exception, match="cannot reach the model server") as err:
        await env.evaluate(model="m", base_url=f"http://127.0.0.1:{port}/v1")
    assert type(err.value).__name__ == "PreflightError"


def test_from_names_checks_options(tasks_file: Path) -> None:
    with pytest.raises(Exception, match="unknown option 'nope' for harness 'chat'"):
        AgentEnv.from_names(f"jsonl:{tasks_file}", "chat", nope=1)
    with pytest.raises(Exception, match=r"jsonl taskset file missing\.jsonl does not exist"):
        AgentEnv.from_names("jsonl:missing.jsonl", "chat")
