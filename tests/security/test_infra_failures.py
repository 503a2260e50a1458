"""A rollout that could not run is not an answer: no reward, out of the statistics and the
training data, listed in the summary, run again by resume; permanent setup errors are not
retried within a run."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentkit import HarnessError, HarnessResult, ListTaskset, Rubric, Task
from agentkit.env import AgentEnv
from agentkit.testing.model_server import ScriptedModelServer

pytestmark = pytest.mark.anyio


def exact(output: str | None, target: Any) -> float:
    return 1.0 if output == str(target) else 0.0


@pytest.fixture
def tasks_file(tmp_path: Path) -> Path:
    path = tmp_path / "qa.jsonl"
    rows = [
        {"id": "capital", "input": "Capital of France?", "target": "Paris"},
        {"id": "sum", "input": "1+1?", "target": "2"},
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture
def dead_port() -> Iterator[socket.socket]:
    """A loopback port that is bound but not listening: every connection is refused."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield sock


def lines(run: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in (run / "rollouts.jsonl").read_text().splitlines()]


def export(run: Path, out: Path) -> list[dict[str, Any]]:
    done = subprocess.run(
        [sys.executable, "-m", "agentkit", "export", str(run), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return [json.loads(x) for x in out.read_text().splitlines()]


async def test_a_model_server_that_is_down_scores_nothing_and_resume_runs_it_again(
    tmp_path: Path, tasks_file: Path, dead_port: socket.socket
) -> None:
    port = dead_port.getsockname()[1]
    base_url = f"http://127.0.0.1:{port}/v1"
    run = tmp_path / "run"
    env = AgentEnv.from_names(f"jsonl:{tasks_file}", "chat")
    results = await env.evaluate(
        rollouts_per_task=2,
        model="m",
        base_url=base_url,
        out=run,
        max_retries=1,
        retry_base_delay=0.01,
        check_model_server=False,
    )
    assert len(results.rollouts) == 4
    for rec in results.rollouts:
        assert rec.status == "failed" and rec.error_kind == "model_connection"
        assert rec.infra_error is True and rec.attempts == 2
        # no reward at all: not a zero that counts as a wrong answer
        assert rec.reward is None and rec.rewards == {} and rec.passed is None
        assert rec.advantage is None
    stored = lines(run)
    assert [x["infra_error"] for x in stored] == [True] * 4
    assert all(x["reward"] is None for x in stored)
    summary = json.loads((run / "summary.json").read_text())
    assert summary["mean_reward"] is None and summary["pass_at_k"] == {}
    assert summary["scored"] == 0 and summary["infra_errors"] == 4
    assert summary["complete"] is False  # resume has work to do
    listed = summary["infra_error_rollouts"]
    assert sorted(x["rollout_id"] for x in listed) == sorted(x["rollout_id"] for x in stored)
    assert all(x["error_kind"] == "model_connection" and x["error"] for x in listed)
    assert [t["infra_errors"] for t in summary["tasks"]] == [2, 2]
    # nothing to learn from: the training export leaves them out
    assert export(run, tmp_path / "before.jsonl") == []

    # the server comes up on the same address; resume runs every one of them again
    dead_port.close()
    server = ScriptedModelServer(
        {
            "rules": [{"match": {"last_user_contains": "France"}, "reply": {"content": "Paris"}}],
            "default": {"content": "3"},
        },
        port=port,
    )
    with server:
        resumed = subprocess.run(
            [sys.executable, "-m", "agentkit", "run", "--resume", str(run), "--json"],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert resumed.returncode == 0, resumed.stderr
        assert len(server.chat_requests) == 4
    summary = json.loads(resumed.stdout)
    assert summary["this_session"]["rerun"] == 4
    assert summary["complete"] is True and summary["infra_errors"] == 0
    assert summary["infra_error_rollouts"] == []
    assert summary["mean_reward"] == 0.5 and summary["pass_at_k"]["1"] == 0.5
    # the new lines supersede the old ones; the file keeps both (append-only)
    assert len(lines(run)) == 8
    records = export(run, tmp_path / "after.jsonl")
    assert sorted((r["task_id"], r["reward"]) for r in records) == [
        ("qa:capital", 1.0),
        ("qa:capital", 1.0),
        ("qa:sum", 0.0),
        ("qa:sum", 0.0),
    ]


async def test_statistics_leave_out_rollouts_that_could_not_run(
    tmp_path: Path, tasks_file: Path, model_server: ScriptedModelServer
) -> None:
    """One rollout of a group could not run: pass@k and the mean are over the other two."""
    model_server.set_script(
        {
            "rules": [
                {
                    "match": {"last_user_contains": "France"},
                    "times": 1,
                    "reply": {"fail": "server_error"},
                },
                {
                    "match": {"last_user_contains": "France"},
                    "times": 1,
                    "reply": {"content": "Paris"},
                },
                {"match": {"last_user_contains": "France"}, "reply": {"content": "Lyon"}},
            ],
            "default": {"content": "2"},
        }
    )
    env = AgentEnv.from_names(f"jsonl:{tasks_file}", "chat")
    results = await env.evaluate(
        rollouts_per_task=3,
        concurrency=1,
        model="m",
        base_url=model_server.base_url,
        max_retries=0,
        out=tmp_path / "run",
    )
    capital = [r for r in results.rollouts if r.task_id == "qa:capital"]
    assert [r.infra_error for r in capital] == [True, False, False]
    assert [r.reward for r in capital] == [None, 1.0, 0.0]
    group = next(g for g in results.groups if g.task_id == "qa:capital")
    assert group.mean_reward == 0.5
    assert group.pass_at_k == {"1": 0.5, "2": 1.0}
    assert group.advantages == [None, 0.5, -0.5]
    task = next(t for t in results.summary["tasks"] if t["task_id"] == "qa:capital")
    assert task["scored"] == 2 and task["infra_errors"] == 1 and task["mean_reward"] == 0.5


class SetupFails:
    """A harness that cannot run here (its program is missing, say)."""

    def __init__(self) -> None:
        self.calls = 0

    async def run(self, task: Task, context: Any = None, on_event: Any = None) -> HarnessResult:
        self.calls += 1
        raise HarnessError("the 'agent' program is not installed")


async def test_a_harness_that_cannot_run_is_an_infrastructure_failure_not_retried() -> None:
    harness = SetupFails()
    ts = ListTaskset(
        "ts", [Task(task_id="ts:0", input="q", target="0")], default_grading_spec=Rubric([exact])
    )
    results = await AgentEnv(ts, harness).evaluate(max_retries=3, retry_base_delay=0.01)
    rec = results.rollouts[0]
    assert harness.calls == 1 and rec.attempts == 1
    assert rec.error_kind == "harness_setup" and rec.infra_error and rec.reward is None
    assert rec.error == "the 'agent' program is not installed"


class WantsSandbox:
    requires_sandbox = True

    def __init__(self) -> None:
        self.calls = 0

    async def run(self, task: Task, context: Any = None, on_event: Any = None) -> HarnessResult:
        self.calls += 1
        return HarnessResult(status="completed", output=str(task.target))


async def test_a_permanent_sandbox_start_error_is_not_retried(tmp_path: Path) -> None:
    """bubblewrap missing: every attempt would fail the same way, so there is one."""
    harness = WantsSandbox()
    ts = ListTaskset(
        "ts",
        [Task(task_id=f"ts:{i}", input="q", target=str(i)) for i in range(2)],
        default_grading_spec=Rubric([exact]),
    )
    env = AgentEnv(ts, harness, sandbox="local", sandbox_options={"bwrap": str(tmp_path / "none")})
    # the preflight would refuse the run before any rollout: it is off, to see the rollouts
    results = await env.evaluate(
        max_retries=3, retry_base_delay=5.0, out=tmp_path / "run", preflight=False
    )
    assert harness.calls == 0
    for rec in results.rollouts:
        assert rec.error_kind == "sandbox_start" and rec.infra_error
        assert rec.attempts == 1 and rec.retries == []
        assert "bubblewrap" in (rec.error or "")
        assert rec.reward is None
    assert results.summary["infra_errors"] == 2
