"""A warm bookings server: ``mcp`` is imported once per run, each rollout's server is forked.

Starting ``python -m agentkit_fleet.localenv.server`` costs seconds, nearly all
of it importing ``mcp``; a rollout used to wait for that every time. Instead
one process (started with the first rollout, ended with the process that
started it) imports the server module and waits on a Unix socket. A
rollout's MCP client runs a tiny standard-library launcher that hands the
zygote its stdin, stdout and stderr (``SCM_RIGHTS``) and the database paths;
the zygote forks, and the child serves MCP over those descriptors at once,
on its own fresh databases. The launcher exits when the child does.

    python -m agentkit_fleet.localenv.zygote SOCKET_PATH   # prints READY when it accepts
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

__all__ = ["LAUNCHER", "launcher_command", "main", "warm_socket"]

#: The launcher a rollout's MCP client runs (standard library only: ``-I -S`` starts fast).
LAUNCHER = r"""
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.connect(sys.argv[1])
socket.send_fds(s, ["\0".join(sys.argv[2:]).encode()], [0, 1, 2])
while s.recv(1):
    pass
"""

_lock = threading.Lock()
_zygote: tuple[subprocess.Popen[bytes], str] | None = None


def launcher_command(socket_path: str, db: Path, seed: Path) -> list[str]:
    """The stdio command of one rollout's bookings server, served by the zygote."""
    return [
        sys.executable,
        "-I",
        "-S",
        "-c",
        LAUNCHER,
        socket_path,
        "--transport",
        "stdio",
        "--db",
        str(db),
        "--seed",
        str(seed),
    ]


def warm_socket(timeout: float = 120.0) -> str | None:
    """The socket of this process's zygote, started on first use; None where it cannot run.

    Blocking (it waits for the zygote's READY): call it in a worker thread.
    """
    global _zygote
    if not hasattr(socket, "send_fds") or not hasattr(os, "fork"):
        return None
    with _lock:
        if _zygote is not None and _zygote[0].poll() is None:
            return _zygote[1]
        folder = tempfile.mkdtemp(prefix="fleet-zygote-")
        path = os.path.join(folder, "bookings.sock")
        proc = subprocess.Popen(
            [sys.executable, "-m", "agentkit_fleet.localenv.zygote", path],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # a Ctrl-C meant for the run reaches it through its parent
        )
        deadline = time.monotonic() + timeout
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if line.strip() != b"READY" or time.monotonic() > deadline:
            proc.kill()
            proc.wait()
            return None
        _zygote = (proc, path)
        return path


def _serve_child(args: list[str], fds: list[int]) -> int:
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    # deferred: the server imports mcp (seconds); only a zygote loads it, never the harness
    from agentkit_fleet.localenv import server

    try:
        server.main(args)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 1
    except BaseException:
        import traceback

        traceback.print_exc()
        return 1
    return 0


def main(argv: list[str] | None = None) -> None:
    """Serve forks until the process that started this one is gone."""
    args = sys.argv[1:] if argv is None else argv
    path = args[0]
    # deferred: the server imports mcp (seconds); only a zygote loads it, never the harness
    from agentkit_fleet.localenv import server

    # the slow part, done once here: importing mcp, and the imports and schema
    # building of the first server (later ones take milliseconds)
    server.build_server(os.path.join(os.path.dirname(path), "warm-up.sqlite"))

    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children are reaped by the kernel
    parent = os.getppid()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    listener.settimeout(1.0)
    print("READY", flush=True)
    try:
        while os.getppid() == parent:
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            try:
                message, fds, _flags, _addr = socket.recv_fds(conn, 65536, 3)
            except OSError:
                conn.close()
                continue
            if len(fds) != 3:
                for fd in fds:
                    os.close(fd)
                conn.close()
                continue
            pid = os.fork()
            if pid == 0:  # the child: its conn closes when it exits, ending the launcher
                listener.close()
                os._exit(_serve_child(message.decode().split("\0"), fds))
            for fd in fds:
                os.close(fd)
            conn.close()
    finally:
        listener.close()
        Path(path).unlink(missing_ok=True)
        try:
            Path(path).parent.rmdir()
        except OSError:
            pass


if __name__ == "__main__":
    main()
