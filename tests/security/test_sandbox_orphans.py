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
from agentkit.testing.sandbox_fixtures import host_pids_with_arg, requires_bwrap, unique_sleep_arg

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


def _zombie(pid: int) -> bool:
    with open(f"/proc/{pid}/stat", "rb") as f:
        data = f.read()
    return data[data.rfind(b")") + 2 :].startswith(b"Z")


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


#: An orchestrator that pauses its sandbox (as a fork's or a separate verifier's copy
#: does), says so, and waits to be killed.
PAUSER = """
import asyncio, sys
from pathlib import Path
from agentkit._sandbox import ExecutionHints
from agentkit.sandbox.local import LocalSandbox
from agentkit.sandbox.local._freeze import pause

async def main():
    sb = LocalSandbox(root=Path(sys.argv[1]), hints=ExecutionHints(), image="host")
    await sb.setup()
    assert (await sb.exec("sleep 1000 > /dev/null 2>&1 & echo started")).ok
    paused = pause([sb._holder_pid])
    print(len(paused.stopped), flush=True)
    await asyncio.sleep(3600)

asyncio.run(main())
"""


def test_an_orchestrator_killed_while_its_sandbox_is_paused_leaves_no_sandbox(
    tmp_path: Path,
) -> None:
    """Killed in the middle of a copy, its sandbox's processes stopped: they are resumed
    (by the pause's resumer) and end as on any orchestrator's death, not left stopped.

    The killed orchestrator is not reaped until then: a zombie still names its owner
    token, so another agentkit process starting meanwhile (the next run's reaper)
    does not end the sandbox for it; only the sandbox itself can."""
    root = tmp_path / "paused"
    run = subprocess.Popen(
        [sys.executable, "-c", PAUSER, str(root)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert run.stdout is not None
        stopped = run.stdout.readline()  # once the sandbox is paused
        assert int(stopped) >= 2, stopped
        assert _pids_mentioning(str(root) + "/")
        run.send_signal(signal.SIGKILL)
        _wait_until(lambda: _zombie(run.pid), "the orchestrator died (a zombie, not reaped)")
        _wait_until(lambda: not _pids_mentioning(str(root) + "/"), "the paused sandbox exited")
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()


#: An orchestrator ending its sandbox's processes (as grading does) with a command
#: running, that says so at ``moment`` of end_processes and waits there to be killed:
#: ``keepers stopped`` (every process inside stopped at once, the sandbox's keepers
#: not continued yet), ``before the kill`` (all stopped, the wrapper too, none killed).
ENDER = """
import asyncio, sys, time
from pathlib import Path
from agentkit._sandbox import ExecutionHints
from agentkit.sandbox import end_processes
from agentkit.sandbox.local import LocalSandbox
import agentkit.sandbox.local._sandbox as box

root, moment, arg = sys.argv[1:]

def stuck(*args, **kwargs):
    print("stopped", flush=True)
    time.sleep(3600)

if moment == "keepers stopped":
    box._continue = stuck
else:
    box.kill_namespace = stuck

async def main():
    sb = LocalSandbox(root=Path(root), hints=ExecutionHints(), image="host")
    await sb.setup()
    await sb.start(["sleep", arg])
    await end_processes(sb)

asyncio.run(main())
"""


@pytest.mark.parametrize("moment", ["keepers stopped", "before the kill"])
def test_an_orchestrator_killed_while_ending_its_sandboxs_processes_leaves_nothing(
    tmp_path: Path, moment: str
) -> None:
    """Killed between end_processes' stop and its kill: what it stopped (the sandbox's
    keepers, the wrapper of a running command) is resumed by its resumer, so the
    holder's lifeline ends everything inside and the wrapper ends with its command;
    nothing is left stopped for ever. The killed orchestrator stays a zombie meanwhile
    (see the test above)."""
    root = tmp_path / "ending"
    arg = unique_sleep_arg()
    run = subprocess.Popen(
        [sys.executable, "-c", ENDER, str(root), moment, arg], stdout=subprocess.PIPE, text=True
    )
    try:
        assert run.stdout is not None
        assert run.stdout.readline() == "stopped\n"
        assert _pids_mentioning(str(root) + "/") and host_pids_with_arg(arg)
        run.send_signal(signal.SIGKILL)
        _wait_until(lambda: _zombie(run.pid), "the orchestrator died (a zombie, not reaped)")
        _wait_until(
            lambda: not _pids_mentioning(str(root) + "/") and not host_pids_with_arg(arg),
            "the sandbox and the command's wrapper exited",
        )
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
