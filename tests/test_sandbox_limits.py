"""Every resource limit the local sandbox claims, exercised for real."""

from __future__ import annotations

import asyncio
import os
import sys
import time
from pathlib import Path

import pytest

from agentkit._sandbox import ExecutionHints
from agentkit.testing.sandbox_fixtures import (
    host_pids_with_arg,
    requires_bwrap,
    unique_sleep_arg,
    wait_gone,
    wait_present,
)

pytestmark = [pytest.mark.anyio, requires_bwrap]


async def test_file_size_limit(sandbox_factory) -> None:
    sb = await sandbox_factory("local", max_file_size_mb=1)
    assert (await sb.exec("head -c 500000 /dev/zero > /tmp/small")).ok
    r = await sb.exec("head -c 3000000 /dev/zero > /tmp/big")
    assert not r.ok
    assert (sb.fs_root / "tmp/big").stat().st_size <= 1024 * 1024


async def test_memory_limit(sandbox_factory) -> None:
    sb = await sandbox_factory("local", max_memory_mb=200)
    ok = await sb.exec(["python3", "-c", "b = bytearray(20 * 2**20); print('ok')"])
    assert ok.stdout == "ok\n", ok.stderr
    r = await sb.exec(["python3", "-c", "b = bytearray(400 * 2**20); print('allocated')"])
    assert "MemoryError" in r.stderr and "allocated" not in r.stdout


#: Forks until the kernel refuses (or ``total`` children), each child exec'ing
#: ``sleep $SLEEP_ARG``; prints how many started and the error, then waits for a line on stdin.
FORK_LOOP = """
import os, sys
total, arg = int(sys.argv[1]), os.environ["SLEEP_ARG"]
started, error = 0, "none"
for _ in range(total):
    try:
        pid = os.fork()
    except OSError as exc:
        error = type(exc).__name__
        break
    if pid == 0:
        try:
            os.execv("/usr/bin/sleep", ["sleep", arg])
        finally:
            os._exit(1)
    started += 1
print(started, error, flush=True)
sys.stdin.readline()
"""


async def _count_sleeps(arg: str, expected: int) -> int:
    """How many host processes run ``sleep arg``, waiting (briefly) for ``expected``."""
    deadline = time.monotonic() + 5
    while len(found := host_pids_with_arg(arg)) != expected and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    return len(found)


async def _fill(sb, total: int, arg: str):  # type: ignore[no-untyped-def]
    """Start the fork loop in ``sb``; return (process, children started, error name)."""
    proc = await sb.start(["python3", "-c", FORK_LOOP, str(total)], env={"SLEEP_ARG": arg})
    async for line in proc.stdout_lines():
        started, error = line.split()
        return proc, int(started), error
    raise AssertionError((await proc.wait(5)).stderr)


async def test_process_count_limit(sandbox_factory) -> None:
    """Enforced as any user, root included (which gets the sandbox its own host uid)."""
    sb = await sandbox_factory("local", max_processes=12)
    arg = unique_sleep_arg()
    proc, started, error = await _fill(sb, 60, arg)
    assert 5 <= started < 12, started
    assert error == "BlockingIOError"  # EAGAIN: "Resource temporarily unavailable"
    assert await _count_sleeps(arg, started) == started
    # While full, a new command still starts but cannot fork: the count is the sandbox's.
    r = await sb.exec(["python3", "-c", "import os; os.fork()"], timeout=20)
    assert "BlockingIOError" in r.stderr
    await sb.close()
    assert await wait_gone(arg) == []
    assert (await proc.wait(5)).exit_code != 0  # killed by close


async def test_process_count_is_per_sandbox(sandbox_factory) -> None:
    first, second = [await sandbox_factory("local", max_processes=12) for _ in range(2)]
    arg = unique_sleep_arg()
    _, started_first, _ = await _fill(first, 60, arg)
    _, started_second, error = await _fill(second, 60, arg)  # while the first is full
    assert started_second == started_first and error == "BlockingIOError"
    assert await _count_sleeps(arg, 2 * started_first) == 2 * started_first
    if os.geteuid() == 0:
        assert first.host_id != second.host_id


