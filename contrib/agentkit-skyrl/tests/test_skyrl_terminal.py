"""A Harbor task trained on turn by turn through the SkyRL bridge: the terminal harness
under the real skyrl-gym, a caller-owned loop whose policy is a fixed list of actions,
the local sandbox (bubblewrap on the host's userland), Harbor's verifier as the reward."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import skyrl_gym
from agentkit_skyrl import AgentkitTextEnv

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
SOLUTIONS: dict[str, list[str]] = json.loads((EXAMPLES / "terminal" / "solutions.json").read_text())
CONFIG = {
    "taskset": f"harbor:{EXAMPLES / 'harbor'}",
    "harness": "terminal",
    # the example tasks need only bash and coreutils: the host's userland, on purpose
    "harness_options": {"sandbox_options": {"image": "host"}},
}


def call(name: str, arguments: dict[str, Any]) -> str:
    return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"


def play(env: Any, actions: list[str]) -> tuple[list[dict[str, Any]], list[Any]]:
    """SkyRL's rollout loop with a fixed list of actions as the policy."""
    history, metadata = env.init([{"role": "user", "content": "ignored: the task has its own"}])
    assert [m["role"] for m in history] == ["system", "user"]
    assert metadata["task_id"].startswith("harbor:") and metadata["workdir"] == "/app"
    outputs = []
    try:
        for action in actions:
            out = env.step(action)
            outputs.append(out)
            history = history + [{"role": "assistant", "content": action}] + out["observations"]
            if out["done"]:
                break
    finally:
        env.close()
    return history, outputs


def test_a_harbor_task_is_trained_on_turn_by_turn_through_skyrl() -> None:
    env = skyrl_gym.make("agentkit", env_config=CONFIG, extras={"task_id": "harbor:word-stats"})
    assert isinstance(env, AgentkitTextEnv)
    look = call("shell", {"command": "wc poem.txt"})
    history, outputs = play(env, [look, *SOLUTIONS["word-stats"]])
    assert [o["done"] for o in outputs] == [False, False, True]
    assert [o["reward"] for o in outputs] == [0.0, 0.0, 1.0]
    assert outputs[0]["observations"][0]["content"].startswith(
        "<tool_response>\nExit code: 0\nOutput:\n"
    )
    last = outputs[-1]["metadata"]
    assert last["done_reason"] == "submitted" and last["task_id"] == "harbor:word-stats"
    # Harbor's verifier wrote several keys; each is a metric of the compiled rubric
    assert last["grading"]["rewards"]["core.words"] == 1.0
    assert env.chat_history == history
    metrics = env.get_metrics()
    assert metrics["reward"] == 1.0 and metrics["success"] == 1.0
    assert (metrics["turns"], metrics["tool_calls"], metrics["parse_errors"]) == (3, 3, 0)
    assert metrics["done_reason"] == "submitted"


def test_a_wrong_policy_gets_0_and_max_turns_from_skyrls_generator() -> None:
    env = skyrl_gym.make("agentkit", env_config=CONFIG, extras={"task_id": "harbor:hello-world"})
    wrong = call("shell", {"command": "echo Hello > /app/hello.txt"})
    _, outputs = play(env, [wrong, call("submit", {})])
    assert [o["reward"] for o in outputs] == [0.0, 0.0] and outputs[-1]["done"]

    # SkyRL's generator puts generator.max_turns into extras: it bounds the episode
    env = skyrl_gym.make(
        "agentkit",
        env_config=CONFIG,
        extras={"task_id": "harbor:hello-world", "max_turns": 2},
    )
    write = call("shell", {"command": "printf 'Hello, world!\\n' > /app/hello.txt"})
    _, outputs = play(env, ["Thinking it over.", write, call("submit", {})])
    assert [o["done"] for o in outputs] == [False, True]
    assert outputs[-1]["metadata"]["done_reason"] == "max_turns"
    assert outputs[-1]["reward"] == 1.0  # the last reply's command ran, then the verifier
    assert env.get_metrics()["parse_errors"] == 1
    stats = AgentkitTextEnv.aggregate_metrics([env.get_metrics()])
    assert stats["done_reason/max_turns"] == 1.0
