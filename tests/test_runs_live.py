"""Runs in progress: live/<rollout_id>.jsonl while a rollout runs, and the reader's view of it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

import agentkit.runs
from agentkit import EventRecorder, HarnessResult, ListTaskset, Rubric, Task
from agentkit.env import AgentEnv

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[1]
ARITHMETIC = ROOT / "examples" / "jsonl" / "arithmetic.jsonl"


def exact(output: str | None, target: Any) -> float:
    return 1.0 if output == str(target) else 0.0


class Gated:
    """Emits two events, then waits for the test; its first attempt fails retryably."""

    def __init__(self) -> None:
        self.emitted = anyio.Event()
        self.release = anyio.Event()
        self.attempts = 0

    async def run(self, task: Task, context: Any = None, on_event: Any = None) -> HarnessResult:
        self.attempts += 1
        recorder = EventRecorder(task.task_id, context.rollout_id, on_event)
        await recorder.emit("harness.start", attempt=self.attempts)
        if self.attempts == 1:
            return HarnessResult(
                status="failed", error="429 slow down", error_kind="model_rate_limit"
            )
        await recorder.emit("log", message="waiting", secret="sk-live-secret-12345")
        self.emitted.set()
        await self.release.wait()
        await recorder.emit("harness.end")
        return HarnessResult(status="completed", output=str(task.target), events=recorder.events)


async def test_a_running_rollout_is_followed_through_its_live_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LIVE_TEST_KEY", "sk-live-secret-12345")
    run_dir = tmp_path / "run"
    harness = Gated()
    taskset = ListTaskset(
        "ts", [Task(task_id="ts:0", input="q", target="0")], default_grading_spec=Rubric([exact])
    )
    env = AgentEnv(taskset, harness)
    results: list[Any] = []

    async def evaluate() -> None:
        results.append(
            await env.evaluate(
                out=run_dir,
                retry_base_delay=0.0,
                api_key_env="LIVE_TEST_KEY",
            )
        )

    async with anyio.create_task_group() as tg:
        tg.start_soon(evaluate)
        await harness.emitted.wait()
        run = agentkit.runs.open(run_dir)
        assert run.state() == "running"
        (live,) = run.live_rollouts()
        assert (live.task_id, live.rollout_index, live.attempt) == ("ts:0", 0, 2)
        assert live.events == 3  # two attempts' harness.start, then the log event
        steps, offset = run.live_steps(live.rollout_id)
        kinds = [s.type for s in steps]
        assert kinds == ["rollout.start", "harness.start", "rollout.retry", "harness.start", "log"]
        retry = steps[2]
        assert retry.data["error_kind"] == "model_rate_limit" and retry.data["attempt"] == 2
        assert steps[4].data["secret"] == "***"  # redacted like every file of the run
        assert run.live_steps(live.rollout_id, offset) == ([], offset)
        assert run.live_steps("../manifest") == ([], 0)
        harness.release.set()
    run = agentkit.runs.open(run_dir)
    assert run.state() == "complete"
    assert run.live_rollouts() == []
    assert not (run_dir / "live").exists()
    assert [s.type for s in run.steps(run.rollout_ids()[0])] == [
        "harness.start",
        "log",
        "harness.end",
    ]


def _cli_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT / "src")
    env.pop("AGENTKIT_PLUGINS", None)
    return env


def _wait_for(predicate: Any, proc: subprocess.Popen[str]) -> None:
    """Poll until ``predicate()`` holds; the run exiting first fails the test."""
    import time

    while not predicate():
        if proc.poll() is not None:
            raise AssertionError(f"agentkit run exited early: {proc.communicate()}")
        time.sleep(0.02)


def test_interrupted_run_keeps_its_live_file_until_resumed(
    tmp_path: Path, model_server: Any
) -> None:
    """A run stopped mid-rollout says so; the rollout it left shows; resume clears it."""
    model_server.set_script(
        {"rules": [{"match": {"last_user_contains": "6 * 7"}, "reply": {"fail": "hang"}}]}
    )
    run_dir = tmp_path / "run"
    cmd = [
        sys.executable,
        "-m",
        "agentkit",
        "run",
        f"jsonl:{ARITHMETIC}",
        "chat",
        "--model",
        "m",
        "--base-url",
        model_server.base_url,
        "--out",
        str(run_dir),
        "--no-progress",
        "--no-preflight",
    ]
    proc = subprocess.Popen(
        cmd, env=_cli_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        planned = sum(1 for line in ARITHMETIC.read_text().splitlines() if line.strip())

        def hung_with_others_done() -> bool:
            run = agentkit.runs.open(run_dir) if (run_dir / "manifest.json").exists() else None
            return run is not None and len(run) == planned - 1 and bool(run.live_rollouts())

        _wait_for(hung_with_others_done, proc)
        run = agentkit.runs.open(run_dir)
        assert run.state() == "running"
        (live,) = run.live_rollouts()
        assert live.task_id == "arithmetic:mul-1"
        assert [s.type for s in run.live_steps(live.rollout_id)[0]] == [
            "rollout.start",
            "harness.start",
            "model.request",
        ]
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    run = agentkit.runs.open(run_dir)
    assert run.state() == "interrupted"
    assert [r.task_id for r in run.live_rollouts()] == ["arithmetic:mul-1"]
    model_server.set_script("42")
    resumed = subprocess.run(
        [
            sys.executable,
            "-m",
            "agentkit",
            "run",
            "--resume",
            str(run_dir),
            "--json",
            "--base-url",
            model_server.base_url,
            "--no-preflight",
        ],
        env=_cli_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads(resumed.stdout)["complete"] is True
    run = agentkit.runs.open(run_dir)
    assert run.state() == "complete" and run.live_rollouts() == []
    assert not (run_dir / "live").exists()


def test_listing_has_pass_at_k(tmp_path: Path) -> None:
    taskset = ListTaskset(
        "ts",
        [Task(task_id=f"ts:{i}", input="q", target=str(i)) for i in range(2)],
        default_grading_spec=Rubric([exact]),
    )

    class Echo:
        async def run(self, task: Task, context: Any = None, on_event: Any = None) -> HarnessResult:
            return HarnessResult(status="completed", output="0")

    AgentEnv(taskset, Echo()).run(rollouts_per_task=2, out=tmp_path / "r")
    (listing,) = agentkit.runs.list_runs(tmp_path)
    assert listing.pass_at_k == {"1": 0.5, "2": 0.5}
