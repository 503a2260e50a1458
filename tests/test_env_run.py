"""AgentEnv orchestration: concurrency, timeouts, retries, failures, live events, generate."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import anyio
import pytest

from agentkit import Event, EventRecorder, HarnessResult, ListTaskset, Rubric, SpecError, Task
from agentkit.env import AgentEnv

pytestmark = pytest.mark.anyio


def exact(output: str | None, target: Any) -> float:
    return 1.0 if output == str(target) else 0.0


def tasks(n: int) -> ListTaskset:
    return ListTaskset(
        "ts",
        [Task(task_id=f"ts:{i}", input=f"q{i}", target=str(i)) for i in range(n)],
        default_grading_spec=Rubric([exact]),
    )


class ScriptedHarness:
    """A real harness whose behaviour per task item is given by a table."""

    def __init__(
        self, behaviour: dict[str, Any] | None = None, delay: float = 0.0, events: int = 0
    ) -> None:
        self.behaviour = behaviour or {}
        self.delay = delay
        self.events = events
        self.calls: dict[str, int] = {}
        self.running = 0
        self.max_running = 0

    async def run(self, task: Task, context: Any = None, on_event: Any = None) -> HarnessResult:
        rid = context.rollout_id
        self.calls[rid] = self.calls.get(rid, 0) + 1
        self.running += 1
        self.max_running = max(self.max_running, self.running)
        try:
            recorder = EventRecorder(task.task_id, rid, on_event)
            for i in range(self.events):
                await recorder.emit("log", i=i)
                await anyio.sleep(0)
            await anyio.sleep(self.delay)
            what = self.behaviour.get(task.item_id, "ok")
            if what == "raise":
                raise ValueError("boom")
            if what == "hang":
                await anyio.sleep(3600)
            if what == "flaky" and self.calls[rid] < 3:
                return HarnessResult(
                    status="failed", error="HTTP 503", error_kind="model_server_error"
                )
            if what == "agent_error":
                return HarnessResult(
                    status="failed", output="1", error="gave up", error_kind="agent_error"
                )
            if what == "not_a_result":
                return {"output": "x"}  # type: ignore[return-value]
            answer = str(task.target) if what in ("ok", "flaky") else "wrong"
            return HarnessResult(status="completed", output=answer, events=recorder.events)
        finally:
            self.running -= 1


async def test_groups_concurrency_and_records(tmp_path: Path) -> None:
    harness = ScriptedHarness({"1": "wrong"}, delay=0.02)
    env = AgentEnv(tasks(6), harness)
    results = await env.evaluate(rollouts_per_task=3, concurrency=4, out=tmp_path / "run")
    assert len(results.rollouts) == 18
    assert 2 <= harness.max_running <= 4
    assert sorted(harness.calls.values()) == [1] * 18
    keys = {(r.task_id, r.rollout_index) for r in results.rollouts}
    assert len(keys) == 18
    by_task = {g.task_id: g for g in results.groups}
    assert by_task["ts:1"].mean_reward == 0.0
    assert by_task["ts:0"].pass_at_k == {"1": 1.0, "2": 1.0, "3": 1.0}
    assert results.summary["mean_reward"] == pytest.approx(5 / 6)
    assert results.summary["pass_at_k"]["1"] == pytest.approx(5 / 6)
    lines = (tmp_path / "run" / "rollouts.jsonl").read_text().splitlines()
    assert len(lines) == 18
    first = json.loads(lines[0])
    for key in (
        "task_id",
        "example_id",
        "rollout_index",
        "group",
        "status",
        "output",
        "messages",
        "usage",
        "rewards",
        "reward",
        "advantage",
        "timings",
        "error",
    ):
        assert key in first


async def test_limit_and_task_selection() -> None:
    env = AgentEnv(tasks(5), ScriptedHarness())
    assert len((await env.evaluate(limit=2)).rollouts) == 2
    picked = await env.evaluate(task_ids=["ts:4", "ts:2"], rollouts_per_task=2)
    assert sorted({r.task_id for r in picked.rollouts}) == ["ts:2", "ts:4"]
    with pytest.raises(Exception, match="unknown task 'ts:9'"):
        await env.evaluate(task_ids=["ts:9"])


async def test_retries_only_retryable_failures_with_backoff() -> None:
    harness = ScriptedHarness({"0": "flaky", "1": "agent_error", "2": "raise"})
    env = AgentEnv(tasks(3), harness)
    results = await env.evaluate(max_retries=3, retry_base_delay=0.01)
    recs = {r.task_id: r for r in results.rollouts}
    flaky = recs["ts:0"]
    assert flaky.status == "completed" and flaky.reward == 1.0
    assert flaky.attempts == 3
    assert [r["error_kind"] for r in flaky.retries] == ["model_server_error"] * 2
    assert all(r["delay_s"] > 0 for r in flaky.retries)
    # an agent error is scored (output "1" is the right answer) and never retried
    agent = recs["ts:1"]
    assert agent.status == "failed" and agent.attempts == 1 and agent.reward == 1.0
    assert agent.error == "gave up"
    # a raising harness is a failed rollout, not a crash of the run
    raised = recs["ts:2"]
    assert raised.status == "failed" and raised.error_kind == "harness_exception"
    assert raised.error == "ValueError: boom" and raised.attempts == 1
    assert raised.reward == 0.0


async def test_retryable_failure_that_never_recovers_is_recorded() -> None:
    harness = ScriptedHarness({"0": "flaky"})
    env = AgentEnv(tasks(1), harness)
    rec = (await env.evaluate(max_retries=1, retry_base_delay=0.01)).rollouts[0]
    assert rec.status == "failed" and rec.error_kind == "model_server_error"
    assert rec.attempts == 2


async def test_timeout_is_recorded_and_scored() -> None:
    env = AgentEnv(tasks(2), ScriptedHarness({"0": "hang"}))
    results = await env.evaluate(timeout=0.3, concurrency=2)  # "hang" sleeps for an hour
    recs = {r.task_id: r for r in results.rollouts}
    assert recs["ts:0"].status == "timeout" and recs["ts:0"].error_kind == "timeout"
    assert "0.3s" in (recs["ts:0"].error or "")
    assert recs["ts:0"].rewards == {"core.exact": 0.0} and recs["ts:0"].attempts == 1
    assert recs["ts:1"].status == "completed"


async def test_invalid_harness_return_value_is_a_failed_rollout() -> None:
    env = AgentEnv(tasks(1), ScriptedHarness({"0": "not_a_result"}))
    rec = (await env.evaluate()).rollouts[0]
    assert rec.status == "failed" and rec.error_kind == "invalid_result"
    assert "not a HarnessResult" in (rec.error or "")


async def test_live_events_arrive_while_running_in_sequence_order(tmp_path: Path) -> None:
    received: list[Event] = []
    arrived: dict[tuple[str, int], anyio.Event] = {}

    def arrival(rollout_id: str, seq: int) -> anyio.Event:
        return arrived.setdefault((rollout_id, seq), anyio.Event())

    async def watcher(event: Event) -> None:
        received.append(event)
        arrival(event.rollout_id, event.seq).set()

    class WaitsForItsWatcher:
        """Emits an event, then waits until the watcher has it: only live delivery passes."""

        async def run(self, task: Task, context: Any = None, on_event: Any = None) -> HarnessResult:
            recorder = EventRecorder(task.task_id, context.rollout_id, on_event)
            for i in range(5):
                await recorder.emit("log", i=i)
                with anyio.fail_after(5):
                    await arrival(context.rollout_id, i).wait()
            return HarnessResult(
                status="completed", output=str(task.target), events=recorder.events
            )

    env = AgentEnv(tasks(4), WaitsForItsWatcher(), trace_callback=watcher)
    results = await env.evaluate(rollouts_per_task=2, concurrency=8, out=tmp_path / "run")
    assert all(r.status == "completed" for r in results.rollouts), results.rollouts[0].error
    assert len(received) == 40
    per_rollout: dict[str, list[int]] = {}
    for ev in received:
        per_rollout.setdefault(ev.rollout_id, []).append(ev.seq)
    assert all(seqs == [0, 1, 2, 3, 4] for seqs in per_rollout.values())
    assert results.summary["trace_callback"] == {
        "set": True,
        "delivered": 40,
        "dropped": 0,
        "error": None,
    }
    # and the events are stored per rollout
    rec = results.rollouts[0]
    stored = (tmp_path / "run" / str(rec.events_file)).read_text().splitlines()
    assert [json.loads(line)["seq"] for line in stored] == [0, 1, 2, 3, 4]


async def test_a_slow_callback_does_not_stall_harnesses() -> None:
    release = threading.Event()

    def slow(event: Event) -> None:  # a sync callback: runs in a worker thread
        release.wait()

    harness = ScriptedHarness(events=50)
    env = AgentEnv(tasks(4), harness, trace_callback=slow)
    finished: list[Any] = []
    try:
        with anyio.fail_after(60):  # a hang guard: stalled harnesses never finish
            async with anyio.create_task_group() as tg:

                async def run() -> None:
                    finished.append(
                        await env.evaluate(
                            rollouts_per_task=2, event_buffer=8, callback_drain_timeout=0.2
                        )
                    )

                tg.start_soon(run)
                # every harness run ends while the callback is still blocked on its
                # first event: harnesses never wait for it
                while sum(harness.calls.values()) < 8 or harness.running:
                    await anyio.sleep(0.01)
                assert not release.is_set()
                release.set()
    finally:
        release.set()
    results = finished[0]
    assert all(r.status == "completed" for r in results.rollouts)
    report = results.summary["trace_callback"]
    assert report["dropped"] > 0  # the bounded buffers overflowed: dropped and counted
    assert report["delivered"] + report["dropped"] == 400
    assert sum(r.events_dropped for r in results.rollouts) > 0
    assert all(r.events == 50 for r in results.rollouts)  # storage keeps everything


async def test_a_raising_callback_is_reported_once_and_changes_nothing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    calls = 0

    async def broken(event: Event) -> None:
        nonlocal calls
        calls += 1
        raise RuntimeError("watcher bug")

    env = AgentEnv(tasks(3), ScriptedHarness(events=3), trace_callback=broken)
    results = await env.evaluate(rollouts_per_task=2)
    assert calls == 1
    assert [r.reward for r in results.rollouts] == [1.0] * 6
    assert results.summary["trace_callback"]["error"] == "RuntimeError: watcher bug"
    warnings = [r for r in caplog.records if "trace_callback raised" in r.getMessage()]
    assert len(warnings) == 1


async def test_generate_returns_groups_with_advantages_and_prints_nothing(
    capsys: pytest.CaptureFixture[str],
) -> None:
    class Alternating(ScriptedHarness):
        async def run(self, task: Task, context: Any = None, on_event: Any = None) -> HarnessResult:
            good = context.rollout_id.endswith(("r0", "r2"))
            return HarnessResult(status="completed", output=str(task.target) if good else "x")

    env = AgentEnv(tasks(2), Alternating())
    groups = await env.generate(rollouts_per_task=4, concurrency=3)
    out = capsys.readouterr()
    assert out.out == "" and out.err == ""
    assert [g.task_id for g in groups] == ["ts:0", "ts:1"]
    for g in groups:
        assert g.rewards == [1.0, 0.0, 1.0, 0.0]
        assert g.advantages == [0.5, -0.5, 0.5, -0.5]
        assert [r.advantage for r in g.rollouts] == g.advantages
        assert g.pass_at_k["1"] == 0.5
    normalized = await env.generate(rollouts_per_task=2, normalize_advantages=True)
    assert normalized[0].advantages[0] == pytest.approx(1.0, rel=1e-4)


async def test_group_of_one_has_advantage_zero(tmp_path: Path) -> None:
    env = AgentEnv(tasks(2), ScriptedHarness())
    results = await env.evaluate(out=tmp_path / "r")
    assert [r.advantage for r in results.rollouts] == [0.0, 0.0]
    lines = [json.loads(x) for x in (tmp_path / "r" / "rollouts.jsonl").read_text().splitlines()]
    assert [x["advantage"] for x in lines] == [0.0, 0.0]


def test_run_is_the_synchronous_twin() -> None:
    env = AgentEnv(tasks(2), ScriptedHarness())
    results = env.run(rollouts_per_task=2)
    assert len(results) == 4 and results.mean_reward == 1.0


async def test_run_inside_an_event_loop_says_to_await() -> None:
    env = AgentEnv(tasks(1), ScriptedHarness())
    with pytest.raises(Exception, match=r"await env\.evaluate"):
        env.run()


async def test_bad_arguments_are_clear() -> None:
    env = AgentEnv(tasks(1), ScriptedHarness())
    with pytest.raises(Exception, match="rollouts_per_task must be at least 1"):
        await env.evaluate(rollouts_per_task=0)
    with pytest.raises(Exception, match="concurrency must be at least 1"):
        await env.evaluate(concurrency=0)
    with pytest.raises(Exception, match="taskset must be a Taskset"):
        AgentEnv(object(), ScriptedHarness())
    with pytest.raises(Exception, match="run"):
        AgentEnv(tasks(1), object())


HUNG_CALLBACK_SCRIPT = """
import threading
from agentkit import EventRecorder, HarnessResult, ListTaskset, Rubric, Task
from agentkit.env import AgentEnv

