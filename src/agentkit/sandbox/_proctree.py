"""Finding and killing a process tree from the host's /proc.

A command's tree is every process descending from the process we spawned,
plus every process still in the session we created for it (a background
``sleep 1000 &`` is reparented away from its shell but keeps the session).
Processes are stopped first, then killed, so a forking loop cannot outrun us;
:func:`kill_tree` returns once they have exited, so a caller that then looks for
them finds none.

A sandbox's processes, whatever they did to leave their command's tree (a
double fork, ``setsid``, another uid inside), are all still in its pid
namespace: :func:`kill_namespace` ends every one of them but the sandbox's
own keepers, the same way (what grading asks for before a verifier runs).
"""

from __future__ import annotations

import os
import select
import signal
import time
from collections.abc import Callable, Iterable

__all__ = [
    "EXIT_WAIT_SEC",
    "alive",
    "find_namespace",
    "find_tree",
    "kill_namespace",
    "kill_tree",
    "namespace_of",
    "start_time",
]

#: The longest :func:`kill_tree` waits for the killed processes to exit (stopped,
#: SIGKILL ends them at once, unless the kernel holds one in an uninterruptible wait).
EXIT_WAIT_SEC = 5.0


def _stat_fields(pid: int) -> list[bytes] | None:
    """The fields of ``/proc/PID/stat`` after the command name (the state first), or
    None once the process is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    # The command name may contain spaces and parentheses: split after the last ')'.
    return data[data.rfind(b")") + 2 :].split()


def _read_stat(pid: int) -> tuple[int, int] | None:
    """(ppid, session id) of ``pid``, or None once it is gone."""
    fields = _stat_fields(pid)
    try:
        return (int(fields[1]), int(fields[3])) if fields is not None else None
    except (IndexError, ValueError):
        return None


def start_time(pid: int) -> str | None:
    """The process's start time (clock ticks since boot), or None once it is gone: with
    its pid, it names the process even when pids are reused."""
    fields = _stat_fields(pid)
    return fields[19].decode() if fields is not None and len(fields) > 19 else None


def _has_marker(pid: int, marker: bytes) -> bool:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return marker in f.read().split(b"\0")
    except OSError:
        return False


def find_tree(
    roots: Iterable[int], sessions: Iterable[int] = (), marker: bytes | None = None
) -> set[int]:
    """Pids descending from ``roots``, in one of ``sessions``, or with ``marker`` in their env."""
    roots = set(roots)
    sessions = set(sessions)
    me = os.getpid()
    children: dict[int, list[int]] = {}
    found: set[int] = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        pid = int(entry)
        if pid == me:
            continue
        st = _read_stat(pid)
        if st is None:
            continue
        ppid, sid = st
        children.setdefault(ppid, []).append(pid)
        if sid in sessions or (marker is not None and _has_marker(pid, marker)):
            found.add(pid)
    stack = [r for r in roots if os.path.exists(f"/proc/{r}")] + list(found)
    found.update(stack)
    while stack:
        for child in children.get(stack.pop(), ()):
            if child not in found:
                found.add(child)
                stack.append(child)
    found.discard(me)
    return found


def _signal_all(pids: Iterable[int], sig: int) -> set[int]:
    """Send ``sig`` to each of ``pids``; those it reached."""
    sent: set[int] = set()
    for pid in pids:
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            continue
        sent.add(pid)
    return sent


def _pidfds(pids: Iterable[int]) -> dict[int, int]:
    """A pidfd for each of ``pids`` still there (none where pidfds do not exist)."""
    fds: dict[int, int] = {}
    for pid in pids:
        try:
            fds[pid] = os.pidfd_open(pid)
        except (OSError, AttributeError):  # gone already, or no pidfd_open here
            continue
    return fds


def _wait_exited(fds: list[int], timeout: float) -> None:
    """Until every pidfd in ``fds`` is readable (its process has exited) or ``timeout``."""
    poller = select.poll()
    for fd in fds:
        poller.register(fd, select.POLLIN)
    pending = set(fds)
    deadline = time.monotonic() + timeout
    while pending:
        left = deadline - time.monotonic()
        if left <= 0:
            return
        for fd, _ in poller.poll(left * 1000):
            pending.discard(fd)
            poller.unregister(fd)


def kill_tree(
    roots: Iterable[int], sessions: Iterable[int] = (), marker: bytes | None = None
) -> int:
    """SIGSTOP the whole tree until it stops growing, then SIGKILL it and wait (at most
    :data:`EXIT_WAIT_SEC`) until every process of it has exited; return how many.

    A killed process is not gone when the signal is sent: the kernel ends it a moment
    later, and until then it is still listed with its command line."""
    roots = list(roots)
    sessions = list(sessions)
    return len(_stop_then_kill(lambda: find_tree(roots, sessions, marker)))


def namespace_of(pid: int) -> int | None:
    """The inode of ``pid``'s pid namespace, or None once it is gone (or not ours to see)."""
    try:
        return os.stat(f"/proc/{pid}/ns/pid").st_ino
    except OSError:
        return None


