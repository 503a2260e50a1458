"""The Fleet platform path, through the real fleet-python SDK against a loopback stand-in."""

from __future__ import annotations

import asyncio
import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from agentkit_fleet.harness import FleetToolCallHarness
from agentkit_fleet.taskset import fleet_taskset
from fleet_helpers import SOLUTIONS, TASKS_JSON, script_for
from fleet_platform_standin import FleetStandIn

from agentkit import RunContext

pytest.importorskip("fleet")

API_KEY = "fleet-test-key-0123456789"


@pytest.fixture
def standin(monkeypatch: pytest.MonkeyPatch) -> Iterator[FleetStandIn]:
    server = FleetStandIn(API_KEY)
    monkeypatch.setenv("FLEET_API_KEY", API_KEY)
    monkeypatch.setenv("FLEET_BASE_URL", server.base_url)
    monkeypatch.delenv("RUNNER_AUTH_TOKEN", raising=False)
    try:
        yield server
    finally:
        server.stop()


def run(task_key: str, actions: list[str], model_server: Any) -> Any:
    model_server.set_script(script_for(actions))
    task = fleet_taskset(str(TASKS_JSON)).get_task(f"fleet:{task_key}")
    ctx = RunContext(model="scripted", base_url=model_server.base_url, api_key="sk-x")
    return asyncio.run(FleetToolCallHarness(ttl_seconds=300).run(task, ctx))


def test_platform_rollout_creates_lists_verifies_and_closes_through_the_sdk(
    standin: FleetStandIn, model_server: Any
) -> None:
    result = run("move-ada-march", SOLUTIONS["move-ada-march"], model_server)
    assert result.status == "completed", result.error
    assert result.raw["environment"]["kind"] == "platform"
    assert result.raw["reward"] == 1.0
    assert result.raw["verifier"]["where"] == "platform"
    # creation from env_key:env_version and data_key:data_version, with the TTL
    (body,) = standin.create_bodies
    assert body["env_key"] == "bookings" and body["env_version"] == "v1"
    assert body["data_key"] == "bookings-seed" and body["data_version"] == "v1"
    assert body["ttl_seconds"] == 300
    # the platform's verifier execution got the task's verifier (in the SDK's format)
    (call,) = standin.verifier_calls
    assert "def validate_task" in call["function_code"]
    # closed at the end, with the API key on every control-plane call
    methods = [(m, p) for m, p, _ in standin.requests]
    assert ("DELETE", "/v1/env/instances/inst-1") in methods
    assert standin.instances["inst-1"]["status"] == "stopped"
    assert all(auth for m, p, auth in standin.requests if p.startswith("/v1/env/"))
    assert API_KEY not in repr(result.to_json())


def test_platform_wrong_answer_scores_0_and_the_instance_is_still_closed(
    standin: FleetStandIn, model_server: Any
) -> None:
    result = run("move-ada-march", ["Nothing to do. <done>"], model_server)
    assert result.status == "completed", result.error
    assert result.raw["reward"] == 0.0
    assert standin.instances["inst-1"]["status"] == "stopped"


def test_a_bad_api_key_fails_at_environment_start(
    standin: FleetStandIn, model_server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FLEET_API_KEY", "wrong-key")
    result = run("move-ada-march", ["<done>"], model_server)
    assert result.status == "failed" and result.error_kind == "environment_start"
    assert "wrong-key" not in (result.error or "")
    assert not standin.instances


COUNT_TASKS = [
    {
        "task_key": f"count-{kind}",
        "prompt": "How many guests are there?",
        "env_key": "bookings",
        "env_version": "v1",
        "verifier_code": (
            "def validate_task(env: Environment, final_answer: str | None = None) -> int:\n"
            f"    n = {expr}\n"
            "    return TASK_SUCCESSFUL_SCORE if n == 4 else TASK_FAILED_SCORE\n"
        ),
    }
    for kind, expr in (
        ("int", 'int(env.db("current").table("guests").count())'),
        ("raw", 'env.db("current").table("guests").count()'),
    )
]


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")
def test_the_platform_and_the_sandbox_grade_alike(
    standin: FleetStandIn, model_server: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The stand-in grades with the Fleet SDK's own verifier classes; agentkit's sandbox
    runner agrees with it, also where Fleet's API is surprising (``count()`` is no number)."""
    tasks = tmp_path / "tasks.json"
    tasks.write_text(json.dumps(COUNT_TASKS))
    taskset = fleet_taskset(str(tasks))
    model_server.set_script({"default": {"content": "There are 4 guests. <done>"}})
    ctx = RunContext(model="scripted", base_url=model_server.base_url, api_key="sk-x")
    rewards: dict[str, dict[str, float]] = {}
    for provider in ("platform", "local"):
        harness = FleetToolCallHarness(provider=provider)  # type: ignore[arg-type]
        for kind in ("int", "raw"):
            result = asyncio.run(harness.run(taskset.get_task(f"fleet:count-{kind}"), ctx))
            assert result.status == "completed", result.error
            assert result.raw["verifier"]["where"] == (
                "platform" if provider == "platform" else "sandbox"
            )
            rewards.setdefault(provider, {})[kind] = result.raw["reward"]
    assert rewards == {"platform": {"int": 1.0, "raw": 0.0}, "local": {"int": 1.0, "raw": 0.0}}
    assert len(standin.verifier_calls) == 2