@pytest.mark.skipif(os.geteuid() != 0, reason="the sandbox's own host uid is used only as root")
async def test_own_host_uid_keeps_every_feature_working(sandbox_factory, tmp_path: Path) -> None:
    """As root, max_processes moves the sandbox to its own host uid: files, binds,
    the model endpoint, timeouts and close still work as without it."""
    served = _serve_once()
    given = tmp_path / "given.txt"
    given.write_text("given\n")
    upload = tmp_path / "upload"
    (upload / "sub").mkdir(parents=True)
    (upload / "sub" / "f.txt").write_text("uploaded\n")
    prefix = os.path.realpath(sys.base_prefix)  # often under /root, mode 0700 on the host
    hints = ExecutionHints(paths={"/app/given.txt": str(given)})
    sb = await sandbox_factory(
        "local",
        hints=hints,
        max_processes=64,
        ro_binds=[prefix],
        model_endpoint=f"http://127.0.0.1:{served.port}/v1",
    )
    assert sb.host_id is not None and sb.host_id >= 2_000_000_000
    await sb.upload(upload, "/tests")
    script = (
        "id -u; id -G; echo more >> /app/given.txt; echo more >> /tests/sub/f.txt; "
        "mkdir -p /root/.cache /opt/x; echo '10.0.0.1 extra' >> /etc/hosts; "
        "echo v > /logs/verifier/reward.txt; touch /tmp/t; "
        "grep -E '^Cap(Eff|Prm|Bnd)' /proc/self/status"
    )
    r = await sb.exec(script)
    assert r.ok, r.stderr
    lines = r.stdout.splitlines()
    assert lines[:2] == ["0", "0"]
    assert all(line.endswith("0000000000000000") for line in lines[2:])
    for path in ("/app/given.txt", "/tests/sub/f.txt", "/logs/verifier/reward.txt", "/opt/x"):
        assert sb.host_path(path).stat().st_uid == sb.host_id, path
    await sb.download("/tests", tmp_path / "down")
    assert (tmp_path / "down" / "sub" / "f.txt").read_text() == "uploaded\nmore\n"
    assert (await sb.exec("cat /app/given.txt")).stdout == "given\nmore\n"
    # The host's own python, bound read-only from a directory only root can enter.
    exe = os.path.realpath(sys.executable)
    r = await sb.exec([exe, "-c", "print('host python')"])
    assert r.stdout == "host python\n", r.stderr
    # The model endpoint is forwarded; the rest of the host's loopback is not.
    fetch = "import urllib.request as u, sys; print(u.urlopen(sys.argv[1], timeout=5).read())"
    r = await sb.exec(["python3", "-c", fetch, f"http://127.0.0.1:{served.port}/v1/x"])
    assert "hello /v1/x" in r.stdout, r.stderr
    # Still unable to touch what the host's root owns.
    assert not (await sb.exec("touch /usr/evil")).ok
    arg = unique_sleep_arg()
    r = await sb.exec(
        f"sleep {arg} & echo $! >> started; sleep {arg} & echo $! >> started; wait", timeout=0.5
    )
    assert r.timed_out
    assert len(sb.host_path(f"{sb.workdir}/started").read_text().split()) == 2  # both ran
    assert await wait_gone(arg) == []
    arg = unique_sleep_arg()
    assert (await sb.exec(f"sleep {arg} > /dev/null 2>&1 &")).ok
    assert await wait_present(arg)
    await sb.close(remove=True)
    assert await wait_gone(arg) == []
    assert not sb.root.exists()
    served.close()


class _Served:
    def __init__(self) -> None:
        import http.server
        import threading

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                body = f"hello {self.path}".encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _serve_once() -> _Served:
    return _Served()


async def test_cpu_time_limit(sandbox_factory) -> None:
    sb = await sandbox_factory("local", max_cpu_seconds=1)
    r = await sb.exec(["python3", "-c", "while True: pass"], timeout=30)
    assert not r.timed_out  # killed by SIGXCPU well before the wall-clock timeout
    assert r.exit_code != 0


async def test_open_files_limit(sandbox_factory) -> None:
    sb = await sandbox_factory("local", max_open_files=32)
    code = "fs = [open('/dev/null') for _ in range(100)]; print('opened')"
    r = await sb.exec(["python3", "-c", code])
    assert "Too many open files" in r.stderr and "opened" not in r.stdout
