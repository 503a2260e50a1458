"""Killing a process tree from the host's /proc (``agentkit.sandbox._proctree``), which
every sandbox's timeout and cancellation use: when ``kill_tree`` returns, the tree is gone."""

from __future__ import annotations

import subprocess

import anyio
import pytest

from agentkit.sandbox._proctree import kill_tree
from agentkit.testing.sandbox_fixtures import host_pids_with_arg, unique_sleep_arg

pytestmark = pytest.mark.anyio


async def test_kill_tree_returns_once_every_process_of_it_has_exited() -> None:
    # A killed process is still listed, command line and all, until the kernel has
    # ended it: a caller that looks right after the kill must not find it. Once is
    # not enough to see that (the kernel is often quick), fifty times is.
    for _ in range(50):
        arg = unique_sleep_arg()
        shell = subprocess.Popen(
            ["sh", "-c", f"sleep {arg} & sleep {arg} & wait"], start_new_session=True
        )
        try:
            with anyio.fail_after(30):  # a hang guard: both sleeps are started at once
                while len(host_pids_with_arg(arg)) < 2:
                    await anyio.sleep(0.005)
            assert kill_tree([shell.pid], [shell.pid]) == 3
            assert host_pids_with_arg(arg) == []
        finally:
            shell.kill()
            shell.wait()
