"""agentkit's Fleet taskset + the fleet-tool-call harness as a real skyrl-gym
environment, driven by a scripted policy (the scripted model server on loopback)."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path
from typing import Any

import agentkit_skyrl
import openai
import pytest
import skyrl_gym
from agentkit_skyrl import AgentkitTextEnv

from agentkit import AgentkitError
from agentkit.testing.model_server import ScriptedModelServer

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "fleet"
TASKS = f"fleet:{EXAMPLES / 'tasks.json'}"
SOLUTIONS: dict[str, list[str]] = json.loads((EXAMPLES / "solutions.json").read_text())
CONFIG = {"taskset": TASKS, "harness": "fleet-tool-call", "max_turns": 6}


def script_for(actions: list[str]) -> dict[str, Any]:
    """The policy: the i-th assistant turn answers ``actions[i]``."""
    return {
        "rules": [{"match": {"turn": i}, "reply": {"content": a}} for i, a in enumerate(actions)],
        "default": {"content": "<done>"},
    }


def play(env: Any, server: ScriptedModelServer) -> tuple[list[dict[str, Any]], list[Any]]:
    """A SkyRL-style rollout loop: the policy sees the chat history, the env steps."""
    client = openai.OpenAI(base_url=server.base_url, api_key="sk-policy")
    history, metadata = env.init([{"role": "user", "content": "ignored: the task has its own"}])
    assert [m["role"] for m in history] == ["system", "user"]
    assert metadata["task_key"] and metadata["tools"] and metadata["task_id"].startswith("fleet:")
    outputs = []
    try:
        while True:
            reply = client.chat.completions.create(model="policy", messages=history)
            action = reply.choices[0].message.content or ""
            out = env.step(action)
            outputs.append(out)
            history = history + [{"role": "assistant", "content": action}] + out["observations"]
            if out["done"]:
                break
    finally:
        env.close()
    return history, outputs


def test_registered_with_skyrl_gym() -> None:
    assert agentkit_skyrl.ENV_ID in skyrl_gym.registry
    agentkit_skyrl.register()  # registering again is harmless
    with pytest.raises(AgentkitError, match="already has an environment 'gsm8k'"):
        agentkit_skyrl.register("gsm8k")


def test_correct_policy_completes_a_fleet_task_to_reward_1(
    model_server: ScriptedModelServer,
) -> None:
    key = "cancel-grace-march"
    model_server.set_script(script_for(SOLUTIONS[key]))
    env = skyrl_gym.make("agentkit", env_config=CONFIG, extras={"task_id": f"fleet:{key}"})
    assert isinstance(env, AgentkitTextEnv)
    history, outputs = play(env, model_server)
    assert history[-1] == {"role": "user", "content": "Task marked as complete."}
    assert env.chat_history == history
    assert [o["reward"] for o in outputs] == [0.0, 1.0]
    assert [o["done"] for o in outputs] == [False, True]
    assert outputs[0]["metadata"]["tool_call"]["name"] == "cancel_booking"
    assert outputs[0]["observations"][0]["content"].startswith("Tool result:")
    assert outputs[-1]["metadata"]["done_reason"] == "agent_done"
    metrics = env.get_metrics()
    assert metrics["reward"] == 1.0 and metrics["success"] == 1.0
    assert (metrics["turns"], metrics["tool_calls"], metrics["tool_errors"]) == (2, 1, 0)
    # SkyRL's Fleet env reports these four (integrations/fleet/env.py:381-388)
    assert (metrics["task_key"], metrics["env_key"]) == (key, "bookings")
    # the policy saw the tool result before its second turn
    assert any(
        "Tool result:" in str(m["content"]) for m in model_server.chat_requests[1].body["messages"]
    )
    env.close()  # idempotent


def test_wrong_policy_gets_reward_0_and_metrics_aggregate(
    model_server: ScriptedModelServer,
) -> None:
    key = "cancel-grace-march"
    wrong = [
        '<tool_call>{"name": "cancel_booking", "arguments": {"booking_id": 1}}</tool_call>',
        "Done. <done>",
    ]
    model_server.set_script(script_for(wrong))
    env = skyrl_gym.make(
        "agentkit", env_config=CONFIG, extras={"extra_info": {"task_id": f"fleet:{key}"}}
    )
    _, outputs = play(env, model_server)
    assert outputs[-1]["done"] and outputs[-1]["reward"] == 0.0
    wrong_metrics = env.get_metrics()
    assert wrong_metrics["success"] == 0.0

    model_server.set_script(script_for(["no tool call and no done"] * 10))
    env2 = skyrl_gym.make(
        "agentkit", env_config={**CONFIG, "max_turns": 2}, extras={"task_id": f"fleet:{key}"}
    )
    _, outputs2 = play(env2, model_server)
    assert len(outputs2) == 2 and outputs2[-1]["reward"] == 0.0
    aggregated = AgentkitTextEnv.aggregate_metrics([wrong_metrics, env2.get_metrics()])
    assert aggregated["total_episodes"] == 2 and aggregated["reward"] == 0.0
    assert aggregated["done_reason/agent_done"] == 0.5
    assert aggregated["done_reason/max_turns"] == 0.5
    # per environment, as SkyRL's Fleet env (integrations/fleet/env.py:390-439)
    assert aggregated["bookings/num_episodes"] == 2 and aggregated["bookings/max_turns"] == 2


@pytest.mark.anyio
async def test_sync_methods_work_inside_a_running_event_loop() -> None:
    """SkyRL's generator is async and calls the sync env methods from it."""
    key = "room-202-back-in-service"
    env = skyrl_gym.make("agentkit", env_config=CONFIG, extras={"task_id": f"fleet:{key}"})
    env.init([])
    for action in SOLUTIONS[key]:
        out = env.step(action)
        await asyncio.sleep(0)
    env.close()
    assert out["done"] and out["reward"] == 1.0