class Harness:
    async def run(self, task, context=None, on_event=None):
        rec = EventRecorder(task.task_id, context.rollout_id, on_event)
        for i in range(3):
            await rec.emit("log", i=i)
        return HarnessResult(status="completed", output=str(task.target), events=rec.events)

def exact(output, target):
    return 1.0 if output == str(target) else 0.0

def hung(event):  # a plain callback that never returns (a network call without timeout)
    threading.Event().wait()

tasks = [Task(task_id=f"ts:{i}", input="q", target=str(i)) for i in range(3)]
env = AgentEnv(ListTaskset("ts", tasks, default_grading_spec=Rubric([exact])), Harness(),
               trace_callback=hung)
results = env.run(rollouts_per_task=2, callback_drain_timeout=0.3)
print("rewards", [r.reward for r in results.rollouts], results.summary["trace_callback"])
"""


def test_a_callback_that_never_returns_does_not_keep_the_process_alive(tmp_path: Path) -> None:
    import subprocess
    import sys

    script = tmp_path / "hung.py"
    script.write_text(HUNG_CALLBACK_SCRIPT)
    proc = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=30
    )  # before the fix, the interpreter waited for the callback's thread at exit: forever
    assert proc.returncode == 0, proc.stderr
    assert "rewards [1.0, 1.0, 1.0, 1.0, 1.0, 1.0]" in proc.stdout
    assert "'delivered': 0, 'dropped': 18" in proc.stdout


class OddOnly(ScriptedHarness):
    """Runs the tasks whose item id is odd; says why not only when ``explain``."""

    def __init__(self, explain: bool) -> None:
        super().__init__()
        if explain:
            self.unsupported_reason = lambda task: f"item {task.item_id} is even"

    def supports(self, task: Task) -> bool:
        return int(task.item_id) % 2 == 1


@pytest.mark.parametrize("explain", [True, False])
def test_tasks_the_harness_cannot_run_are_left_out_or_the_pairing_refused(
    explain: bool,
) -> None:
    env = AgentEnv(tasks(4), OddOnly(explain))
    results = env.run()
    reason = (
        (lambda i: f"item {i} is even")
        if explain
        else (lambda i: "the harness's supports() returns False for the task")
    )
    left_out = [{"task_id": f"ts:{i}", "reason": reason(i)} for i in (0, 2)]
    assert [r.task_id for r in results.rollouts] == ["ts:1", "ts:3"]
    assert results.summary["unsupported_tasks"] == left_out
    assert (results.summary["planned"], results.summary["mean_reward"]) == (2, 1.0)
    assert env.plan()["unsupported"] == left_out
    with pytest.raises(SpecError) as refused:
        AgentEnv(tasks(4), OddOnly(explain)).run(task_ids=["ts:0", "ts:2"])
    assert str(refused.value) == (
        "harness 'OddOnly' cannot run any of the 2 selected tasks of taskset 'ts': "
        + ("ts:0: item 0 is even; ts:2: item 2 is even" if explain else f"for each, {reason(0)}")
        + ". Pair the taskset with a harness that runs its tasks (agentkit list harnesses)"
    )
