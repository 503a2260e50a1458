"""The Ray instance the Ray executor starts on this machine when there is no cluster to join.

``RayExecutor(address=None)`` joins the cluster in ``RAY_ADDRESS``, else the
one ``ray start`` last started on this machine; with neither, it starts a
Ray instance of its own for the run (:class:`LocalRay`), and that instance
ends with the run, however the run ends: every process of it is marked with
the driver (``AGENTKIT_RAY_OWNER``), and a guard process kills them all once
the driver is gone, ``kill -9`` included (:mod:`agentkit.executors._ray_guard`).
A cluster agentkit did not start is never touched.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from agentkit._executor import ExecutorError
from agentkit.executors._ray_guard import OWNER_ENV
from agentkit.sandbox._reaper import owner_token, reap_orphans

__all__ = ["GUARD_EXIT_WAIT", "PROBE_TIMEOUT", "LocalRay", "cluster_to_join"]

#: Seconds a cluster's address ``ray start`` left may take to accept a connection (a
#: hang guard: a cluster on this machine answers at once, a gone one refuses at once).
PROBE_TIMEOUT = 2.0
#: The longest :meth:`LocalRay.close` waits for the guard's last sweep (a hang guard:
#: the sweep waits at most a few seconds for the processes it kills).
GUARD_EXIT_WAIT = 60.0


def cluster_to_join() -> str | None:
    """The address ``RayExecutor(address=None)`` joins: ``RAY_ADDRESS``, else the address
    ``ray start`` left on this machine, if its cluster still answers there; None: start a
    Ray instance here.

    (Not Ray's ``address="auto"``, which also joins any Ray it finds running here, such
    as another program's own instance, which may end or refuse this driver at any time;
    nor an address left by a cluster that is gone, which Ray would try to reach for
    minutes.)
    """
    address = os.environ.get("RAY_ADDRESS", "").strip()
    if address:
        return address
    try:
        from ray._private.utils import read_ray_address
    except ImportError:  # a Ray without it: only RAY_ADDRESS names a cluster
        return None
    found = str(read_ray_address() or "").strip()
    return found if found and _answers(found) else None


def _answers(address: str) -> bool:
    """Whether something accepts connections at ``HOST:PORT`` (a cluster's GCS)."""
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=PROBE_TIMEOUT):
            return True
    except (OSError, ValueError):
        return False


class LocalRay:
    """A Ray instance started here for one driver, and the guard that ends it with the driver.

    :meth:`start` reaps what earlier drivers killed together with their guard left,
    starts the guard, then ``ray.init`` with the driver's mark in the environment
    every process of the instance inherits; :meth:`close` (after ``ray.shutdown``)
    lets the guard sweep what is left and waits for it.
    """

    def __init__(self) -> None:
        self.mark = owner_token()
        self._guard: subprocess.Popen[bytes] | None = None

    def start(self, ray: Any, options: dict[str, Any]) -> None:
        """Arm the guard, then start the instance (``ray.init(address="local", **options)``)."""
        reap_orphans(OWNER_ENV)
        self._guard = self._start_guard()
        try:
            with _marked(self.mark):
                ray.init(address="local", **options)  # new, whatever RAY_ADDRESS says
        except BaseException:
            self.close()
            raise

    def _start_guard(self) -> subprocess.Popen[bytes]:
        env = {k: v for k, v in os.environ.items() if k != OWNER_ENV}
        # the guard imports this agentkit, wherever the driver found it
        here = str(Path(__file__).resolve().parents[2])
        env["PYTHONPATH"] = os.pathsep.join(p for p in (here, env.get("PYTHONPATH")) if p)
        try:
            guard = subprocess.Popen(
                [sys.executable, "-m", "agentkit.executors._ray_guard", self.mark],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                env=env,
                start_new_session=True,  # a signal to the driver's process group spares it
            )
        except OSError as exc:
            raise ExecutorError(f"cannot start the local Ray instance's guard: {exc}") from None
        assert guard.stdout is not None
        with guard.stdout:
            watching = guard.stdout.readline()
        if watching != b"watching\n":
            if guard.stdin is not None:
                guard.stdin.close()
            code = guard.wait()
            raise ExecutorError(
                f"the local Ray instance's guard did not start (exit code {code}): "
                f"{sys.executable} -m agentkit.executors._ray_guard"
            )
        return guard

    def close(self) -> None:
        """Let the guard kill what is left of the instance, and wait until it has."""
        guard, self._guard = self._guard, None
        if guard is None:
            return
        if guard.stdin is not None:
            guard.stdin.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            guard.wait(timeout=GUARD_EXIT_WAIT)


@contextlib.contextmanager
def _marked(mark: str) -> Iterator[None]:
    """``AGENTKIT_RAY_OWNER=mark`` in this process's environment meanwhile (for the
    processes ``ray.init`` starts, and theirs)."""
    before = os.environ.get(OWNER_ENV)
    os.environ[OWNER_ENV] = mark
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(OWNER_ENV, None)
        else:
            os.environ[OWNER_ENV] = before
