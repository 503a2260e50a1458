"""Sandboxes die with their orchestrator, however it dies, and the next run reaps stragglers.

A real ``agentkit run`` with local sandboxes is killed (``SIGKILL``, at the
moment its first sandboxes are being started, where bubblewrap's own
parent-death handling used to leave a process waiting forever, and later
on); every process tied to its run directory must then go away by itself.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agentkit.sandbox._reaper import OWNER_ENV, owner_token, reap_orphans
from agentkit.testing.sandbox_fixtures import requires_bwrap

pytestmark = [requires_bwrap]

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "harbor"


def _pids_mentioning(text: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                if text.encode() in f.read():
                    found.append(int(entry))
        except OSError:
            continue
    return found


def _wait_until(predicate, what: str, limit: float = 60.0) -> None:
    """Poll ``predicate``; fail naming ``what`` if it never holds (a bound, not a timing check)."""
    deadline = time.monotonic() + limit
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"never happened: {what}")
        time.sleep(0.02)


def _start_run(out: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "agentkit", "run", f"harbor:{EXAMPLES}", "oracle",
         "-n", "2", "-c", "8", "--no-progress", "--out", str(out), "-S", "image=host"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip


@pytest.mark.parametrize("moment", ["first-sandbox", "mid-run"])
@pytest.mark.parametrize("trial", range(3))
def test_a_killed_orchestrator_leaves_no_sandbox(tmp_path: Path, moment: str, trial: int) -> None:
    out = tmp_path / f"run-{moment}-{trial}"
    run = _start_run(out)
    try:
        # Wait for the first bubblewrap process of this run: that is the window
        # where a sandbox is half started.
        _wait_until(lambda: bool(_pids_mentioning(str(out) + "/")), "a sandbox started")
        if moment == "mid-run":
            _wait_until(
                lambda: (
                    (out / "rollouts.jsonl").exists()
                    and (out / "rollouts.jsonl").stat().st_size > 0
                ),
                "a rollout finished",
            )
        run.send_signal(signal.SIGKILL)
        run.wait()
        _wait_until(lambda: not _pids_mentioning(str(out) + "/"), "every sandbox of the run exited")
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()


def test_the_next_run_reaps_a_sandbox_whose_owner_is_gone() -> None:
    # A stand-in for a straggler: a real process marked with a dead owner.
    dead = subprocess.Popen(["true"])
    dead.wait()
    token = f"{dead.pid}:1"  # gone; a later process with that pid has another start time
    straggler = subprocess.Popen(["sleep", "987.6543"], env={**os.environ, OWNER_ENV: token})
    mine = subprocess.Popen(["sleep", "987.6544"], env={**os.environ, OWNER_ENV: owner_token()})
    try:
        _wait_until(lambda: bool(_pids_mentioning("987.6543")), "the straggler started")
        # Not `reap_orphans() >= 1`: another process starting a sandbox at this moment
        # (a test on another worker, another run) reaps with the same scan and may kill
        # the straggler first. What must hold is that it dies and only it.
        reap_orphans()
        straggler.wait(timeout=30)  # a hang guard: nobody reaped it
        assert straggler.returncode == -signal.SIGKILL
        assert mine.poll() is None, "a sandbox whose owner is alive was reaped"
    finally:
        for p in (straggler, mine):
            if p.poll() is None:
                p.kill()
                p.wait()
