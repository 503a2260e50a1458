"""agentkit tasksets and harnesses under the real verifiers 0.4.0: its loader, its
``vf-eval`` CLI, its subprocess runtime and interception server, against the
scripted model server on loopback."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest

from agentkit.testing.model_server import ScriptedModelServer

REPO = Path(__file__).resolve().parents[3]
VF_EVAL = str(Path(sys.executable).parent / "vf-eval")
#: The key vf-eval is given (VF_TEST_KEY) for the model server.
VF_KEY = "sk-scripted-vf-5e1c"


def vf_eval(
    tmp_path: Path, server: ScriptedModelServer, *args: str, cwd: Path | None = None
) -> list[dict[str, Any]]:
    """Run ``vf-eval agentkit-verifiers ...``; return every trace with its task data."""
    out = tmp_path / "out"
    env = dict(os.environ, VF_TEST_KEY=VF_KEY, PRIME_DISABLE_VERSION_CHECK="1")
    command = [
        VF_EVAL,
        "agentkit-verifiers",
        *args,
        "--env.agent.runtime.type",
        "subprocess",
        "--model",
        "scripted-model",
        "--client.base-url",
        server.base_url,
        "--client.api-key-var",
        "VF_TEST_KEY",
        "--no-push",
        "--no-rich",
        "-o",
        str(out),
    ]
    done = subprocess.run(
        command,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
        cwd=cwd or tmp_path,
        env=env,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (traces_file,) = out.glob("*/traces.jsonl")
    traces = []
    for line in traces_file.read_text().splitlines():
        episode = json.loads(line)
        for trace in episode["traces"]:
            trace["task_data"] = episode["task"]["data"]
            traces.append(trace)
    return traces


def test_loader_finds_one_taskset_and_one_harness() -> None:
    from agentkit_verifiers import AgentkitHarness, AgentkitTaskset
    from verifiers.v1.utils import loaders

    assert loaders.taskset_class("agentkit-verifiers") is AgentkitTaskset
    assert loaders.harness_class("agentkit-verifiers") is AgentkitHarness
    # the taskset's bundled harness is the default one
    assert loaders.default_harness_id("agentkit-verifiers") == "agentkit-verifiers"


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")
def test_harbor_taskset_with_oracle_harness_scored_by_compiled_rubric(
    tmp_path: Path, model_server: ScriptedModelServer
) -> None:
    traces = vf_eval(
        tmp_path,
        model_server,
        "--env.taskset.spec",
        "harbor:examples/harbor",  # relative to the working directory, as users type it
        "--env.agent.harness.id",
        "agentkit-verifiers",
        "--env.agent.harness.agentkit",
        "oracle",
        # the examples need only the host's bash and coreutils: no image to make
        "--env.agent.harness.sandbox_options.image",
        "host",
        cwd=REPO,
    )
    by_task = {t["task_data"]["agentkit_task_id"]: t for t in traces}
    hello = by_task["harbor:hello-world"]
    assert hello["ok"] and hello["rewards"]["agentkit"]["score"] == 1.0
    assert hello["metrics"]["agentkit/core.reward"] == 1.0
    wrong = by_task["harbor:wrong-on-purpose"]
    assert wrong["ok"] and wrong["rewards"]["agentkit"]["score"] == 0.0
    steps = by_task["harbor:build-a-tool"]
    assert steps["metrics"]["agentkit/core.steps_completed"] == 3.0
    slow = by_task["harbor:too-slow"]  # the oracle times out: a harness error, not a 0
    assert not slow["ok"] and "timeout" in slow["errors"][0]["message"]
    assert slow["info"]["agentkit"]["status"] == "timeout"
    assert model_server.chat_requests == []  # the oracle never calls a model


def test_chat_harness_calls_the_model_through_verifiers_interception(
    tmp_path: Path, model_server: ScriptedModelServer
) -> None:
    tasks = tmp_path / "qa.jsonl"
    tasks.write_text(
        '{"id": "capital", "input": "Capital of France?", "target": "Paris"}\n'
        '{"id": "sum", "input": "1+1?", "target": "2"}\n'
    )
    model_server.set_script(
        {
            "rules": [{"match": {"last_user_contains": "France"}, "reply": {"content": "Paris"}}],
            "default": {"content": "3"},
        }
    )
    model_server.set_api_key(VF_KEY)  # any other key gets a 401
    traces = vf_eval(tmp_path, model_server, "--env.taskset.spec", f"jsonl:{tasks}", "-r", "2")
    rewards = sorted(
        (t["task_data"]["agentkit_task_id"], t["rewards"]["agentkit"]["score"]) for t in traces
    )
    assert rewards == [("qa:capital", 1.0), ("qa:capital", 1.0), ("qa:sum", 0.0), ("qa:sum", 0.0)]
    for trace in traces:
        assert trace["info"]["agentkit"]["harness"] == "chat"
        assert len(trace["calls"]) == 1  # verifiers recorded the model call it intercepted
    # every call reached our server from verifiers, with verifiers' key for it
    requests = model_server.chat_requests
    assert len(requests) == 4 and all(r.api_key_sent for r in requests)
    assert {r.body["model"] for r in requests if r.body} == {"scripted-model"}


def test_verifiers_own_harness_is_scored_by_the_agentkit_rubric(
    tmp_path: Path, model_server: ScriptedModelServer
) -> None:
    if shutil.which("uv") is None:
        pytest.skip("verifiers' null harness runs its chat program with uv")
    tasks = tmp_path / "qa.jsonl"
    tasks.write_text(
        '{"id": "capital", "input": "Capital of France?", "target": "Paris"}\n'
        '{"id": "sum", "input": "1+1?", "target": "2"}\n'
    )
    model_server.set_script({"default": {"content": "Paris"}})
    traces = vf_eval(
        tmp_path,
        model_server,
        "--env.taskset.spec",
        f"jsonl:{tasks}",
        "--env.agent.harness.id",
        "null",
    )
    rewards = {
        t["task_data"]["agentkit_task_id"]: t["rewards"]["agentkit"]["score"] for t in traces
    }
    assert rewards == {"qa:capital": 1.0, "qa:sum": 0.0}


def test_core_and_plugins_install_beside_verifiers() -> None:
    """verifiers 0.4.0 pins mcp==2.0.0 and openai<3: agentkit must resolve with them."""
    assert version("verifiers") == "0.4.0"
    assert version("mcp") == "2.0.0"
    assert int(version("openai").split(".")[0]) < 3
    for dist in ("agentkit", "agentkit-verifiers", "agentkit-harbor", "agentkit-fleet"):
        assert version(dist)
    uv = shutil.which("uv")
    if uv is None:
        pytest.skip("uv is needed for 'uv pip check'")
    done = subprocess.run(
        [uv, "pip", "check", "--python", sys.executable],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")
def test_fleet_tool_call_harness_multi_turn_through_interception(
    tmp_path: Path, model_server: ScriptedModelServer
) -> None:
    solutions = json.loads((REPO / "examples" / "fleet" / "solutions.json").read_text())
    actions = solutions["cancel-grace-march"]
    model_server.set_script(
        {
            "rules": [
                {"match": {"turn": i}, "reply": {"content": a}} for i, a in enumerate(actions)
            ],
            "default": {"content": "<done>"},
        }
    )
    (trace,) = vf_eval(
        tmp_path,
        model_server,
        "--env.taskset.spec",
        f"fleet:{REPO / 'examples' / 'fleet' / 'tasks.json'}",
        "--env.agent.harness.id",
        "agentkit-verifiers",
        "--env.agent.harness.agentkit",
        "fleet-tool-call",
        "--select.include.ids",
        "fleet:cancel-grace-march",
    )
    assert trace["rewards"]["agentkit"]["score"] == 1.0
    assert trace["metrics"]["agentkit/harness.tool_calls"] == 1.0
    assert len(trace["calls"]) == 2 == len(model_server.chat_requests)
