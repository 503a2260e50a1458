"""The Ray instance the Ray executor starts on this machine when there is no cluster to join.

``RayExecutor(address=None)`` joins the cluster in ``RAY_ADDRESS``, else the
one ``ray start`` last started on this machine; with neither, it starts a
Ray instance of its own for the run (:class:`LocalRay`), and that instance
ends with the run, however the run ends: every process of it is marked with
the driver (``AGENTKIT_RAY_OWNER``), and a guard process kills them all once
the driver is gone, ``kill -9`` included (:mod:`agentkit.executors._ray_guard`).
A cluster agentkit did not start is never touched.

The instance's temp directory (Ray's ``--temp-dir``: its session's logs, which
hold what its workers print, and its Unix sockets) is ``ray`` in a directory of
the driver's own, made for it with :func:`tempfile.mkdtemp` (mode 0700, owned
by the driver's user) and removed with the instance (:func:`ray_temp_dir`): Ray
makes its temp directory and everything in it readable and writable by every
user (0777), so under Ray's default ``/tmp/ray`` another user of the machine
could read the run's logs and add or remove files and sockets there. That
directory is made under ``$TMPDIR`` (else the system's temp directory), or
under ``/tmp`` when that is too long for Ray's socket paths
(``<temp dir>/session_<date>_<pid>/sockets/plasma_store``, at most
:data:`SOCKET_PATH_MAX` bytes; HPC and CI machines often give long ones). A
temp directory the user chose (``RAY_TMPDIR``, or ``_temp_dir`` in the
executor's ``init_options``) is used as it is.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from agentkit._executor import ExecutorError
from agentkit.executors._ray_guard import OWNER_ENV
from agentkit.sandbox._reaper import owner_token, reap_orphans

__all__ = [
    "GUARD_EXIT_WAIT",
    "PROBE_TIMEOUT",
    "SOCKET_PATH_MAX",
    "SOCKET_TAIL",
    "LocalRay",
    "cluster_to_join",
    "ray_temp_dir",
]

#: Seconds a cluster's address ``ray start`` left may take to accept a connection (a
#: hang guard: a cluster on this machine answers at once, a gone one refuses at once).
PROBE_TIMEOUT = 2.0
#: The longest :meth:`LocalRay.close` waits for the guard's last sweep (a hang guard:
#: the sweep waits at most a few seconds for the processes it kills).
GUARD_EXIT_WAIT = 60.0
#: The most bytes a Unix socket's path may have on Linux (``sun_path`` is 108 with its NUL).
SOCKET_PATH_MAX = 107
#: What Ray puts after its temp directory in its longest socket path, at most: the
#: session's directory (the date to the microsecond and the driver's pid, up to the 7
#: digits of Linux's largest), ``sockets/`` and the plasma store's name with an index.
SOCKET_TAIL = len("/session_2026-01-01_00-00-00_000000_4194304/sockets/plasma_store.99")
#: Where the instance's own directory is made when ``$TMPDIR`` is too long for it.
SHORT_TEMP_ROOT = "/tmp"
#: The name :func:`ray_temp_dir` gives the instance's own directory, before its random part.
PRIVATE_PREFIX = "akray-"
#: The bytes the instance's own directory adds to its parent's path
#: (``/akray-XXXXXXXX``: :func:`tempfile.mkdtemp` adds 8 random characters).
PRIVATE_NAME = len(f"/{PRIVATE_PREFIX}") + 8


def ray_temp_dir() -> tuple[str | None, Path | None]:
    """Ray's temp directory for a local instance, and the directory made for it to remove
    with the instance.

    ``(None, None)`` when the user chose one with ``$RAY_TMPDIR`` (Ray uses
    ``$RAY_TMPDIR/ray``); else ``ray`` in a new directory of this user's own (mode
    0700: Ray makes its temp directory and everything in it 0777, and no other user
    can reach that through it), made under ``$TMPDIR`` (else the system's temp
    directory), or under ``/tmp`` when that is too long for Ray's socket paths.

    Raises :class:`ExecutorError` when ``$RAY_TMPDIR`` is too long for Ray's socket
    paths, or the directory cannot be made.
    """
    fits = SOCKET_PATH_MAX - SOCKET_TAIL - len("/ray")
    chosen = os.environ.get("RAY_TMPDIR")
    if chosen:
        length = len(os.fsencode(chosen))
        if length <= fits:
            return None, None
        raise ExecutorError(
            f"RAY_TMPDIR is {length} bytes long ({chosen}), and Ray keeps the sockets of the "
            f"Ray instance it starts under it: their paths would pass the {SOCKET_PATH_MAX} "
            f"bytes a Unix socket's path may have; set RAY_TMPDIR to a directory of at most "
            f"{fits} bytes"
        )
    root = os.environ.get("TMPDIR") or tempfile.gettempdir()
    if len(os.fsencode(root)) > fits - PRIVATE_NAME:
        root = SHORT_TEMP_ROOT
    try:
        made = Path(tempfile.mkdtemp(prefix=PRIVATE_PREFIX, dir=root))
    except OSError as exc:
        raise ExecutorError(
            f"cannot make a directory for the local Ray instance in {root} "
            f"({exc.strerror}); set RAY_TMPDIR to a directory of at most {fits} bytes, "
            "or TMPDIR to one that can hold it"
        ) from None
    return str(made / "ray"), made


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
        #: The directory made for the instance's temp directory (None: the user's choice).
        self.made_dir: Path | None = None

    def start(self, ray: Any, options: dict[str, Any]) -> None:
        """Arm the guard, then start the instance (``ray.init(address="local", **options)``),
        in a temp directory of its own (:func:`ray_temp_dir`) unless ``options`` name one
        (``_temp_dir``)."""
        reap_orphans(OWNER_ENV)
        options = dict(options)
        if "_temp_dir" not in options:
            temp_dir, self.made_dir = ray_temp_dir()
            if temp_dir is not None:
                options["_temp_dir"] = temp_dir
        try:
            self._guard = self._start_guard()
            with _marked(self.mark):
                ray.init(address="local", **options)  # new, whatever RAY_ADDRESS says
        except BaseException:
            if ray.is_initialized():  # it failed after connecting (a refused namespace)
                with contextlib.suppress(Exception):
                    ray.shutdown()
            self.close()
            raise

    def _start_guard(self) -> subprocess.Popen[bytes]:
        env = {k: v for k, v in os.environ.items() if k != OWNER_ENV}
        # the guard imports this agentkit, wherever the driver found it
        here = str(Path(__file__).resolve().parents[2])
        env["PYTHONPATH"] = os.pathsep.join(p for p in (here, env.get("PYTHONPATH")) if p)
        try:
            guard = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "agentkit.executors._ray_guard",
                    self.mark,
                    *([str(self.made_dir)] if self.made_dir is not None else []),
                ],
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
        """Let the guard kill what is left of the instance, and wait until it has; then
        remove the directory made for the instance, if any (the guard removes it too,
        after a driver that was killed)."""
        guard, self._guard = self._guard, None
        if guard is not None:
            if guard.stdin is not None:
                guard.stdin.close()
            with contextlib.suppress(subprocess.TimeoutExpired):
                guard.wait(timeout=GUARD_EXIT_WAIT)
        made, self.made_dir = self.made_dir, None
        if made is not None:
            shutil.rmtree(made, ignore_errors=True)


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