def find_namespace(holder: int, keep: Iterable[int] = ()) -> set[int]:
    """Every process in ``holder``'s pid namespace (and below it), but ``keep``.

    A process is found whatever its session, its parent or its uid inside:
    a double fork, ``setsid`` or ``nohup`` does not take it out of the
    namespace. Processes of namespaces nested in it are found as the
    descendants of the processes found.
    """
    ns = namespace_of(holder)
    if ns is None:
        return set()
    keep = set(keep)
    me = os.getpid()
    members: set[int] = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        pid = int(entry)
        if pid == me or pid in keep:
            continue
        if namespace_of(pid) == ns:
            members.add(pid)
    return find_tree(members) - keep if members else set()


def kill_namespace(holder: int, keep: Iterable[int] = (), also: Iterable[int] = ()) -> set[int]:
    """End every process of ``holder``'s pid namespace but ``keep`` (see
    :func:`find_namespace`), and the processes ``also`` names (the orchestrator's own
    wrappers of commands running inside, outside the namespace): stopped until no new
    one appears, then killed, then waited for (at most :data:`EXIT_WAIT_SEC`).
    Returns the pids that were killed."""
    keep = frozenset(keep)
    wrappers = list(also)
    return _stop_then_kill(lambda: find_namespace(holder, keep) | alive(wrappers))


def alive(pids: Iterable[int]) -> set[int]:
    """Those of ``pids`` that are still processes (zombies, already dead, excluded)."""
    out: set[int] = set()
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                data = f.read()
        except OSError:
            continue
        if data[data.rfind(b")") + 2 : data.rfind(b")") + 3] not in (b"Z", b"X"):
            out.add(pid)
    return out


def _stop_then_kill(find: Callable[[], set[int]]) -> set[int]:
    """SIGSTOP what ``find`` returns until it returns nothing new (a stopped process
    cannot fork), then SIGKILL all of it and wait until each has exited; then look
    again, and end what is found the same way, until nothing new is (or
    :data:`EXIT_WAIT_SEC` has passed). Returns every pid stopped and killed.

    Looking again after the kill finds what a look before it missed: a process
    that was forking as it was stopped, or one that forks and exits over and over
    and kept ahead of the looks (stopping the whole pid namespace at once first,
    as ``LocalSandbox.end_processes`` does, leaves only stopped ones to find)."""
    ended: set[int] = set()
    deadline = time.monotonic() + EXIT_WAIT_SEC
    while True:
        stopped: set[int] = set()
        for _ in range(20):
            pids = find() - stopped - ended
            if not pids:
                break
            _signal_all(pids, signal.SIGSTOP)
            stopped |= pids
        if not stopped:
            return ended
        # opened while they are stopped: each names the process stopped, not one that
        # takes its pid once it is gone
        fds = _pidfds(stopped)
        try:
            killed = _signal_all(stopped, signal.SIGKILL)
            left = max(0.0, deadline - time.monotonic())
            _wait_exited([fd for pid, fd in fds.items() if pid in killed], left)
        finally:
            for fd in fds.values():
                os.close(fd)
        ended |= stopped
        if time.monotonic() >= deadline:
            return ended
