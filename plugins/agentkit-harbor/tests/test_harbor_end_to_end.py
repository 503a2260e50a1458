"""The examples through AgentEnv and the real ``agentkit run`` command."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from harbor_helpers import EXAMPLES, needs_bwrap

pytestmark = needs_bwrap

#: The examples need only the host's bash and coreutils: run them there, on purpose.
HOST_USERLAND = {"image": "host"}
SHOULD_PASS = {"harbor:hello-world", "harbor:word-stats", "harbor:build-a-tool"}


@pytest.mark.anyio
async def test_agent_env_oracle_on_the_examples(tmp_path: Path) -> None:
    from agentkit import AgentEnv

    env = AgentEnv.from_names(f"harbor:{EXAMPLES}", "oracle")
    manifest = env.describe_rubric()
    assert "core.reward" in json.dumps(manifest)
    results = await env.evaluate(
        rollouts_per_task=2, concurrency=4, out=tmp_path / "run", sandbox_options=HOST_USERLAND
    )
    by_task: dict[str, list] = {}
    for r in results.rollouts:
        by_task.setdefault(r.task_id, []).append(r)
    assert set(by_task) == SHOULD_PASS | {"harbor:too-slow", "harbor:wrong-on-purpose"}
    for task_id, rollouts in by_task.items():
        assert len(rollouts) == 2
        for r in rollouts:
            assert r.scoring_errors == [], r.scoring_errors
            if task_id in SHOULD_PASS:
                assert r.reward == 1.0 and r.status == "completed", (task_id, r.error)
            else:
                assert r.reward == 0.0
    slow = by_task["harbor:too-slow"][0]
    assert slow.status == "timeout" and slow.error_kind == "agent_timeout"
    wrong = by_task["harbor:wrong-on-purpose"][0]
    assert wrong.status == "completed" and wrong.rewards == {"core.reward": 0.0}
    stats = by_task["harbor:word-stats"][0].rewards
    assert stats == {
        "core.reward": 1.0,
        "core.lines": 1.0,
        "core.words": 1.0,
        "core.chars": 1.0,
        "core.fields_correct": 3.0,
    }
    multi = by_task["harbor:build-a-tool"][0]
    assert multi.rewards["core.steps_completed"] == 3.0
    assert [s["name"] for s in multi.raw["harbor"]["steps"]] == [
        "scaffold",
        "implement",
        "document",
    ]
    hello = by_task["harbor:hello-world"][0]
    assert "PASS" in hello.raw["harbor"]["verifier"]["stdout"]  # the verifier's stdout is kept
    # A passing rollout's sandbox directory is removed, but what Harbor keeps
    # (verifier logs, artifacts) lives in the run's artifacts directory.
    run = tmp_path / "run"
    assert not (run / "rollouts" / hello.rollout_id).exists()
    kept = run / "artifacts" / hello.rollout_id / "harbor" / "verifier" / "test-stdout.txt"
    assert "PASS" in kept.read_text()
    steps = run / "artifacts" / multi.rollout_id / "harbor" / "steps"
    assert sorted(p.name for p in steps.iterdir()) == ["document", "implement", "scaffold"]


@pytest.mark.anyio
async def test_nop_fails_every_example() -> None:
    from agentkit import AgentEnv

    env = AgentEnv.from_names(f"harbor:{EXAMPLES}", "nop")
    results = await env.evaluate(rollouts_per_task=1, concurrency=5, sandbox_options=HOST_USERLAND)
    assert {r.task_id: r.reward for r in results.rollouts} == {
        "harbor:hello-world": 0.0,
        "harbor:word-stats": 0.0,
        "harbor:build-a-tool": 0.0,
        "harbor:too-slow": 0.0,
        "harbor:wrong-on-purpose": 0.0,
    }


def test_agentkit_run_cli(tmp_path: Path) -> None:
    out = tmp_path / "run"
    cmd = [
        sys.executable,
        "-m",
        "agentkit",
        "run",
        f"harbor:{EXAMPLES}",
        "oracle",
        "-n",
        "2",
        "--out",
        str(out),
        "--json",
        "--keep-sandboxes",
        "-S",
        "image=host",
    ]
    done = subprocess.run(
        cmd, capture_output=True, text=True, timeout=300, env={**os.environ, "NO_COLOR": "1"}
    )
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    tasks = {t["task_id"]: t for t in summary["tasks"]}
    for task_id in SHOULD_PASS:
        assert tasks[task_id]["mean_reward"] == 1.0
    assert tasks["harbor:wrong-on-purpose"]["mean_reward"] == 0.0
    assert tasks["harbor:too-slow"]["errors"] == 2
    assert summary["error_kinds"] == {"agent_timeout": 2}
    # Artifacts and verifier logs were collected into each rollout's directory.
    collected = sorted(p.relative_to(out).as_posix() for p in out.rglob("harbor/*/reward.*"))
    assert any(p.endswith("harbor/verifier/reward.txt") for p in collected), collected
    assert list(out.rglob("harbor/steps/document/artifacts/app/README.md"))
