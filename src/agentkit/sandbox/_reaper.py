"""What a sandbox leaves behind names its owner, so that what an orchestrator that died
left can be found and removed.

Every bubblewrap process a local sandbox starts carries
``AGENTKIT_SANDBOX_OWNER=<pid>:<start time>`` in its environment: the
orchestrator that owns it. A sandbox normally dies with its orchestrator
(the holder's lifeline, see ``local/_bwrap.LIFELINE``), but bubblewrap has a window
at start-up where it cannot: if its outer process is killed before it
releases its child, the child waits forever. :func:`reap_orphans` kills
every such process whose owner is gone; it runs once per process, before its
first local sandbox starts, and from ``agentkit sandbox prune``. The Ray
executor marks the processes of a local Ray instance it starts the same way
(its own variable, ``AGENTKIT_RAY_OWNER``) and reaps them with it too.

What agentkit makes in a container engine (the docker sandbox's containers,
networks, compose services and fork images; the containers the local sandbox
exports an image's root through) carries :data:`LABEL` and its owner the same
way (:func:`owner_labels`: host name, pid and start time); the docker
sandbox's prune (``docker/_engine.py``) removes those whose owner is gone
(:func:`owner_alive`).
"""

from __future__ import annotations

import os
import socket
import threading

from agentkit.sandbox._proctree import kill_tree, start_time

__all__ = [
    "LABEL",
    "OWNER_ENV",
    "OWNER_LABEL",
    "ROLLOUT_LABEL",
    "owner_alive",
    "owner_labels",
    "owner_token",
    "reap_orphans",
    "reap_orphans_once",
    "reaped",
]

#: The environment variable marking a sandbox's processes with their owner.
OWNER_ENV = "AGENTKIT_SANDBOX_OWNER"
#: Set on everything agentkit's sandboxes make in a container engine.
LABEL = "org.agentkit.sandbox"
#: Who made it: ``host:pid:start time`` (see :func:`owner_labels`).
OWNER_LABEL = "org.agentkit.owner"
#: For which rollout.
ROLLOUT_LABEL = "org.agentkit.rollout"

_reaped = False
_lock = threading.Lock()


def owner_token(pid: int | None = None) -> str:
    """``<pid>:<start time>`` of this process (or ``pid``): unique even when pids are reused."""
    pid = os.getpid() if pid is None else pid
    return f"{pid}:{start_time(pid) or 0}"


def _alive(token: str) -> bool:
    pid, _, start = token.partition(":")
    try:
        return start_time(int(pid)) == start
    except ValueError:
        return False


def _owner_of(pid: int, variable: str) -> str | None:
    prefix = f"{variable}=".encode()
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            env = f.read()
    except OSError:
        return None
    for item in env.split(b"\0"):
        if item.startswith(prefix):
            return item[len(prefix) :].decode(errors="replace")
    return None


def reap_orphans(variable: str = OWNER_ENV) -> int:
    """Kill every sandbox process whose orchestrator is gone; return how many trees.

    ``variable``: the environment variable that names a process's owner (default the
    sandboxes' :data:`OWNER_ENV`)."""
    orphans = []
    me = os.getpid()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        token = _owner_of(int(entry), variable)
        if token is not None and not _alive(token):
            orphans.append(int(entry))
    for pid in orphans:
        kill_tree([pid])
    return len(orphans)


def reaped() -> bool:
    """True once :func:`reap_orphans_once` has run in this process."""
    return _reaped


def reap_orphans_once() -> None:
    """:func:`reap_orphans`, the first time it is called in this process."""
    global _reaped
    with _lock:
        if _reaped:
            return
        _reaped = True
    reap_orphans()


def owner_labels(rollout_id: str) -> dict[str, str]:
    """The labels of a sandbox this process makes: who owns it, for which rollout."""
    pid = os.getpid()
    return {
        LABEL: "docker",
        OWNER_LABEL: f"{socket.gethostname()}:{pid}:{start_time(pid) or '?'}",
        ROLLOUT_LABEL: rollout_id,
    }


def owner_alive(owner: str) -> bool:
    """True when the process named by an owner label still runs (or is on another host)."""
    host, _, rest = owner.partition(":")
    pid_text, _, start = rest.partition(":")
    if host != socket.gethostname():
        return True  # not ours to judge
    try:
        pid = int(pid_text)
    except ValueError:
        return False
    current = start_time(pid)
    return current is not None and (start in ("", "?") or current == start)
