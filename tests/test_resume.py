"""Resume: only missing rollouts run, nothing is duplicated or lost, even after kill -9."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import pytest

from agentkit import HarnessResult, ListTaskset, Rubric, Task
from agentkit.env import AgentEnv, ResumeError

pytestmark = pytest.mark.anyio

ENVPLUG = Path(__file__).parent / "fixtures" / "envplug"


def exact(output: str | None, target: Any) -> float:
    return 1.0 if output == str(target) else 0.0


class Counting:
    def __init__(self, stop_after: int | None = None) -> None:
        self.calls: list[str] = []
        self.stop_after = stop_after
        self.scope: anyio.CancelScope | None = None

    async def run(self, task: Task, context: Any = None, on_event: Any = None) -> HarnessResult:
        self.calls.append(context.rollout_id)
        if self.stop_after is not None and len(self.calls) > self.stop_after:
            assert self.scope is not None
            self.scope.cancel()  # as Ctrl-C does: the run's task is cancelled
            await anyio.sleep(1)
        return HarnessResult(status="completed", output=str(task.target))


def make_taskset(n: int = 4) -> ListTaskset:
    return ListTaskset(
        "ts",
        [Task(task_id=f"ts:{i}", input=f"q{i}", target=str(i)) for i in range(n)],
        default_grading_spec=Rubric([exact]),
    )


def read_lines(run: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in (run / "rollouts.jsonl").read_text().splitlines()]


async def test_resume_runs_only_the_missing_rollouts(tmp_path: Path) -> None:
    run = tmp_path / "run"
    first = Counting(stop_after=5)
    with anyio.CancelScope() as scope:
        first.scope = scope
        await AgentEnv(make_taskset(), first).evaluate(rollouts_per_task=3, out=run, concurrency=1)
    assert scope.cancelled_caught
    done = read_lines(run)
    assert len(done) == 5
    summary = json.loads((run / "summary.json").read_text())
    assert summary["complete"] is False and summary["interrupted"] is True
    second = Counting()
    results = await AgentEnv(make_taskset(), second).evaluate(
        rollouts_per_task=3, resume=run, concurrency=3
    )
    assert len(second.calls) == 7
    assert not set(second.calls) & {d["rollout_id"] for d in done}
    lines = read_lines(run)
    assert len(lines) == 12
    assert len({(x["task_id"], x["rollout_index"]) for x in lines}) == 12
    assert len(results.rollouts) == 12 and len(results.groups) == 4
    assert json.loads((run / "summary.json").read_text())["complete"] is True
    # resuming a complete run runs nothing
    third = Counting()
    await AgentEnv(make_taskset(), third).evaluate(rollouts_per_task=3, resume=run)
    assert third.calls == [] and len(read_lines(run)) == 12


async def test_resume_refuses_other_settings_and_says_which(tmp_path: Path) -> None:
    run = tmp_path / "run"
    await AgentEnv(make_taskset(), Counting()).evaluate(rollouts_per_task=2, out=run, model="a")
    with pytest.raises(ResumeError) as err:
        await AgentEnv(make_taskset(), Counting()).evaluate(
            rollouts_per_task=1, resume=run, model="b"
        )
    message = str(err.value)
    assert "-n/--rollouts: the run has 2 rollouts per task; give 2 or more" in message
    assert "-H" not in message and "model" not in message  # -n may grow, the model change
    with pytest.raises(ResumeError, match=r"the tasks differ \(the taskset changed\): not sel"):
        await AgentEnv(make_taskset(3), Counting()).evaluate(
            rollouts_per_task=2, resume=run, model="a"
        )
    # concurrency is not part of a run's identity
    await AgentEnv(make_taskset(), Counting()).evaluate(
        rollouts_per_task=2, resume=run, model="a", concurrency=1
    )


async def test_resume_refuses_tasks_edited_under_the_same_ids(tmp_path: Path) -> None:
    run = tmp_path / "run"
    first = Counting(stop_after=2)
    with anyio.CancelScope() as scope:
        first.scope = scope
        await AgentEnv(make_taskset(), first).evaluate(rollouts_per_task=2, out=run, concurrency=1)
    edited = ListTaskset(
        "ts",
        [Task(task_id=t.task_id, input=t.input, target="changed") for t in make_taskset()],
        default_grading_spec=Rubric([exact]),
    )
    with pytest.raises(ResumeError, match=r"the tasks' contents changed since the run started"):
        await AgentEnv(edited, Counting()).evaluate(rollouts_per_task=2, resume=run)
    # the same contents resume fine
    await AgentEnv(make_taskset(), Counting()).evaluate(rollouts_per_task=2, resume=run)
    assert len(read_lines(run)) == 8


async def test_resume_repairs_groups_jsonl(tmp_path: Path) -> None:
    run = tmp_path / "run"
    await AgentEnv(make_taskset(), Counting()).evaluate(rollouts_per_task=2, out=run)
    path = run / "groups.jsonl"
    lines = path.read_text().splitlines(keepends=True)
    assert len(lines) == 4
    # killed after the last rollout line but in the middle of its group line
    path.write_text("".join(lines[:-1]) + lines[-1][:15])
    again = Counting()
    await AgentEnv(make_taskset(), again).evaluate(rollouts_per_task=2, resume=run)
    assert again.calls == []
    repaired = [json.loads(x) for x in path.read_text().splitlines()]
    assert sorted(g["task_id"] for g in repaired) == ["ts:0", "ts:1", "ts:2", "ts:3"]


# -- a real `agentkit run` killed with SIGKILL / SIGINT ---------------------------------------


def cli_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ENVPLUG) + os.pathsep + env.get("PYTHONPATH", "")
    env["AGENTKIT_PLUGINS"] = "envplug"
    env.pop("AGENTKIT_DISABLE_PLUGINS", None)
    return env


def start_run(run: Path, markers: Path, *extra: str) -> subprocess.Popen[str]:
    markers.mkdir(exist_ok=True)
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "agentkit",
            "run",
            "envplug:12",
            "controlled",
            "-n",
            "2",
            "-c",
            "4",
            "-H",
            "delay=0.15",
            "-H",
            f"marker_dir={markers}",
            "--no-progress",
            *extra,
        ],
        env=cli_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_for_lines(run: Path, n: int, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    path = run / "rollouts.jsonl"
    while time.monotonic() < deadline:
        if path.exists() and path.read_bytes().count(b"\n") >= n:
            return
        time.sleep(0.005)
    raise AssertionError(f"{path} never reached {n} lines")


def check_complete(run: Path, markers: Path) -> None:
    lines = read_lines(run)
    keys = [(x["task_id"], x["rollout_index"]) for x in lines]
    assert len(keys) == 24 and len(set(keys)) == 24, "lost or duplicated rollouts"
    assert all(x["reward"] == 1.0 for x in lines)
    summary = json.loads((run / "summary.json").read_text())
    assert summary["complete"] is True and summary["finished"] == 24
    # every rollout ran at least once (one marker file per harness run)
    ran = {p.name.split(".")[0] for p in markers.iterdir()}
    assert ran == {x["rollout_id"] for x in lines}


@pytest.mark.parametrize("kill_after_lines", [0, 1, 7, 15])
def test_sigkill_at_several_moments_then_resume(tmp_path: Path, kill_after_lines: int) -> None:
    run, markers = tmp_path / "run", tmp_path / "markers"
    proc = start_run(run, markers, "--out", str(run))
    try:
        if kill_after_lines == 0:
            deadline = time.monotonic() + 20
            while not (run / "manifest.json").exists() and time.monotonic() < deadline:
                time.sleep(0.005)
        else:
            wait_for_lines(run, kill_after_lines)
        before_kill = read_lines(run) if (run / "rollouts.jsonl").exists() else []
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait(10)
    assert proc.returncode == -signal.SIGKILL
    if kill_after_lines == 15:
        # simulate the worst moment too: a half-written last line
        with open(run / "rollouts.jsonl", "ab") as fh:
            fh.write(b'{"type":"rollout","rollout_id":"torn')
    finished_before = {x["rollout_id"] for x in read_lines_tolerant(run)}
    assert len(finished_before) >= len(before_kill)
    runs_before = {p.name.split(".")[0] for p in markers.iterdir()}
    resumed = subprocess.run(
        [
            sys.executable,
            "-m",
            "agentkit",
            "run",
            "--resume",
            str(run),
            "--no-progress",
            "-H",
            "delay=0.01",
            "-H",
            f"marker_dir={markers}",
        ],
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    # -H changes the harness options: refused, naming the option
    assert resumed.returncode == 2
    assert "-H delay differs: the run used 0.15, now 0.01" in resumed.stderr
    resumed = subprocess.run(
        [sys.executable, "-m", "agentkit", "run", "--resume", str(run), "--no-progress"],
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert resumed.returncode == 0, resumed.stderr
    if kill_after_lines == 15:
        assert "half-written last line" in resumed.stderr
    check_complete(run, markers)
    # rollouts that had finished before the kill were not run again
    runs_after = [p.name.split(".")[0] for p in markers.iterdir()]
    for rid in finished_before:
        assert runs_after.count(rid) == 1, rid
    # rollouts that were in flight at the kill (started, no line) ran again
    for rid in runs_before - finished_before:
        assert runs_after.count(rid) == 2, rid


def read_lines_tolerant(run: Path) -> list[dict[str, Any]]:
    path = run / "rollouts.jsonl"
    if not path.exists():
        return []
    out = []
    for line in path.read_bytes().split(b"\n"):
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out


@pytest.mark.parametrize(
    ("stop", "status"),
    [(signal.SIGINT, 130), (signal.SIGTERM, 143), (signal.SIGHUP, 129)],
    ids=["ctrl-c", "sigterm", "sighup"],
)
def test_ctrl_c_stops_promptly_and_leaves_a_resumable_run(
    tmp_path: Path, stop: signal.Signals, status: int
) -> None:
    run, markers = tmp_path / "run", tmp_path / "markers"
    proc = start_run(run, markers, "--out", str(run))
    try:
        wait_for_lines(run, 3)
        proc.send_signal(stop)
        _, err = proc.communicate(timeout=60)  # a hang guard, not a measurement
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == status, err
    assert f"agentkit run --resume {run}" in err
    assert "Traceback" not in err
    summary = json.loads((run / "summary.json").read_text())
    assert summary["interrupted"] is True and summary["complete"] is False
    assert summary["finished"] == len(read_lines(run)) < 24
    # promptly: it stopped starting rollouts (each start leaves a marker file)
    assert len(list(markers.iterdir())) < 24
    resumed = subprocess.run(
        [sys.executable, "-m", "agentkit", "run", "--resume", str(run), "--json"],
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads(resumed.stdout)["complete"] is True
    check_complete(run, markers)


@pytest.mark.parametrize(
    ("stop_after", "concurrency", "n"),
    [(0, 1, 1), (3, 2, 2), (9, 5, 3), (11, 8, 3), (2, 3, 4)],
)
async def test_interrupt_anywhere_then_resume_gives_each_rollout_exactly_once(
    tmp_path: Path, stop_after: int, concurrency: int, n: int
) -> None:
    run = tmp_path / "run"
    first = Counting(stop_after=stop_after)
    with anyio.CancelScope() as scope:
        first.scope = scope
        await AgentEnv(make_taskset(), first).evaluate(
            rollouts_per_task=n, out=run, concurrency=concurrency
        )
    before = {x["rollout_id"] for x in read_lines(run)}
    second = Counting()
    results = await AgentEnv(make_taskset(), second).evaluate(
        rollouts_per_task=n, resume=run, concurrency=concurrency
    )
    assert not before & set(second.calls)  # nothing finished ran again
    lines = read_lines(run)
    keys = [(x["task_id"], x["rollout_index"]) for x in lines]
    assert sorted(keys) == sorted((f"ts:{t}", i) for t in range(4) for i in range(n))
    assert len(results.groups) == 4
    assert all(len(g.advantages) == n for g in results.groups)


def test_cli_resume_keeps_stored_options_that_are_not_given_again(tmp_path: Path) -> None:
    """`--resume DIR -H x=1` restates one option: the others default to the stored ones."""
    run = tmp_path / "run"

    def agentkit(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "agentkit", "run", *args, "--no-progress"],
            env=cli_env(),
            capture_output=True,
            text=True,
            timeout=60,
        )

    first = agentkit(
        "envplug:3", "controlled", "-T", "sandboxed=false", "-H", "events=1", "-H", "wrong=true",
        "--out", str(run),
    )  # fmt: skip
    assert first.returncode == 0, first.stderr
    again = agentkit("--resume", str(run), "-H", "wrong=true")
    assert again.returncode == 0, again.stderr
    assert "0 rollouts to run (3 tasks × 1); 3 of 3 already finished" in again.stderr
    changed = agentkit("--resume", str(run), "-H", "wrong=false")
    assert changed.returncode == 2
    assert "-H wrong differs: the run used true, now false" in changed.stderr
    assert "taskset.options" not in changed.stderr and "events" not in changed.stderr


async def test_resume_refuses_other_scoring_settings(tmp_path: Path) -> None:
    """pass_threshold and normalize_advantages shape every record's `passed` and every
    group's advantages: a resumed run must not mix two settings in one directory."""
    run = tmp_path / "run"
    env = AgentEnv(make_taskset(), Counting())
    await env.evaluate(rollouts_per_task=2, out=run, pass_threshold=0.5)
    with pytest.raises(ResumeError) as err:
        await env.evaluate(rollouts_per_task=2, resume=run, normalize_advantages=True)
    message = str(err.value)
    assert "--pass-threshold differs: the run used 0.5, now 1.0" in message
    assert "--normalize-advantages differs: the run used false, now true" in message
    await env.evaluate(rollouts_per_task=2, resume=run, pass_threshold=0.5, max_retries=0)


def test_cli_resume_takes_the_stored_scoring_settings(tmp_path: Path) -> None:
    run = tmp_path / "run"
    base = [sys.executable, "-m", "agentkit", "run", "--no-progress"]
    scoring = ["--pass-threshold", "0.5", "--normalize-advantages"]
    first = subprocess.run(
        [*base, "envplug:2", "controlled", *scoring, "--out", str(run)],
        env=cli_env(), capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert first.returncode == 0, first.stderr
    again = subprocess.run(
        [*base, "--resume", str(run)], env=cli_env(), capture_output=True, text=True, timeout=60
    )
    assert again.returncode == 0, again.stderr
    changed = subprocess.run(
        [*base, "--resume", str(run), "--pass-threshold", "1"],
        env=cli_env(), capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert changed.returncode == 2
    assert "--pass-threshold differs: the run used 0.5, now 1.0" in changed.stderr
