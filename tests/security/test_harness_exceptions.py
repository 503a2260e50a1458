"""Whatever a harness raises is that rollout's error: never a silent end of the run, never
the loss of the other rollouts. Only a real stop (Ctrl-C, a cancelled run) stops the run."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from agentkit import HarnessResult, ListTaskset, Rubric, Task
from agentkit.env import AgentEnv

pytestmark = pytest.mark.anyio

ENVPLUG = Path(__file__).parent.parent / "fixtures" / "envplug"


class CustomBaseError(BaseException):
    """Not an Exception: some libraries raise such things."""


RAISED: dict[str, BaseException] = {
    "cancelled": asyncio.CancelledError("a future the harness awaited was cancelled"),
    "system_exit": SystemExit(3),
    "generator_exit": GeneratorExit(),
    "custom_base": CustomBaseError("odd"),
    "group": BaseExceptionGroup("several", [ValueError("a"), asyncio.CancelledError()]),
}


def exact(output: str | None, target: Any) -> float:
    return 1.0 if output == str(target) else 0.0


class Raises:
    """Raises RAISED[item] for the first rollout of each task item listed there."""

    async def run(self, task: Task, context: Any = None, on_event: Any = None) -> HarnessResult:
        await anyio.sleep(0)
        if task.item_id in RAISED and context.rollout_id.endswith("-r0"):
            raise RAISED[task.item_id]
        return HarnessResult(status="completed", output=str(task.target))


def taskset() -> ListTaskset:
    items = [*RAISED, "plain"]
    return ListTaskset(
        "ts",
        [Task(task_id=f"ts:{i}", input="q", target=i) for i in items],
        default_grading_spec=Rubric([exact]),
    )


@pytest.mark.parametrize("concurrency", [1, 4])
async def test_any_exception_from_a_harness_is_that_rollouts_error(
    tmp_path: Path, concurrency: int
) -> None:
    results = await AgentEnv(taskset(), Raises()).evaluate(
        rollouts_per_task=2, concurrency=concurrency, out=tmp_path / "run"
    )
    assert len(results.rollouts) == 2 * (len(RAISED) + 1)
    by_id = {(r.task_id, r.rollout_index): r for r in results.rollouts}
    for item in RAISED:
        failed = by_id[(f"ts:{item}", 0)]
        assert failed.status == "failed" and failed.error_kind == "harness_exception", item
        assert type(RAISED[item]).__name__ in (failed.error or ""), failed.error
        assert failed.reward == 0.0 and failed.attempts == 1  # scored, as any agent failure
        assert by_id[(f"ts:{item}", 1)].reward == 1.0
    assert by_id[("ts:plain", 0)].reward == 1.0
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["interrupted"] is False and summary["finished"] == len(results.rollouts)


async def test_a_real_cancellation_still_stops_the_run(tmp_path: Path) -> None:
    running = anyio.Event()

    class Slow:
        async def run(self, task: Task, context: Any = None, on_event: Any = None) -> Any:
            running.set()
            await anyio.sleep(3600)

    with anyio.CancelScope() as scope:
        async with anyio.create_task_group() as tg:

            async def stop_once_a_harness_runs() -> None:
                await running.wait()
                scope.cancel()

            tg.start_soon(stop_once_a_harness_runs)
            await AgentEnv(taskset(), Slow()).evaluate(out=tmp_path / "run")
    assert scope.cancelled_caught
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["interrupted"] is True and summary["finished"] == 0


async def test_a_harness_cancelled_error_after_a_timeout_in_the_same_worker(
    tmp_path: Path,
) -> None:
    """A rollout that timed out (its scope cancelled) leaves nothing behind that would make
    a later harness-raised CancelledError look like a stop of the run."""

    class TimesOutThenRaises:
        async def run(self, task: Task, context: Any = None, on_event: Any = None) -> Any:
            if task.item_id == "0":
                await anyio.sleep(3600)
            raise asyncio.CancelledError()

    ts = ListTaskset(
        "ts",
        [Task(task_id=f"ts:{i}", input="q", target="x") for i in range(2)],
        default_grading_spec=Rubric([exact]),
    )
    results = await AgentEnv(ts, TimesOutThenRaises()).evaluate(concurrency=1, timeout=0.2)
    kinds = [r.error_kind for r in results.rollouts]
    assert kinds == ["timeout", "harness_exception"]


def test_the_cli_reports_a_harness_cancelled_error_as_a_failed_rollout(tmp_path: Path) -> None:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ENVPLUG) + os.pathsep + env.get("PYTHONPATH", "")
    env["AGENTKIT_PLUGINS"] = "envplug"
    done = subprocess.run(
        [
            sys.executable, "-m", "agentkit", "run", "envplug:3", "controlled", "-n", "2",
            "-H", "raise_on=1", "-H", "raise_type=CancelledError",
            "--json", "--out", str(tmp_path / "run"),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["finished"] == 6 and summary["complete"] is True
    assert summary["error_kinds"] == {"harness_exception": 2}
    assert "CancelledError" in summary["first_error_by_kind"]["harness_exception"]
