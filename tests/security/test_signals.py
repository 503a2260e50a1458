"""A stop signal that lands anywhere, even inside a harness's own code, ends `agentkit run`:
it exits with 128 + the signal, leaves a resumable run and no process behind (the
rollout's local sandbox, up while the harness runs, goes with it)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from agentkit.sandbox._reaper import OWNER_ENV
from agentkit.testing.sandbox_fixtures import requires_bwrap

ENVPLUG = Path(__file__).parent.parent / "fixtures" / "envplug"


def cli_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ENVPLUG) + os.pathsep + env.get("PYTHONPATH", "")
    env["AGENTKIT_PLUGINS"] = "envplug"
    env.pop("AGENTKIT_DISABLE_PLUGINS", None)
    return env


def wait_for(path: Path, proc: subprocess.Popen[str]) -> None:
    """Until ``path`` exists (or the process ends: then the test fails with its stderr)."""
    while not path.exists():
        if proc.poll() is not None:
            raise AssertionError(f"agentkit ended before {path.name} appeared: {proc.stderr}")
        time.sleep(0.005)


def _gone(p: psutil.Process) -> bool:
    try:
        return not p.is_running() or p.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def left_behind(run_pid: int, tree: list[psutil.Process]) -> list[str]:
    """What of run ``run_pid`` still runs: processes of its ``tree`` (taken while it ran),
    of its session (it led one), or marked as its sandboxes' (their owner variable)."""
    left = {p.pid: p for p in tree if not _gone(p)}
    for p in psutil.process_iter():
        try:
            if os.getsid(p.pid) == run_pid or any(
                k == OWNER_ENV and v.startswith(f"{run_pid}:") for k, v in p.environ().items()
            ):
                left.setdefault(p.pid, p)
        except (psutil.Error, ProcessLookupError, PermissionError):
            continue  # gone, a zombie, or another user's (not this run's)
    return [f"{pid} {' '.join(_cmdline(p))[:200]}" for pid, p in left.items() if not _gone(p)]


def _cmdline(p: psutil.Process) -> list[str]:
    try:
        return p.cmdline()
    except psutil.Error:
        return ["?"]


@requires_bwrap
@pytest.mark.parametrize(
    "stop", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP], ids=["sigterm", "sigint", "sighup"]
)
def test_a_signal_inside_a_harness_ends_the_run(tmp_path: Path, stop: signal.Signals) -> None:
    """The signal arrives while the main thread runs a task's Python code, after a
    rollout was committed (so the async runtime has a worker thread): raising
    KeyboardInterrupt there used to stop the event loop with that thread's exit
    callback pending, and the process then waited for the thread forever. Its tasks
    run in local sandboxes: the interrupted rollout's must close with it."""
    run, markers = tmp_path / "run", tmp_path / "markers"
    markers.mkdir()
    proc = subprocess.Popen(
        [
            sys.executable, "-m", "agentkit", "run", "envplug:3", "controlled",
            "-T", "sandboxed=true", "--sandbox", "local",
            "-c", "1", "-H", f"marker_dir={markers}", "-H", "spin_on=2",
            "--no-progress", "--out", str(run),
        ],
        env=cli_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its session: whatever it starts there is found by it
    )  # fmt: skip
    try:
        wait_for(markers / "spinning", proc)
        # The harness runs: its rollout's sandbox is up (bubblewrap and what runs in it).
        tree = psutil.Process(proc.pid).children(recursive=True)
        assert any(p.name() == "bwrap" for p in tree), [p.cmdline() for p in tree]
        proc.send_signal(stop)
        _, err = proc.communicate(timeout=60)  # a hang guard, not a measurement
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 128 + stop, err
    assert f"agentkit run --resume {run}" in err
    assert "Traceback" not in err
    summary = json.loads((run / "summary.json").read_text())
    assert summary["interrupted"] is True and summary["finished"] == 2
    assert not (run / ".summary.json.tmp").exists()
    assert left_behind(proc.pid, tree) == []
