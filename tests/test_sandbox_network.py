"""Network isolation and the model-endpoint forwarder, against real loopback servers."""

from __future__ import annotations

import asyncio
import http.server
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from agentkit._sandbox import ExecutionHints
from agentkit.sandbox import SandboxError, SandboxUnavailableError
from agentkit.sandbox._forward import Relay, parse_endpoint
from agentkit.sandbox.local import LocalSandbox, _lifecycle
from agentkit.testing.sandbox_fixtures import (
    host_pids_with_arg,
    need_slirp4netns,
    outward_address,
    requires_bwrap,
)

pytestmark = [pytest.mark.anyio, requires_bwrap]

FETCH = """
import sys, urllib.request
try:
    with urllib.request.urlopen(sys.argv[1], timeout=3) as r:
        print(r.status, r.read().decode())
except Exception as exc:
    print("error", type(exc).__name__)
"""


#: Fetch a URL once its server is up (a bound: 200 tries), printing the body.
FETCH_WHEN_UP = """
import sys, time, urllib.request
for _ in range(200):
    try:
        print(urllib.request.urlopen(sys.argv[1], timeout=3).read().decode(), end="")
        break
    except OSError:
        time.sleep(0.05)
"""


class _Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = f"hello from {self.server.server_address[1]}{self.path}".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def _serve(address: str = "127.0.0.1") -> Iterator[int]:
    server = http.server.ThreadingHTTPServer((address, 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def model_port() -> Iterator[int]:
    yield from _serve()


@pytest.fixture
def other_port() -> Iterator[int]:
    yield from _serve()


@pytest.fixture
def host_address() -> str:
    """This machine's address on its outward interface (not a loopback one)."""
    return outward_address()


@pytest.fixture
def outward_port(host_address: str) -> Iterator[int]:
    """A server on every address of the host, its loopback and its outward one."""
    yield from _serve("0.0.0.0")


async def fetch(sb, url: str) -> str:  # type: ignore[no-untyped-def]
    r = await sb.exec(["python3", "-c", FETCH, url], timeout=20)
    return r.stdout.strip()


async def test_no_network_by_default(sandbox_factory, other_port: int) -> None:
    sb = await sandbox_factory("local")
    assert (await fetch(sb, f"http://127.0.0.1:{other_port}/x")).startswith("error")
    r = await sb.exec("cat /sys/class/net/*/operstate 2>/dev/null; ls /sys 2>&1 | head -1")
    assert "up" not in r.stdout.split()


async def test_model_endpoint_is_forwarded_and_nothing_else(
    sandbox_factory, model_port: int, other_port: int
) -> None:
    endpoint = f"http://127.0.0.1:{model_port}/v1"
    sb = await sandbox_factory("local", model_endpoint=endpoint)
    assert await fetch(sb, f"{endpoint}/models") == f"200 hello from {model_port}/v1/models"
    assert (await fetch(sb, f"http://127.0.0.1:{other_port}/x")).startswith("error")
    # Several connections, and the endpoint via localhost too.
    for _ in range(3):
        assert (await fetch(sb, f"http://127.0.0.1:{model_port}/a")).startswith("200")


#: A hostile holder: says ready and keeps its end of the channel, but never sends the socket.
_SILENT_HOLDER = """\
import os, sys
os.write(1, b"ready\\n")
os.execv("/bin/sh", ["sh", "-c", sys.argv[4]])
"""


async def test_a_holder_that_never_sends_the_socket_fails_the_start(
    model_port: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Bounded by the start's timeout (here 1 s), not a wait forever on the channel."""
    monkeypatch.setattr(_lifecycle, "HOLDER_SCRIPT", _SILENT_HOLDER)
    monkeypatch.setattr(_lifecycle, "_START_TIMEOUT_SEC", 1.0)
    sb = LocalSandbox(root=tmp_path / "sb", model_endpoint=f"http://127.0.0.1:{model_port}/v1")
    with anyio.fail_after(60):  # a hang guard only: the start's own bound is 1 s
        with pytest.raises(SandboxError, match=r"sent no socket \(its holder did not within 1 s\)"):
            await sb.setup()
    await sb.close()


async def test_localhost_endpoint(sandbox_factory, model_port: int) -> None:
    sb = await sandbox_factory("local", model_endpoint=f"http://localhost:{model_port}/v1")
    assert (await fetch(sb, f"http://localhost:{model_port}/v1")).startswith("200")


async def test_network_only_when_task_asks_and_user_allows(
    sandbox_factory, outward_port: int, host_address: str
) -> None:
    need_slirp4netns()
    url = f"http://{host_address}:{outward_port}/open"
    asks = ExecutionHints(network=True)
    refused = await sandbox_factory("local", hints=asks)
    assert (await fetch(refused, url)).startswith("error")
    not_asked = await sandbox_factory("local", allow_network=True)
    assert (await fetch(not_asked, url)).startswith("error")
    allowed = await sandbox_factory("local", hints=asks, allow_network=True)
    assert await fetch(allowed, url) == f"200 hello from {outward_port}/open"


async def test_allowed_network_is_the_sandboxs_own(
    sandbox_factory, outward_port: int, host_address: str
) -> None:
    """As in a Docker container: traffic goes out, the host's loopback is out of
    reach, and what a task serves is its own (two rollouts on one port)."""
    need_slirp4netns()
    asks = ExecutionHints(network=True)
    a = await sandbox_factory("local", hints=asks, allow_network=True)
    b = await sandbox_factory("local", hints=asks, allow_network=True)
    assert a.host_network is False
    assert (await fetch(a, f"http://{host_address}:{outward_port}/out")).startswith("200")
    assert (await fetch(a, f"http://127.0.0.1:{outward_port}/lo")).startswith("error")
    assert (await fetch(a, f"http://10.0.2.2:{outward_port}/gw")).startswith("error")
    assert (await a.exec("cat /etc/resolv.conf")).stdout == "nameserver 10.0.2.3\n"
    for sb, text in ((a, "from a"), (b, "from b")):
        # Port 80, as root without capabilities: allowed in its own namespace.
        await sb.exec(f"mkdir -p /srv/www && echo {text} > /srv/www/index.html")
        await sb.start("cd /srv/www && exec python3 -m http.server 80")
    for sb, text in ((a, "from a"), (b, "from b")):
        got = await sb.exec(["python3", "-c", FETCH_WHEN_UP, "http://127.0.0.1/"], timeout=30)
        assert got.stdout.strip() == text


async def test_host_network_mode_shares_the_hosts(sandbox_factory, other_port: int) -> None:
    asks = ExecutionHints(network=True)
    sb = await sandbox_factory("local", hints=asks, allow_network=True, network_mode="host")
    assert sb.host_network is True
    url = f"http://127.0.0.1:{other_port}/shared"
    assert await fetch(sb, url) == f"200 hello from {other_port}/shared"


async def test_model_endpoint_with_network_allowed(
    sandbox_factory, model_port: int, outward_port: int, host_address: str
) -> None:
    """The host's loopback is out of reach, yet the endpoint there works at its URL."""
    need_slirp4netns()
    endpoint = f"http://127.0.0.1:{model_port}/v1"
    sb = await sandbox_factory(
        "local", hints=ExecutionHints(network=True), allow_network=True, model_endpoint=endpoint
    )
    assert await fetch(sb, f"{endpoint}/models") == f"200 hello from {model_port}/v1/models"
    assert (await fetch(sb, f"http://{host_address}:{outward_port}/x")).startswith("200")


async def test_network_mode_private_needs_slirp4netns(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tools = tmp_path / "bin"
    tools.mkdir()
    for name in ("bwrap", "nsenter", "setpriv", "prlimit"):
        found = shutil.which(name)
        assert found is not None
        (tools / name).symlink_to(found)
    monkeypatch.setenv("PATH", str(tools))
    asks = ExecutionHints(network=True)
    with pytest.raises(SandboxUnavailableError, match="apt-get install slirp4netns"):
        LocalSandbox(root=tmp_path / "r", hints=asks, allow_network=True, network_mode="private")
    # auto: the host's network then, as documented.
    sb = LocalSandbox(root=tmp_path / "r", hints=asks, allow_network=True)
    assert sb.host_network is True
    with pytest.raises(SandboxError, match="network_mode='open': expected auto, private or host"):
        LocalSandbox(root=tmp_path / "r", network_mode="open")  # type: ignore[arg-type]


async def test_a_failing_slirp4netns_is_a_clear_error_that_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tools = tmp_path / "bin"
    tools.mkdir()
    fake = tools / "slirp4netns"  # one that fails as on a kernel without tap devices
    fake.write_text("#!/bin/sh\necho 'open(\"/dev/net/tun\"): No such device' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tools}:{os.environ['PATH']}")
    root = tmp_path / "rollout"
    sb = LocalSandbox(
        root=root, hints=ExecutionHints(network=True), allow_network=True, network_mode="private"
    )
    with pytest.raises(SandboxError, match=r"slirp4netns could not .*No such device"):
        await sb.setup()
    await sb.close()
    assert host_pids_with_arg(str(root / "fs")) == []  # no bubblewrap left


@pytest.mark.needs_root
async def test_slirp4netns_as_root_without_unshare_is_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As root slirp4netns starts under util-linux's unshare (why: the last test here);
    without it, an error that names the package, and nothing left."""
    need_slirp4netns()
    if os.geteuid() != 0:
        pytest.skip("root only: as another user slirp4netns starts without unshare")
    tools = tmp_path / "bin"
    tools.mkdir()
    for name in ("bwrap", "nsenter", "setpriv", "prlimit", "slirp4netns"):
        found = shutil.which(name)
        assert found is not None
        (tools / name).symlink_to(found)
    monkeypatch.setenv("PATH", str(tools))
    root = tmp_path / "rollout"
    sb = LocalSandbox(
        root=root, hints=ExecutionHints(network=True), allow_network=True, network_mode="private"
    )
    with pytest.raises(SandboxUnavailableError, match="unshare from util-linux"):
        await sb.setup()
    await sb.close()
    assert host_pids_with_arg(str(root / "fs")) == []  # no bubblewrap left


async def test_slirp4netns_goes_with_the_sandbox(sandbox_factory) -> None:  # type: ignore[no-untyped-def]
    need_slirp4netns()
    sb = await sandbox_factory("local", hints=ExecutionHints(network=True), allow_network=True)
    slirp = sb._slirp.pid
    assert os.path.exists(f"/proc/{slirp}")
    await sb.close()
    assert not os.path.exists(f"/proc/{slirp}") or _is_zombie_or_gone(slirp)


def _is_zombie_or_gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def test_slirp4netns_dies_with_a_killed_orchestrator(tmp_path: Path) -> None:
    """SIGKILL the process that started a sandbox with network: its slirp4netns ends."""
    need_slirp4netns()
    script = f"""
import asyncio, sys
from pathlib import Path
from agentkit._sandbox import ExecutionHints
from agentkit.sandbox.local import LocalSandbox

async def main():
    sb = LocalSandbox(root=Path({str(tmp_path / "r")!r}), hints=ExecutionHints(network=True),
                      allow_network=True, network_mode="private")
    await sb.setup()
    print(sb._slirp.pid, flush=True)
    await asyncio.sleep(600)

asyncio.run(main())
"""
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE)
    try:
        assert proc.stdout is not None
        slirp = int(proc.stdout.readline())
        assert os.path.exists(f"/proc/{slirp}")
    finally:
        proc.kill()
        proc.wait()
    for _ in range(500):  # a bound, not a timing check
        if _is_zombie_or_gone(slirp):
            break
        time.sleep(0.02)
    assert _is_zombie_or_gone(slirp), "slirp4netns outlived its orchestrator"


#: Run in a mount namespace of its own (argv: a directory, the sandbox's root): mounts a
#: shared tmpfs with a tmpfs below it, as Docker's data root holds its containers' root file
#: systems, then starts a sandbox whose slirp4netns builds its own sandbox (ready is said
#: after it has detached its copy of the mounts) and says whether the one below is still there.
SHARED_MOUNT_SURVIVES = """
import asyncio, os, subprocess, sys
from pathlib import Path
from agentkit._sandbox import ExecutionHints
from agentkit.sandbox.local import LocalSandbox

shared = Path(sys.argv[1])
below = shared / "below"
subprocess.run(["mount", "-t", "tmpfs", "agentkit-shared", str(shared)], check=True)
subprocess.run(["mount", "--make-shared", str(shared)], check=True)
below.mkdir()
subprocess.run(["mount", "-t", "tmpfs", "agentkit-below", str(below)], check=True)


async def main():
    sb = LocalSandbox(root=Path(sys.argv[2]), hints=ExecutionHints(network=True),
                      allow_network=True, network_mode="private")
    await sb.setup()
    try:
        print("mounted" if os.path.ismount(below) else "gone", flush=True)
    finally:
        await sb.close()

asyncio.run(main())
"""


@pytest.mark.needs_root
def test_slirp4netns_leaves_the_hosts_mounts_alone(tmp_path: Path) -> None:
    """slirp4netns's own sandbox detaches its copy of the mounts: as root, that must not
    unmount ours (the mounts below a shared one, as a running Docker container's root file
    system is below the engine's shared data root)."""
    need_slirp4netns()
    if os.geteuid() != 0:
        pytest.skip("root only: as another user slirp4netns cannot touch the host's mounts")
    (tmp_path / "shared").mkdir()
    # A mount namespace of the test's own: what it mounts never reaches the machine.
    unshare = ["unshare", "--mount", "--propagation", "private"]
    done = subprocess.run(
        [*unshare, sys.executable, "-c", SHARED_MOUNT_SURVIVES, str(tmp_path / "shared"),
         str(tmp_path / "rollout")],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "mounted", "slirp4netns unmounted a mount of its parent's"


def test_endpoint_parsing() -> None:
    e = parse_endpoint("https://api.example.com/v1")
    assert (e.host, e.port, e.bind_host, e.hosts_entry) == (
        "api.example.com",
        443,
        "127.0.0.1",
        "api.example.com",
    )
    assert parse_endpoint("http://localhost:8000/v1").hosts_entry is None
    with pytest.raises(SandboxError, match="cannot be forwarded"):
        parse_endpoint("http://10.1.2.3:8000/v1")
    with pytest.raises(SandboxError, match="http"):
        parse_endpoint("ftp://x/y")


async def test_closing_the_relay_lets_its_callers_cancellation_through() -> None:
    """Relay.close ends the connections it relays and waits for them, but a cancellation
    of its caller meanwhile (a timeout, a Ctrl-C's) goes through, not swallowed with
    theirs; the listener is closed either way."""
    connected = asyncio.Event()

    async def upstream(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connected.set()
        await reader.read()  # until the relay's side is gone
        writer.close()

    server = await asyncio.start_server(upstream, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    listener = socket.create_server(("127.0.0.1", 0))
    relay = Relay(listener, parse_endpoint(f"http://127.0.0.1:{port}/v1"))
    await relay.start()
    _, writer = await asyncio.open_connection(*listener.getsockname()[:2])
    await connected.wait()  # a connection is being relayed

    async def close_cancelled() -> None:
        task = asyncio.current_task()
        assert task is not None
        task.cancel()  # delivered at close's first wait
        await relay.close()

    closing = asyncio.create_task(close_cancelled())
    with pytest.raises(asyncio.CancelledError):
        await closing
    assert closing.cancelled()
    assert listener.fileno() == -1
    writer.close()
    server.close()
    await server.wait_closed()
