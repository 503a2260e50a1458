"""The docker sandbox through ``agentkit run``: this project's Harbor tasks in their images.

examples/harbor-docker covers apt and pip in a Dockerfile, COPY, WORKDIR,
ENV, an ENTRYPOINT service, a compose sidecar, a memory limit and steps; the
oracle must score them as their authors meant, nop must score 0, and nothing
may be left behind.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from agentkit.testing.sandbox_fixtures import requires_docker

pytestmark = [requires_docker]

ROOT = Path(__file__).resolve().parents[1]
TASKS = ROOT / "examples" / "harbor-docker"


@pytest.fixture(autouse=True)
def harbor_installed() -> None:
    pytest.importorskip("agentkit_harbor", reason="the Harbor plugin is not installed")


class Run:
    """One ``agentkit run``: its records by task, its directory, and its process as its
    sandboxes' owner label names it (``host:pid:start``)."""

    def __init__(
        self, by_task: dict[str, dict[str, object]], out: Path, owner: str, stderr: str
    ) -> None:
        self.by_task, self.out, self.owner, self.stderr = by_task, out, owner, stderr


def _owner(pid: int) -> str:
    """``host:pid:start`` of a running process (its start in clock ticks since boot)."""
    stat = Path(f"/proc/{pid}/stat").read_bytes()
    start = stat[stat.rfind(b")") + 2 :].split()[19].decode()
    return f"{socket.gethostname()}:{pid}:{start}"


def _run(harness: str, out: Path, *extra: str) -> Run:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "agentkit",
            "run",
            f"harbor:{TASKS}",
            harness,
            "--sandbox",
            "docker",
            "--out",
            str(out),
            "--json",
            "--max-retries",
            "0",
            *extra,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "NO_COLOR": "1"},
    )
    owner = _owner(proc.pid)  # read while it runs (it is not reaped before communicate)
    try:
        stdout, stderr = proc.communicate(timeout=1200)  # a hang guard, not a measurement
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, stdout[-3000:] + stderr[-3000:]
    records = [json.loads(line) for line in (out / "rollouts.jsonl").read_text().splitlines()]
    by_task = {r["task_id"].split(":", 1)[1]: r for r in records}
    return Run(by_task, out, owner, stderr)


def _labelled(kind: str) -> list[tuple[str, str, str]]:
    """(name, owner, rollout) of every docker sandbox ``container`` or ``network`` there is."""
    listing = ["ps", "-a"] if kind == "container" else ["network", "ls"]
    fmt = '{{.Names}}\t{{.Label "org.agentkit.owner"}}\t{{.Label "org.agentkit.rollout"}}'
    if kind == "network":
        fmt = fmt.replace(".Names", ".Name")
    done = subprocess.run(
        ["docker", *listing, "--filter", "label=org.agentkit.sandbox", "--format", fmt],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    rows = (line.split("\t") for line in done.stdout.splitlines() if line)
    return [(name, owner, rollout) for name, owner, rollout in rows]


def _leftovers(*runs: Run) -> list[tuple[str, str, str]]:
    """The containers and networks of these runs still there: those their processes own
    (``host:pid:start``, unique to a run). Not by rollout id: another run of the same
    task (this module's nop test on another worker) makes live containers with the same
    rollout label, which are not this run's leftovers."""
    owners = {run.owner for run in runs}
    return [
        item for kind in ("container", "network") for item in _labelled(kind) if item[1] in owners
    ]


@pytest.mark.slow
def test_oracle_scores_the_docker_tasks_as_meant(tmp_path: Path) -> None:
    first = _run("oracle", tmp_path / "oracle")
    by_task = first.by_task
    rewards = {task: r["reward"] for task, r in by_task.items()}
    assert rewards == {
        "tools-in-image": 1.0,
        "service-at-start": 1.0,
        "sidecar-api": 1.0,
        "two-steps": 1.0,
        "memory-hog": 0.0,
    }, {t: (r["reward"], r["error"]) for t, r in by_task.items()}
    hog = by_task["memory-hog"]
    assert hog["error_kind"] == "agent_error"
    assert "out-of-memory killer" in json.dumps(hog)
    # Checked now: the next run's start removes what a dead run left.
    assert _leftovers(first) == [], first.stderr[-3000:]
    # Built once: a second run finds every image by its digest (a build writes its log
    # in the run's images/; a build skipped for its digest writes none).
    again = _run("oracle", tmp_path / "again", "--task", "harbor-docker:tools-in-image")
    assert again.by_task["tools-in-image"]["reward"] == 1.0
    assert sorted(p.name for p in (again.out / "images").glob("*.log")) == []
    assert _leftovers(again) == [], again.stderr[-3000:]


@pytest.mark.slow
def test_nop_scores_nothing(tmp_path: Path) -> None:
    run = _run("nop", tmp_path / "nop", "--task", "harbor-docker:tools-in-image",
               "--task", "harbor-docker:sidecar-api")  # fmt: skip
    assert {t: r["reward"] for t, r in run.by_task.items()} == {
        "tools-in-image": 0.0,
        "sidecar-api": 0.0,
    }


def test_a_failed_build_fails_its_task_only_with_the_log_in_the_run_dir(tmp_path: Path) -> None:
    tasks = tmp_path / "tasks"
    for name, dockerfile in (
        ("broken", "FROM debian:bookworm-slim\nRUN echo agentkit-broken-build && exit 7\n"),
        ("fine", "FROM debian:bookworm-slim\nWORKDIR /app\n"),
    ):
        task = tasks / name
        (task / "environment").mkdir(parents=True)
        (task / "tests").mkdir()
        (task / "solution").mkdir()
        (task / "task.toml").write_text(
            'schema_version = "1.4"\n[environment]\nnetwork_mode = "no-network"\n'
        )
        (task / "instruction.md").write_text("Write ok to /app/ok.\n")
        (task / "environment" / "Dockerfile").write_text(dockerfile)
        (task / "solution" / "solve.sh").write_text("echo ok > /app/ok\n")
        (task / "tests" / "test.sh").write_text(
            "if [ -f /app/ok ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n"
        )
    out = tmp_path / "run"
    proc = subprocess.run(
        [sys.executable, "-m", "agentkit", "run", f"harbor:{tasks}", "oracle", "--sandbox",
         "docker", "--out", str(out), "--json", "-n", "2"],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    records = [json.loads(line) for line in (out / "rollouts.jsonl").read_text().splitlines()]
    broken = [r for r in records if r["task_id"].endswith(":broken")]
    fine = [r for r in records if r["task_id"].endswith(":fine")]
    assert [r["reward"] for r in fine] == [1.0, 1.0]
    assert len(broken) == 2 and all(r["error_kind"] == "image_build" for r in broken)
    assert all(r["attempts"] == 1 for r in broken)  # not retried
    # it could not run: no reward, left out of the statistics, run again by resume
    assert all(r["infra_error"] and r["reward"] is None for r in broken)
    logs = list((out / "images").glob("*.log"))
    assert any("agentkit-broken-build" in p.read_text() for p in logs), logs
    assert str(out / "images") in broken[0]["error"]
