"""The guard of a local Ray instance agentkit started: the instance ends with its driver.

When the Ray executor starts a Ray instance on this machine (there was no
cluster to join), every process of that instance carries
``AGENTKIT_RAY_OWNER=<driver pid>:<start time>`` in its environment: the
GCS, the raylet, the monitors and agents, and the workers the raylet starts
(they inherit it). Just before, the driver starts this guard
(``python -m agentkit.executors._ray_guard <mark>``) in a session of its own,
waits until it says it is watching, and keeps the only write end of the pipe
the guard reads. The kernel closes that
end when the driver exits, however it exits (``kill -9`` included); the guard
then kills every process that carries the mark, and their children, removes
the directory the driver made for the instance's temp directory if it names
one (``python -m agentkit.executors._ray_guard <mark> <directory>``), and exits.

Ray's own clean-up is not enough for that: after a killed driver its GCS,
raylet and the workers still watching the raylet go, but not what a harness
started on the worker's host (a shell's background job, say, left without
its parent), nor a worker stuck on its way out, and the agents outlive them
for a while.
Should the guard itself be killed with the driver, the next local instance
the Ray executor starts reaps what is left (:func:`agentkit.sandbox._reaper.reap_orphans`
with :data:`OWNER_ENV`).
"""

from __future__ import annotations

import os
import shutil
import signal
import sys

from agentkit.sandbox._proctree import kill_tree

__all__ = ["OWNER_ENV", "sweep"]

#: The environment variable marking a local Ray instance's processes with their driver.
OWNER_ENV = "AGENTKIT_RAY_OWNER"
#: Sweeps at most (each stops, kills and waits for all it finds; the next finds none).
ROUNDS = 3


def sweep(mark: str) -> int:
    """Kill every process marked ``AGENTKIT_RAY_OWNER=<mark>``, and their children, until
    none is left; return how many were killed."""
    marker = f"{OWNER_ENV}={mark}".encode()
    killed = 0
    for _ in range(ROUNDS):
        found = kill_tree([], marker=marker)
        if not found:
            break
        killed += found
    return killed


def main(argv: list[str]) -> int:
    """``<mark> [<directory>]``: wait until standard input ends (the driver is gone), then
    sweep, then remove the directory."""
    if len(argv) not in (2, 3):
        print(
            "usage: python -m agentkit.executors._ray_guard <pid>:<start time> [<directory>]",
            file=sys.stderr,
        )
        return 2
    for sig in (signal.SIGINT, signal.SIGHUP):  # only the driver's end decides
        signal.signal(sig, signal.SIG_IGN)
    os.write(1, b"watching\n")  # the driver starts Ray once it has read this
    os.close(1)
    while os.read(0, 4096):
        pass
    sweep(argv[1])
    if len(argv) == 3:  # the instance's temp directory the driver made; its processes are gone
        shutil.rmtree(argv[2], ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
