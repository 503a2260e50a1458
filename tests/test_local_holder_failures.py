"""The local sandbox's helpers when they fail: bounded, and never left running.

A network holder whose bubblewrap writes without end before failing costs its
error message only the end of what it wrote; a namespace helper (nsenter) whose
caller is cancelled (a start that failed meanwhile) is killed and waited for.
Real processes stand in for the helpers: a script in bubblewrap's place, a
``sleep`` in nsenter's.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import attrs
import pytest

from agentkit.sandbox import SandboxError
from agentkit.sandbox.local._bwrap import find_tools
from agentkit.sandbox.local._namespaces import ERROR_TAIL_BYTES, run_as_namespace_root
from agentkit.sandbox.local._netholder import NetHolder
from agentkit.testing.sandbox_fixtures import (
    host_pids_with_arg,
    requires_bwrap,
    unique_sleep_arg,
    wait_present,
)

pytestmark = [pytest.mark.anyio, requires_bwrap]

#: In bubblewrap's place: a child of it writes 20 MB to its stderr, then its last words;
#: once the child is there, it reports no sandbox (its info pipe closed: it exits).
_FLOODING_BWRAP = """
import os, sys
child = os.fork()
os.closerange(3, 1 << 16)
if child == 0:
    for _ in range(20):
        sys.stderr.buffer.write(b"x" * (1 << 20))
    sys.stderr.buffer.write(b"\\nthe last words\\n")
    sys.stderr.flush()
    os._exit(0)
os._exit(1)
"""


async def test_a_holder_that_floods_its_stderr_costs_only_its_tail(tmp_path: Path) -> None:
    fake = tmp_path / "bwrap"
    fake.write_text(f"#!{sys.executable}{_FLOODING_BWRAP}")
    fake.chmod(0o755)
    holder = NetHolder(attrs.evolve(find_tools(), bwrap=str(fake)), root_mode=False)
    with pytest.raises(SandboxError) as info:
        await holder.start(writable=[], read_only=[], slirp_program=None)
    message = str(info.value)
    assert message.startswith("bubblewrap could not start the compose rollout's network: x")
    assert message.endswith("\nthe last words")
    assert len(message) <= ERROR_TAIL_BYTES + 100, len(message)
    await holder.close()


async def test_a_cancelled_namespace_helper_is_killed_and_waited_for(tmp_path: Path) -> None:
    """The helper (here a sleep in nsenter's place) is gone as soon as the cancelled
    call returns: nothing of a failed start runs on."""
    arg = unique_sleep_arg()
    fake = tmp_path / "nsenter"
    fake.write_text(f"#!/bin/sh\nexec sleep {arg}\n")
    fake.chmod(0o755)
    call = asyncio.ensure_future(
        run_as_namespace_root(str(fake), 1, (), "true", host_root=False, what="wait")
    )
    assert await wait_present(arg)
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    assert host_pids_with_arg(arg) == []
