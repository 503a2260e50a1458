"""A listening socket inside another process's network namespace (a container's).

The docker sandbox's model-endpoint relay: a socket bound to
``127.0.0.1:PORT`` *inside* the container's network namespace, accepted on
by the orchestrator and relayed to the real endpoint from the host's network
(:class:`agentkit.sandbox._forward.Relay`). As root, a fresh thread enters
the namespace (``setns`` is per thread), makes the socket and leaves; as
another user (rootless Docker), a short-lived ``nsenter`` into the
container's user and network namespaces makes it and passes it back over a
Unix socket (``SCM_RIGHTS``), as the local sandbox's holder does.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import socket
import subprocess
import sys
import threading

from agentkit._errors import SandboxError
from agentkit.sandbox._forward import recv_fd

__all__ = ["listen_in_netns"]

_CLONE_NEWNET = 0x40000000

#: Runs under nsenter: argv = host, port, fd of the Unix socket to send the listener on.
_BIND_SCRIPT = """\
import array, socket, sys
host, port, chan_fd = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
lo = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
lo.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
lo.bind((host, port))
lo.listen(256)
chan = socket.socket(fileno=chan_fd)
chan.sendmsg([b"L"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [lo.fileno()]))])
"""


def _listen(host: str, port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(256)
    except BaseException:
        sock.close()
        raise
    return sock


def _in_thread(pid: int, host: str, port: int) -> socket.socket:
    out: dict[str, object] = {}

    def work() -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        own = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
        try:
            target = os.open(f"/proc/{pid}/ns/net", os.O_RDONLY | os.O_CLOEXEC)
            try:
                if libc.setns(target, _CLONE_NEWNET) != 0:
                    err = ctypes.get_errno()
                    raise OSError(err, f"setns: {os.strerror(err)}")
                try:
                    out["sock"] = _listen(host, port)
                finally:
                    # Leave the namespace; the thread ends right after either way.
                    libc.setns(own, _CLONE_NEWNET)
            finally:
                os.close(target)
        except BaseException as exc:
            out["error"] = exc
        finally:
            os.close(own)

    thread = threading.Thread(target=work, name=f"agentkit-netns-{pid}", daemon=True)
    thread.start()
    thread.join()
    if "error" in out:
        raise out["error"]  # type: ignore[misc]
    sock = out["sock"]
    assert isinstance(sock, socket.socket)
    return sock


def _with_nsenter(pid: int, host: str, port: int) -> socket.socket:
    nsenter = shutil.which("nsenter") or "/usr/bin/nsenter"
    mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        proc = subprocess.run(
            [
                nsenter,
                "-t",
                str(pid),
                "-U",
                "-n",
                "--preserve-credentials",
                "--",
                os.path.realpath(sys.executable),
                "-I",
                "-S",
                "-c",
                _BIND_SCRIPT,
                host,
                str(port),
                str(theirs.fileno()),
            ],
            pass_fds=[theirs.fileno()],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        theirs.close()
        if proc.returncode != 0:
            raise OSError(proc.stderr.strip() or f"nsenter exited with {proc.returncode}")
        return recv_fd(mine)
    finally:
        theirs.close()
        mine.close()


def listen_in_netns(
    pid: int, host: str, port: int, *, use_nsenter: bool | None = None
) -> socket.socket:
    """A socket listening on ``host:port`` in the network namespace of host ``pid``."""
    if use_nsenter is None:
        use_nsenter = os.geteuid() != 0
    try:
        if use_nsenter:
            return _with_nsenter(pid, host, port)
        return _in_thread(pid, host, port)
    except OSError as exc:
        raise SandboxError(
            f"cannot listen on {host}:{port} inside the container's network (for the model "
            f"endpoint): {exc}"
        ) from None
