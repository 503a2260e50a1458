"""What the host sees of a container in its cgroup: its processes and its OOM kills.

The docker sandbox needs the engine on this machine: a container's processes
are host processes, found through the cgroup ``/proc/PID/cgroup`` names
(cgroup v2, or v1's ``pids`` and ``memory`` controllers).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

__all__ = ["container_pids", "in_container", "oom_counter", "read_oom"]


def in_container(pid: int, container_id: str) -> bool:
    """True when host ``pid`` runs in the container (its cgroup names the container)."""
    if not container_id:
        return False
    try:
        return container_id in Path(f"/proc/{pid}/cgroup").read_text()
    except OSError:
        return False


def _cgroup_files(pid: int, v2: str, controller: str, v1: str) -> Iterator[Path]:
    """The file ``v2`` of each cgroup v2 of ``pid`` and ``v1`` of each of its cgroup v1
    ``controller``'s, in ``/proc/PID/cgroup``'s order."""
    try:
        lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
    except OSError:
        return
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controllers == "":
            yield Path("/sys/fs/cgroup") / path.lstrip("/") / v2
        elif controller in controllers.split(","):
            yield Path(f"/sys/fs/cgroup/{controller}") / path.lstrip("/") / v1


def container_pids(pid: int) -> list[int]:
    """Host pids of every process in the container whose main process is ``pid`` (its
    cgroup's ``cgroup.procs``: cgroup v2, or v1's pids controller)."""
    for procs in _cgroup_files(pid, "cgroup.procs", "pids", "cgroup.procs"):
        try:
            return [int(p) for p in procs.read_text().split()]
        except (OSError, ValueError):
            continue
    return []


def oom_counter(pid: int) -> Path | None:
    """The cgroup file counting the container's OOM kills (cgroup v1 or v2), if readable."""
    found = _cgroup_files(pid, "memory.events", "memory", "memory.oom_control")
    return next((candidate for candidate in found if candidate.exists()), None)


def read_oom(path: Path | None) -> int:
    """How many OOM kills the counter ``path`` (from :func:`oom_counter`) has seen."""
    if path is None:
        return 0
    try:
        for line in path.read_text().splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill":
                return int(value)
    except (OSError, ValueError):
        pass
    return 0
