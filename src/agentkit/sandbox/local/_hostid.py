"""A host uid/gid of its own for every sandbox when agentkit runs as root.

By default a user namespace maps the sandbox's uid 0 to the caller's uid.
When the caller is root of the host, that would make the agent's "root" the
host's root: files the kernel checks by owner (``/proc/sys/kernel/core_pattern``,
``/proc/sys/vm/drop_caches``) would be writable from inside, which is a way
out of every namespace. So whenever this process is root (and its uid 0 is
not itself an unprivileged uid of an outer namespace), each sandbox's user
namespace maps uid/gid 0 inside to an unused host id of its own, far above
real accounts (``BASE_ID`` + a per-sandbox offset), and every command runs as
that id. Inside-root is then an unprivileged uid on the host in every
configuration; where no such id can be mapped, the sandbox refuses to start.
A separate id also makes RLIMIT_NPROC apply (the kernel never enforces it on
host uid 0; it counts per user namespace and uid, so each sandbox has its own
count).

Bubblewrap's own setup still runs as host root (so it can reach the
rollout's files wherever they are); host root is mapped to ``nobody`` inside
so that setup works, and every command leaves it at once (nsenter switches
to the namespace's uid 0). The orchestrator (root) keeps full access to the
files; what it creates in the sandbox is handed to the sandbox's id so
commands can still write there.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterable
from pathlib import Path

from agentkit._errors import SandboxUnavailableError

__all__ = [
    "BASE_ID",
    "NOBODY",
    "allocate_id",
    "chown_tree",
    "is_initial_root",
    "make_parents",
    "needs_own_id",
    "write_id_maps",
]

#: First host id used for sandboxes; offsets stay below 2**31 (and below
#: the ranges systemd reserves near it).
BASE_ID = 2_000_000_000
#: The id host root (bubblewrap's setup, the namespace's pid 1) has inside.
NOBODY = 65534
_PID_BITS = 16
_COUNTER_BITS = 11
_counter = itertools.count()


def is_initial_root() -> bool:
    """True when this process is uid 0 of the host (the initial user namespace)."""
    if os.geteuid() != 0:
        return False
    try:
        with open("/proc/self/uid_map") as f:
            fields = f.read().split()
    except OSError:
        return False
    return fields[:3] == ["0", "0", "4294967295"]


def _id_map() -> list[tuple[int, int, int]]:
    """This process's uid map: (inside, outside, count) ranges."""
    with open("/proc/self/uid_map") as f:
        rows = [line.split() for line in f if line.strip()]
    return [(int(a), int(b), int(c)) for a, b, c in rows]


def needs_own_id(ids: tuple[int, int] | None = None) -> bool:
    """True when sandboxes must get a host id of their own (this process is root).

    False when this process is not uid 0, or when its uid 0 is an unprivileged
    uid of the outer namespace (a rootless container): the caller's uid is
    then safe to map. Raises :class:`SandboxUnavailableError` when this
    process is root but cannot map the ids sandboxes would need (``ids``:
    (first, count) instead of the host-userland sandboxes' range).
    """
    if os.geteuid() != 0:
        return False
    try:
        ranges = _id_map()
    except (OSError, ValueError) as exc:
        raise SandboxUnavailableError(
            f"agentkit runs as root but cannot read /proc/self/uid_map ({exc}); the local "
            "sandbox refuses to start rather than give the agent the host's root"
        ) from None
    outer = next((out for inside, out, count in ranges if inside <= 0 < inside + count), 0)
    if outer != 0:
        return False
    first, top = (
        (ids[0], ids[0] + ids[1])
        if ids
        else (BASE_ID, BASE_ID + (1 << (_PID_BITS + _COUNTER_BITS)))
    )
    if not any(inside <= first and top <= inside + count for inside, _, count in ranges):
        raise SandboxUnavailableError(
            "agentkit runs as root, and the local sandbox would give the agent the host's root: "
            f"it needs host ids {first}..{top - 1} to map the sandbox's root to an "
            "unprivileged uid, and this user namespace does not map them. Run agentkit as an "
            "unprivileged user, or in a namespace that maps those ids"
        )
    return True


def allocate_id() -> int:
    """A host id for one sandbox: distinct per sandbox of this process (up to 2048
    alive at once) and, by the pid, from other agentkit processes."""
    pid_part = os.getpid() & ((1 << _PID_BITS) - 1)
    return BASE_ID + (pid_part << _COUNTER_BITS | next(_counter) & ((1 << _COUNTER_BITS) - 1))


def write_id_maps(pid: int, host_id: int | None, *, count: int = 1) -> None:
    """Write the maps of ``pid``'s new user namespace (made by bubblewrap, which waits).

    ``host_id`` given (agentkit is root): ids 0..``count``-1 inside are
    ``host_id``... outside, and host root (bubblewrap's own setup) is nobody
    when ``count`` is 1, else the id just above the range. None: uid/gid 0
    inside is this process's own uid/gid (setgroups is then denied, as the
    kernel requires of an unprivileged map).
    """
    if host_id is not None:
        text = f"0 {host_id} {count}\n{NOBODY if count == 1 else count} 0 1\n"
        maps = {"uid_map": text, "gid_map": text}
    else:
        with open(f"/proc/{pid}/setgroups", "w") as f:
            f.write("deny")
        maps = {"uid_map": f"0 {os.geteuid()} 1\n", "gid_map": f"0 {os.getegid()} 1\n"}
    for name, text in maps.items():
        with open(f"/proc/{pid}/{name}", "w") as f:
            f.write(text)


def chown_tree(root: Path, host_id: int) -> None:
    """Give ``root`` and everything under it to ``host_id`` (never following symlinks)."""
    for _, _, files, dirfd in os.fwalk(root, follow_symlinks=False):
        os.chown(dirfd, host_id, host_id)
        for name in files:
            os.chown(name, host_id, host_id, dir_fd=dirfd, follow_symlinks=False)


def make_parents(fs_root: Path, paths: Iterable[str]) -> None:
    """Create (mode 0755) the directories above each bind target under ``fs_root``.

    Bubblewrap would create them mode 0700 as host root, which the sandbox's
    own id could not traverse.
    """
    for path in paths:
        current = fs_root
        for part in Path(path).parts[1:-1]:
            current = current / part
            if not current.is_symlink() and not current.exists():
                current.mkdir(mode=0o755)
