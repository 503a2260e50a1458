"""Grading the agent broke counts against the agent; grading that could not run for
another reason is a rollout that could not run, retried.

A reward function raises :class:`agentkit.GradedAsFailure` (the verifier's
reward file is unreadable because of what the agent did) or
:class:`agentkit.GradingUnavailable` (the verifier's own sandbox did not
start). The run is written to a real run directory and read back by every
reader: ``agentkit show``, the leaderboard, pass@k in the summary, and the
training export.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from agentkit import (
    GradedAsFailure,
    GradingUnavailable,
    HarnessResult,
    ListTaskset,
    Rubric,
    Task,
    reward,
)
from agentkit.env import AgentEnv
from agentkit.stats import run_stats
from agentkit.training import export_run

pytestmark = pytest.mark.anyio


class Answers:
    """Completes every task; what it 'did' is the task's target."""

    async def run(self, task: Task, context: Any = None, on_event: Any = None) -> HarnessResult:
        return HarnessResult(status="completed", output=str(task.target))


def verifier(output: str | None) -> float:
    """Passes 'solved'; 'broke' left the verifier's reward file unreadable."""
    if output == "broke":
        raise GradedAsFailure(
            "reward.txt is a FIFO the agent left there", kind="reward_file_not_regular"
        )
    return 1.0 if output == "solved" else 0.0


def taskset() -> ListTaskset:
    tasks = [
        Task(task_id="t:solved", input="q", target="solved"),
        Task(task_id="t:broke", input="q", target="broke"),
    ]
    return ListTaskset("t", tasks, default_grading_spec=Rubric([reward(verifier)]))


async def test_grading_the_agent_broke_is_scored_zero_and_counted_everywhere(
    tmp_path: Path,
) -> None:
    out = tmp_path / "run"
    results = await AgentEnv(taskset(), Answers()).evaluate(rollouts_per_task=2, out=str(out))
    broke = [r for r in results.rollouts if r.task_id == "t:broke"]
    assert len(broke) == 2
    for rec in broke:
        assert rec.reward == 0.0 and rec.passed is False
        assert rec.error_kind == "reward_file_not_regular"
        assert rec.error == "reward.txt is a FIFO the agent left there"
        assert rec.infra_error is False
        assert rec.scoring_errors == [
            {
                "metric": "core.verifier",
                "error": "reward.txt is a FIFO the agent left there",
                "kind": "reward_file_not_regular",
                "scored": "as a failure",
            }
        ]
    summary = results.summary
    # four scored rollouts: the two broken ones count as 0, none is left out
    assert summary["scored"] == 4 and summary["infra_errors"] == 0
    assert summary["mean_reward"] == pytest.approx(0.5)
    assert summary["error_kinds"] == {"reward_file_not_regular": 2}
    tasks = {t["task_id"]: t for t in summary["tasks"]}
    assert tasks["t:broke"]["pass_at_k"] == {"1": 0.0, "2": 0.0}
    assert tasks["t:broke"]["scored"] == 2
    # the leaderboard's row counts them
    row = run_stats(out)
    assert row.scored == 4 and row.could_not_run == 0 and row.unscored == 0
    assert row.reward.mean == pytest.approx(0.5)
    # agentkit show counts them, and names what happened
    shown = agentkit("show", str(out), "--json")
    assert json.loads(shown.stdout)["mean_reward"] == pytest.approx(0.5)
    failed = agentkit("show", str(out), "--failed")
    assert failed.stdout.count("reward_file_not_regular") == 2, failed.stdout
    assert "could not run" not in failed.stdout.splitlines()[0]
    # the training export holds them, with their reward of 0
    written = export_run(out, tmp_path / "train.jsonl")
    lines = [json.loads(x) for x in (tmp_path / "train.jsonl").read_text().splitlines()]
    assert written.written == 4
    assert sorted(line["reward"] for line in lines) == [0.0, 0.0, 1.0, 1.0]


def agentkit(*args: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [sys.executable, "-m", "agentkit", *args], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return done


class Flaky:
    """The verifier's sandbox fails to start on the first attempt only."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, output: str | None) -> float:
        self.calls += 1
        if self.calls == 1:
            raise GradingUnavailable("the verifier's sandbox did not start: no space left")
        return 1.0


async def test_grading_that_could_not_run_is_retried_as_an_infrastructure_failure() -> None:
    flaky = Flaky()
    tasks = ListTaskset(
        "t",
        [Task(task_id="t:one", input="q", target="solved")],
        default_grading_spec=Rubric([reward(flaky, name="verifier")]),
    )
    results = await AgentEnv(tasks, Answers()).evaluate(retry_base_delay=0.0)
    rec = results.rollouts[0]
    assert flaky.calls == 2
    assert rec.reward == 1.0 and rec.attempts == 2
    assert rec.retries[0]["error_kind"] == "sandbox_start"


async def test_grading_that_never_runs_leaves_the_rollout_unscored_and_to_run_again() -> None:
    def never(output: str | None) -> float:
        raise GradingUnavailable("the verifier's sandbox did not start")

    tasks = ListTaskset(
        "t",
        [Task(task_id="t:one", input="q", target="solved")],
        default_grading_spec=Rubric([reward(never, name="verifier")]),
    )
    results = await AgentEnv(tasks, Answers()).evaluate(max_retries=1, retry_base_delay=0.0)
    rec = results.rollouts[0]
    assert rec.reward is None and rec.infra_error is True
    assert rec.error_kind == "sandbox_start" and rec.attempts == 2
    assert rec.error == "grading could not run: the verifier's sandbox did not start"
    assert results.summary["infra_errors"] == 1 and results.summary["scored"] == 0


def test_the_exceptions_check_their_kind() -> None:
    with pytest.raises(ValueError, match="one word"):
        GradedAsFailure("x", kind="two words")
    with pytest.raises(ValueError, match="not an infrastructure failure"):
        GradingUnavailable("x", kind="reward_file_empty")
