"""Sandboxes per rollout: when they are made, where they live, retries, cleanup, grading."""

from __future__ import annotations

import importlib
import json
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentkit import (
    AgentkitError,
    ExecutionHints,
    HarnessResult,
    ListTaskset,
    Rubric,
    Task,
    registry,
)
from agentkit.env import AgentEnv

pytestmark = pytest.mark.anyio

ENVPLUG = Path(__file__).parent / "fixtures" / "envplug"


@pytest.fixture
def envplug() -> Iterator[Any]:
    sys.path.insert(0, str(ENVPLUG))
    try:
        module = importlib.import_module("agentkit_envplug")
        registry.reset([("envplug", module, "agentkit-envplug", "0.1")])
        yield module
    finally:
        sys.path.remove(str(ENVPLUG))
        registry.reset()


class SandboxTaskset(ListTaskset):
    def execution_hints(self, task: Task) -> ExecutionHints | None:
        return None if task.item_id == "plain" else ExecutionHints(workdir="/app")


class WritesAnswer:
    """Writes its answer to a file in the sandbox; graded by reading it back there."""

    def __init__(self) -> None:
        self.sandboxes: list[Any] = []

    async def run(self, task: Task, context: Any = None, on_event: Any = None) -> HarnessResult:
        sandbox = context.sandbox
        self.sandboxes.append(sandbox)
        if sandbox is None:
            return HarnessResult(status="completed", output="no sandbox")
        res = await sandbox.exec(f"echo {task.target} > answer.txt && cat answer.txt")
        status = "completed" if res.ok and task.item_id != "bad" else "failed"
        return HarnessResult(
            status=status,
            output=res.stdout.strip(),
            error=None if status == "completed" else "agent failed",
            error_kind=None if status == "completed" else "agent_error",
        )


async def graded_in_sandbox(sandbox: Any, target: Any) -> float:
    if sandbox is None:
        return 0.0
    res = await sandbox.exec("cat answer.txt")
    return 1.0 if res.stdout.strip() == str(target) else 0.0


def make_env(items: list[str], sandbox: str, **kw: Any) -> tuple[AgentEnv, WritesAnswer]:
    ts = SandboxTaskset(
        "sb",
        [Task(task_id=f"sb:{i}", input="write", target=f"answer-{i}") for i in items],
        default_grading_spec=Rubric([graded_in_sandbox]),
    )
    harness = WritesAnswer()
    return AgentEnv(ts, harness, sandbox=sandbox, **kw), harness


async def test_one_sandbox_per_rollout_only_where_needed(tmp_path: Path, envplug: Any) -> None:
    env, harness = make_env(["a", "bad", "plain"], "dirsandbox")
    run = tmp_path / "run"
    results = await env.evaluate(rollouts_per_task=2, out=run)
    recs = {(r.task_id, r.rollout_index): r for r in results.rollouts}
    assert recs[("sb:a", 0)].reward == 1.0 and recs[("sb:a", 1)].reward == 1.0
    assert recs[("sb:plain", 0)].output == "no sandbox"
    made = [s for s in harness.sandboxes if s is not None]
    assert len(made) == 4 and len({id(s) for s in made}) == 4
    assert all(s.closed for s in made)
    assert {s.root for s in made} == {
        run / "rollouts" / r.rollout_id for r in results.rollouts if r.task_id != "sb:plain"
    }
    # successful rollouts' files are removed; failed ones are kept for inspection
    kept = sorted(p.name for p in (run / "rollouts").iterdir())
    assert kept == sorted(r.rollout_id for r in results.rollouts if r.task_id == "sb:bad")


async def test_keep_sandboxes(tmp_path: Path, envplug: Any) -> None:
    env, _ = make_env(["a"], "dirsandbox")
    results = await env.evaluate(out=tmp_path / "run", keep_sandboxes=True)
    rid = results.rollouts[0].rollout_id
    assert (tmp_path / "run" / "rollouts" / rid / "work" / "answer.txt").exists()


async def test_sandbox_start_failures_are_retried(tmp_path: Path, envplug: Any) -> None:
    env, _ = make_env(
        ["a"], "dirsandbox", sandbox_options={"fail_start": 2, "counter_dir": str(tmp_path)}
    )
    # the preflight would start one sandbox first (and stop the run): these failures are
    # injected to test the retries of the rollouts themselves
    rec = (
        await env.evaluate(out=tmp_path / "run", retry_base_delay=0.01, preflight=False)
    ).rollouts[0]
    assert rec.status == "completed" and rec.reward == 1.0 and rec.attempts == 3
    assert [r["error_kind"] for r in rec.retries] == ["sandbox_start", "sandbox_start"]

    env, _ = make_env(
        ["a"], "dirsandbox", sandbox_options={"fail_start": 5, "counter_dir": str(tmp_path / "x")}
    )
    (tmp_path / "x").mkdir()
    rec = (await env.evaluate(max_retries=1, retry_base_delay=0.01, preflight=False)).rollouts[0]
    assert rec.status == "failed" and rec.error_kind == "sandbox_start"
    assert "sandbox could not start (injected)" in (rec.error or "")
    # the rollout could not run: no reward (not a zero from scoring without a sandbox)
    assert rec.reward is None and rec.rewards == {} and rec.infra_error


async def test_a_sandbox_that_cannot_start_stops_the_run_at_preflight(
    tmp_path: Path, envplug: Any
) -> None:
    env, _ = make_env(
        ["a"], "dirsandbox", sandbox_options={"fail_start": 5, "counter_dir": str(tmp_path)}
    )
    with pytest.raises(AgentkitError, match="the 'dirsandbox' sandbox cannot start: sandbox could"):
        await env.evaluate(out=tmp_path / "run")
    assert not (tmp_path / "run").exists()  # nothing was created


async def test_requires_sandbox_harness_gets_one_without_hints(envplug: Any) -> None:
    class NeedsOne(WritesAnswer):
        requires_sandbox = True

    ts = ListTaskset(
        "p",
        [Task(task_id="p:1", input="x", target="answer-1")],
        default_grading_spec=Rubric([graded_in_sandbox]),
    )
    harness = NeedsOne()
    results = await AgentEnv(ts, harness, sandbox="dirsandbox").evaluate()
    assert harness.sandboxes[0] is not None and results.rollouts[0].reward == 1.0


@pytest.mark.bwrap
async def test_local_bubblewrap_sandbox_end_to_end(tmp_path: Path) -> None:
    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap is not installed")
    env, harness = make_env(["a", "b"], "local")
    results = await env.evaluate(out=tmp_path / "run", concurrency=2)
    assert [r.reward for r in results.rollouts] == [1.0, 1.0], results.rollouts[0].error
    assert all(type(s).__name__ == "LocalSandbox" for s in harness.sandboxes)
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert manifest["sandbox"]["name"] == "local" and manifest["sandbox_warning"] is None


async def test_host_sandbox_warning_is_shown_and_recorded(tmp_path: Path) -> None:
    env, _ = make_env(["a"], "host")
    seen: list[dict[str, Any]] = []
    results = await env.evaluate(out=tmp_path / "run", on_start=seen.append)
    assert results.rollouts[0].reward == 1.0
    warning = seen[0]["sandbox_warning"]
    assert warning and "without isolation" in warning
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert manifest["sandbox_warning"] == warning
    assert results.summary["sandbox_warning"] == warning
