"""The bookings servers of the local environment are forked from one warm process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from agentkit_fleet.environments import LocalBookingsEnvironment
from agentkit_fleet.localenv import zygote

pytestmark = pytest.mark.anyio


def children_of(pid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as fh:
                    fields = fh.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                found.append(int(entry))
    return found


async def test_each_rollout_gets_a_forked_server_on_its_own_databases() -> None:
    first, second = LocalBookingsEnvironment(), LocalBookingsEnvironment()
    try:
        assert len(await first.start()) == 10
        warm = zygote._zygote
        assert warm is not None
        assert len(await second.start()) == 10
        assert zygote._zygote is warm  # one warm process serves every rollout
        assert len(children_of(warm[0].pid)) >= 2  # each server is one of its forks
        made = await first.call_tool(
            "create_guest", {"name": "Zed Zygote", "email": "zed@example.com"}
        )
        assert not made.is_error, made.text
        found = await second.call_tool("find_guest", {"query": "Zygote"})
        assert "Zed" not in found.text  # the databases are the rollout's own
    finally:
        await first.close()
        await second.close()


def test_the_warm_process_ends_with_the_process_that_started_it() -> None:
    code = (
        "from agentkit_fleet.localenv import zygote\n"
        "path = zygote.warm_socket()\n"
        "print(zygote._zygote[0].pid, flush=True)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True
    )
    pid = int(out.stdout.split()[-1])
    deadline = time.monotonic() + 60  # it looks for its parent once a second
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as fh:
                state = fh.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            break  # gone
        if state == "Z":
            break  # exited, waiting to be reaped by init
        time.sleep(0.2)
    else:
        pytest.fail(f"the warm bookings process {pid} outlived its parent")


def test_the_example_runs_offline_in_one_terminal(tmp_path: Path) -> None:
    """The README's Fleet command: the built-in scripted model plays the oracle."""
    root = Path(__file__).resolve().parents[3]
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "agentkit",
            "run",
            "fleet:examples/fleet/tasks.json",
            "fleet-tool-call",
            "--model",
            "scripted:examples/fleet/oracle_script.json",
            "--out",
            str(tmp_path / "run"),
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=root,
    )
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    assert summary["finished"] == 12 and summary["mean_reward"] == 1.0