def test_errors_say_what_is_missing(tmp_path: Path) -> None:
    with pytest.raises(AgentkitError, match="extras must name the task"):
        skyrl_gym.make("agentkit", env_config=CONFIG, extras={})
    with pytest.raises(AgentkitError, match=r"env_config\['taskset'\]"):
        skyrl_gym.make("agentkit", env_config={}, extras={"task_id": "x:y"})
    tasks = tmp_path / "qa.jsonl"
    tasks.write_text('{"id": "a", "input": "hi", "target": "ok"}\n')
    env = skyrl_gym.make(
        "agentkit",
        env_config={"taskset": f"jsonl:{tasks}", "harness": "chat"},
        extras={"task_id": "qa:a"},
    )
    with pytest.raises(AgentkitError, match="not step-capable"):
        env.init([])


def test_rows_of_agentkit_fleet_split_drive_the_env_as_skyrl_passes_them(
    model_server: ScriptedModelServer, tmp_path: Path
) -> None:
    """``agentkit fleet split`` parquet -> SkyRL's dataset row -> ``skyrl_gym.make``.

    SkyRL's PromptDataset gives the env every column but ``prompt`` and
    ``env_class`` as ``extras``: the rows carry ``task_key`` (Fleet's
    convention), which picks the task, and ``env_class`` names the id the
    adapter is registered under.
    """
    import subprocess
    import sys

    pq = pytest.importorskip("pyarrow.parquet")
    out = tmp_path / "data"
    subprocess.run(
        [sys.executable, "-m", "agentkit", "fleet", "split", TASKS, "--out", str(out)],
        check=True,
        capture_output=True,
        timeout=120,
    )
    rows = pq.read_table(out / "train.parquet").to_pylist()
    rows += pq.read_table(out / "validation.parquet").to_pylist()
    row = next(r for r in rows if r["task_key"] == "cancel-grace-march")
    env_class = row.pop("env_class")
    row.pop("prompt")
    agentkit_skyrl.register(env_class)
    model_server.set_script(script_for(SOLUTIONS["cancel-grace-march"]))
    env = skyrl_gym.make(env_class, env_config=CONFIG, extras=row)
    assert env.task.task_id == "fleet:cancel-grace-march"
    _, outputs = play(env, model_server)
    assert outputs[-1]["done"] and outputs[-1]["reward"] == 1.0
    with pytest.raises(AgentkitError, match="no-such-key"):
        skyrl_gym.make(env_class, env_config=CONFIG, extras={**row, "task_key": "no-such-key"})


def test_a_skyrl_fleet_config_switches_by_changing_the_env_class_only(
    model_server: ScriptedModelServer,
) -> None:
    """SkyRL's Fleet setup, with agentkit's class as the entry point.

    main_fleet.py registers ``fleet_task`` and the generator calls
    ``skyrl_gym.make(env_class, env_config=<environment.skyrl_gym.fleet_task>,
    extras=<row columns> + {"max_turns": generator.max_turns})``
    (skyrl_gym_generator.py:224-226). Only the entry point changes.
    """
    from omegaconf import OmegaConf

    env_id = "fleet_task_agentkit_config"
    if env_id not in skyrl_gym.registry:
        skyrl_gym.register(id=env_id, entry_point="agentkit_skyrl:AgentkitTextEnv")
    config = OmegaConf.create({"tasks_file": str(EXAMPLES / "tasks.json"), "ttl_seconds": 600})
    model_server.set_script(script_for(["no tool call, no done"] * 5))
    env = skyrl_gym.make(
        env_id,
        env_config=config,
        extras={"task_key": "cancel-grace-march", "data_source": "bookings", "max_turns": 2},
    )
    assert isinstance(env, AgentkitTextEnv) and env.max_turns == 2
    assert env.harness.ttl_seconds == 600
    _, outputs = play(env, model_server)
    # extras["max_turns"] ends the episode at turn 2 (env.py:117, 319-325)
    assert len(outputs) == 2 and outputs[-1]["done"]
    assert outputs[-1]["observations"] == []
    assert outputs[-1]["metadata"]["done_reason"] == "max_turns"
    metrics = env.get_metrics()
    assert {k: metrics[k] for k in ("task_key", "env_key", "turns", "tool_calls")} == {
        "task_key": "cancel-grace-march",
        "env_key": "bookings",
        "turns": 2,
        "tool_calls": 0,
    }
    aggregated = AgentkitTextEnv.aggregate_metrics([metrics])
    for key, value in {
        "bookings/avg_turns": 2.0,
        "bookings/min_turns": 2,
        "bookings/max_turns": 2,
        "bookings/avg_tool_calls": 0.0,
        "bookings/tool_calls_per_turn": 0.0,
        "bookings/num_episodes": 1,
        "avg_turns": 2.0,
        "avg_tool_calls": 0.0,
        "tool_calls_per_turn": 0.0,
        "total_episodes": 1,
    }.items():
        assert aggregated[key] == value, key
    # tasks_file may come in extras too (env.py:121); a bad max_turns is a clear error
    env2 = skyrl_gym.make(
        env_id,
        env_config={},
        extras={"task_key": "cancel-grace-march", "tasks_file": str(EXAMPLES / "tasks.json")},
    )
    assert env2.task.task_id == "fleet:cancel-grace-march"
    with pytest.raises(AgentkitError, match=r"extras\['max_turns'\] must be a positive integer"):
        skyrl_gym.make(
            env_id,
            env_config=config,
            extras={"task_key": "cancel-grace-march", "max_turns": 0},
        )
