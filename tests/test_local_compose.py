"""Compose tasks on the local sandbox: every service a bubblewrap sandbox, no daemon.

Real bubblewrap, real image roots (every service on the offline stand-in
``python:3.11-slim``, exported once into the session's cache, shared with the
other image-root tests), real processes on one private network per rollout.
The compose files are in ``tests/fixtures/compose``: ``web-db`` (a Harbor
task: a web app on port 80 as uid 1000, a database with a healthcheck, a
one-shot migration), ``extends-workdir`` (a Harbor task whose main service's
``working_dir`` comes through ``extends``) and ``cases`` (a sidecar that never turns healthy, a
failing migration, a service restarted on failure, a sleeping sidecar).
"""

from __future__ import annotations

import asyncio
import http.server
import json
import os
import select
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from agentkit._sandbox import ExecutionHints, TaskImage
from agentkit.sandbox import SandboxError, SandboxForkError
from agentkit.sandbox.local import LocalSandbox
from agentkit.testing.sandbox_fixtures import (
    host_pids_with_arg,
    need_slirp4netns,
    outward_address,
    requires_image_tool,
    unique_sleep_arg,
    wait_gone,
    wait_present,
)

pytestmark = [pytest.mark.anyio, requires_image_tool, pytest.mark.xdist_group("image-roots")]

FIXTURES = Path(__file__).parent / "fixtures" / "compose"
WEB_DB = FIXTURES / "web-db" / "environment" / "docker-compose.yaml"
CASES = FIXTURES / "cases" / "environment"


@pytest.fixture
def compose(sandbox_factory, image_cache: Path):
    """Start a local sandbox on a compose file (``env`` gives its ``${VAR}``)."""

    async def make(path: Path, **env: str) -> LocalSandbox:
        hints = ExecutionHints(
            image=TaskImage(compose_file=str(path)), workdir="/app", env=dict(env)
        )
        box: LocalSandbox = await sandbox_factory(
            "local", hints=hints, image_cache=str(image_cache)
        )
        return box

    return make


def _fetch(url: str) -> list[str]:
    return [
        "python3", "-c",
        "import sys, urllib.request as u; print(u.urlopen(sys.argv[1], timeout=5).read().decode())",
        url,
    ]  # fmt: skip


#: ``_fetch`` once the server listens (a bound: 200 tries): the main service waits for
#: the web app's ``service_started``, which is not its listening (as on Docker).
_FETCH_WHEN_UP = """
import sys, time, urllib.request as u
for _ in range(200):
    try:
        print(u.urlopen(sys.argv[1], timeout=5).read().decode())
        break
    except OSError:
        time.sleep(0.05)
"""


async def test_a_web_app_its_database_and_a_migration_reached_by_name(compose) -> None:
    box = await compose(WEB_DB)
    # The web app started once the database was healthy and the migration done.
    r = await box.exec(["python3", "-c", _FETCH_WHEN_UP, "http://web/answer"])
    assert r.stdout == "42\n", r.stderr
    r = await box.exec(_fetch("http://web/whoami"))
    assert json.loads(r.stdout) == {
        "uid": 1000,  # user: "1000"
        "cwd": "/srv/app",  # working_dir
        "greeting": "hello from web",  # environment
        "cache": "yes",  # its tmpfs was writable
        "hostname": "web",
    }
    # Each service by its name and aliases; the main service is "main".
    r = await box.exec("getent hosts db database web main | awk '{print $1, $2}'; hostname")
    assert r.stdout.splitlines() == [
        "127.0.0.2 db", "127.0.0.2 db", "127.0.0.5 web", "127.0.0.3 main", "main",
    ]  # fmt: skip
    # The database's named volume is the rollout's own directory.
    store = box.root / "compose" / "volumes" / "dbdata" / "db.json"
    assert json.loads(store.read_text()) == {"answer": "42"}


async def test_two_rollouts_at_once_never_see_each_others_services(compose) -> None:
    first, second = await asyncio.gather(compose(WEB_DB), compose(WEB_DB))
    ping = "/app/ping.py"
    for box, name in ((first, "first"), (second, "second")):
        await box.upload(WEB_DB.parent / "services" / "ping.py", ping)
        r = await box.exec(["python3", ping, "database", f"SET rollout {name}"])
        assert r.stdout == "OK\n", r.stderr
    # Both databases listen on 0.0.0.0:5432 at once; each rollout sees its own.
    for box, name in ((first, "first"), (second, "second")):
        r = await box.exec(["python3", ping, "db", "GET rollout"])
        assert r.stdout == f"{name}\n"
        assert (await box.exec(_fetch("http://web/answer"))).stdout == "42\n"


async def test_a_sidecar_that_never_turns_healthy_fails_the_start(compose) -> None:
    arg = unique_sleep_arg()
    with pytest.raises(SandboxError) as caught:
        await compose(CASES / "unhealthy.yaml", SLEEP=arg)
    message = str(caught.value)
    assert "compose service 'side'" in message and "unhealthy.yaml is unhealthy" in message
    assert "last: exit 1: side is down" in message  # the check's own output
    assert "its last output: side says it is starting" in message  # the service's
    assert await wait_gone(arg) == []  # the sidecar went with the failed start


async def test_a_failed_one_shot_service_fails_the_start_naming_it(compose) -> None:
    with pytest.raises(SandboxError) as caught:
        await compose(CASES / "failing.yaml")
    message = str(caught.value)
    assert "compose service 'migrate'" in message
    assert "did not complete successfully (exit 3), which 'main' waits for" in message
    assert message.endswith("its last output: the migration broke")


async def test_a_service_is_started_again_as_its_restart_policy_says(compose) -> None:
    box = await compose(CASES / "restart.yaml")
    r = await box.exec(_fetch("http://flaky:8000/"))
    assert r.ok and "Directory listing" in r.stdout, r.stderr
    service = box._project._services["flaky"] if box._project else None
    assert service is not None and service.restarts == 1
    assert "second run" in service.output()


async def test_close_ends_every_service_and_a_compose_sandbox_cannot_fork(compose) -> None:
    arg = unique_sleep_arg()
    box = await compose(CASES / "sleepers.yaml", SLEEP=arg)
    assert await wait_present(arg)
    with pytest.raises(SandboxForkError, match=r"cannot fork: it runs a compose task"):
        await box.fork()
    assert (await box.exec("echo still")).stdout == "still\n"
    await box.close()
    assert host_pids_with_arg(arg) == []  # killed with the holder's pid namespace


#: Starts a compose sandbox in a process of its own, says so, and waits to be killed.
_ORCHESTRATOR = """
import asyncio, sys
from agentkit._sandbox import ExecutionHints, TaskImage
from agentkit.sandbox.local import LocalSandbox
async def main():
    hints = ExecutionHints(image=TaskImage(compose_file=sys.argv[1]), env={"SLEEP": sys.argv[2]})
    box = LocalSandbox(root=sys.argv[3], hints=hints, image_cache=sys.argv[4])
    await box.setup()
    print("ready", box._project._holder.pid, flush=True)
    await asyncio.sleep(600)
asyncio.run(main())
"""


def test_a_compose_rollout_dies_with_its_orchestrator(tmp_path: Path, image_cache: Path) -> None:
    arg = unique_sleep_arg()
    argv = [str(CASES / "sleepers.yaml"), arg, str(tmp_path / "rollout"), str(image_cache)]
    proc = subprocess.Popen(
        [sys.executable, "-c", _ORCHESTRATOR, *argv], stdout=subprocess.PIPE, text=True
    )
    holder = None
    try:
        assert proc.stdout is not None
        said, pid = proc.stdout.readline().split()
        assert said == "ready" and host_pids_with_arg(arg)
        holder = os.pidfd_open(int(pid))  # the network holder's init
    finally:
        proc.kill()  # SIGKILL: no close, no cleanup of its own
        proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()
    # Its lifeline closed with it: the holder ends (at once; the bound is a hang guard,
    # short so that another agentkit process's reaper of orphans, which would end it
    # too, is unlikely to be what ended it), and with it every service.
    try:
        assert select.select([holder], [], [], 10)[0] == [holder], "the holder outlived it"
    finally:
        os.close(holder)
    assert asyncio.run(wait_gone(arg, 10)) == []
    # Nor any of its bubblewraps (each carries its owner, for that reaper).
    owner = f"AGENTKIT_SANDBOX_OWNER={proc.pid}:".encode()
    deadline = time.monotonic() + 10
    while (left := _owned_by(owner)) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert left == []


def _owned_by(owner: bytes) -> list[int]:
    found = []
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                if owner in f.read():
                    found.append(int(entry))
        except OSError:
            pass
    return found


# -- through `agentkit run`: the same rewards as on Docker, and no daemon needed ------

ROOT = Path(__file__).resolve().parents[1]
#: Every compose task of this project: the example, the web app + database, and a main
#: whose working_dir comes from the service it extends (the agent's commands run there).
COMPOSE_TASKS = {
    "sidecar-api": ROOT / "examples" / "harbor-docker" / "sidecar-api",
    "web-db": FIXTURES / "web-db",
    "extends-workdir": FIXTURES / "extends-workdir",
}


@pytest.fixture
def compose_tasks(tmp_path: Path) -> Path:
    pytest.importorskip("agentkit_harbor", reason="the Harbor plugin is not installed")
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    for name, src in COMPOSE_TASKS.items():
        (tasks / name).symlink_to(src)
    return tasks


def _run(
    tasks: Path, out: Path, *args: str, env: dict[str, str] | None = None
) -> dict[str, object]:
    """``agentkit run harbor:TASKS oracle ARGS``: each task's reward (its error when None)."""
    proc = subprocess.run(
        [sys.executable, "-m", "agentkit", "run", f"harbor:{tasks}", "oracle", *args,
         "--out", str(out), "--json", "--max-retries", "0"],
        capture_output=True, text=True, timeout=1200, check=False,
        env={**os.environ, "NO_COLOR": "1", **(env or {})},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    records = [json.loads(line) for line in (out / "rollouts.jsonl").read_text().splitlines()]
    return {r["task_id"].split(":", 1)[1]: r["reward"] if r["reward"] is not None
            else r["error"] for r in records}  # fmt: skip


@pytest.mark.slow
@pytest.mark.usefixtures("docker_engine")
def test_compose_tasks_score_the_same_as_on_docker(
    compose_tasks: Path, tmp_path: Path, image_cache: Path
) -> None:
    local = _run(
        compose_tasks, tmp_path / "local", "--sandbox", "local", "-S", f"image_cache={image_cache}"
    )
    docker = _run(compose_tasks, tmp_path / "docker", "--sandbox", "docker")
    assert local == docker == dict.fromkeys(COMPOSE_TASKS, 1.0)


def test_a_compose_task_runs_where_no_docker_daemon_answers(
    compose_tasks: Path, tmp_path: Path, image_cache: Path
) -> None:
    """No docker program on PATH and DOCKER_HOST a dead socket: the images come from
    Podman's store (or the cache), the services are bubblewrap sandboxes."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for directory in ("/usr/local/bin", "/usr/bin", "/usr/sbin"):
        for entry in os.scandir(directory):
            if not entry.name.startswith("docker") and not (bin_dir / entry.name).exists():
                (bin_dir / entry.name).symlink_to(entry.path)
    env = {"PATH": str(bin_dir), "DOCKER_HOST": f"unix://{tmp_path}/no-docker.sock"}
    probe = subprocess.run(["sh", "-c", "command -v docker || echo none"], env=env,
                           capture_output=True, text=True, check=False)  # fmt: skip
    assert probe.stdout == "none\n"
    rewards = _run(
        compose_tasks, tmp_path / "run", "--sandbox", "local",
        "-S", "image=auto", "-S", f"image_cache={image_cache}", env=env,
    )  # fmt: skip
    assert rewards == dict.fromkeys(COMPOSE_TASKS, 1.0)


async def test_a_writable_bind_of_the_task_folder_is_the_rollouts_copy(
    compose, tmp_path: Path
) -> None:
    env = tmp_path / "task" / "environment"
    (env / "data").mkdir(parents=True)
    (env / "data" / "seed.txt").write_text("seed\n")
    os.mkfifo(env / "data" / "pipe")  # copied as a FIFO, never read (a read would hang)
    (env / "docker-compose.yaml").write_text(
        "services:\n"
        "  main:\n    image: python:3.11-slim\n    volumes: ['./data:/shared']\n"
        "  side:\n    image: python:3.11-slim\n    volumes: ['./data:/data']\n"
        "    command: ['sh', '-c', 'echo from-side > /data/side.txt; exec sleep infinity']\n"
        "    healthcheck: {test: ['CMD', 'test', '-e', '/data/side.txt'], interval: 1s}\n"
        "    depends_on: {}\n"
    )
    box = await compose(env / "docker-compose.yaml")
    r = await box.exec(
        "cat /shared/seed.txt; test -p /shared/pipe && echo fifo; echo main >> /shared/seed.txt"
    )
    assert r.stdout == "seed\nfifo\n", r.stderr
    # The services share one copy; the task's own folder is untouched.
    assert sorted(p.name for p in (env / "data").iterdir()) == ["pipe", "seed.txt"]
    assert (env / "data" / "seed.txt").read_text() == "seed\n"
    r = await box.exec("cat /shared/side.txt")
    assert r.stdout == "from-side\n"


async def test_a_file_included_and_a_service_extended_from_inside_the_task(
    compose, tmp_path: Path
) -> None:
    """``include`` brings a sidecar reached by name; ``extends`` a base from another
    file, its bind relative to that file's folder (as compose resolves it)."""
    env = tmp_path / "task" / "environment"
    (env / "common" / "data").mkdir(parents=True)
    (env / "common" / "data" / "hello.txt").write_text("from the base's folder\n")
    (env / "common" / "base.yaml").write_text(
        "services:\n  base:\n    environment: {FROM_BASE: 'yes'}\n    volumes: [./data:/data:ro]\n"
    )
    (env / "side.yaml").write_text(
        "services:\n  side:\n    image: python:3.11-slim\n"
        "    command: [python3, -m, http.server, '80']\n"
        '    healthcheck: {test: [CMD, python3, -c, "import socket; '
        "socket.create_connection(('side', 80))\"], interval: 1s}\n"
    )
    (env / "docker-compose.yaml").write_text(
        "include: [side.yaml]\nservices:\n  main:\n    image: python:3.11-slim\n"
        "    extends: {file: common/base.yaml, service: base}\n"
        "    depends_on: {side: {condition: service_healthy}}\n"
    )
    box = await compose(env / "docker-compose.yaml")
    r = await box.exec("echo $FROM_BASE; cat /data/hello.txt")
    assert r.stdout == "yes\nfrom the base's folder\n", r.stderr
    r = await box.exec(_fetch("http://side/"))
    assert "Directory listing" in r.stdout, r.stderr


class _Server:
    """An HTTP server on ``address`` of the host answering 'host'."""

    def __init__(self, address: str) -> None:
        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self.send_response(200)
                self.end_headers()
                self.wfile.write(b"host")

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer((address, 0), Handler)
        self.port = self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()


_TRY = (
    "import sys, urllib.request\n"
    "for url in sys.argv[1:]:\n"
    "    try:\n"
    "        print(urllib.request.urlopen(url, timeout=3).read().decode())\n"
    "    except OSError:\n"
    "        print('unreachable')\n"
)


@pytest.mark.parametrize("network", [True, False], ids=["network", "no-network"])
async def test_the_services_network_is_the_rollouts_own(
    sandbox_factory, image_cache: Path, network: bool
) -> None:
    """With network: slirp4netns on the holder carries every service's outbound traffic
    (the host's loopback stays out of reach); without: nothing outside the rollout."""
    if network:
        need_slirp4netns()
    outward = _Server("0.0.0.0")
    try:
        hints = ExecutionHints(
            image=TaskImage(compose_file=str(CASES / "sleepers.yaml")),
            env={"SLEEP": "infinity"},
            network=network,
        )
        main = await sandbox_factory(
            "local", hints=hints, image_cache=str(image_cache), allow_network=True
        )
        assert isinstance(main, LocalSandbox) and main._project is not None
        side = main._project._services["side"].box
        assert side is not None
        urls = [f"http://{outward_address()}:{outward.port}/", f"http://127.0.0.1:{outward.port}/"]
        for box in (main, side):
            r = await box.exec(["python3", "-c", _TRY, *urls], timeout=30)
            expected = ["host" if network else "unreachable", "unreachable"]
            assert r.stdout.split() == expected, r.stderr
        resolv = (await side.exec("cat /etc/resolv.conf")).stdout
        assert (resolv == "nameserver 10.0.2.3\n") is network
    finally:
        outward.httpd.shutdown()


async def test_the_model_endpoint_is_relayed_into_the_main_service(
    sandbox_factory, image_cache: Path
) -> None:
    host = _Server("127.0.0.1")
    try:
        url = f"http://127.0.0.1:{host.port}/v1"
        hints = ExecutionHints(
            image=TaskImage(compose_file=str(CASES / "sleepers.yaml")), env={"SLEEP": "infinity"}
        )
        main = await sandbox_factory(
            "local", hints=hints, image_cache=str(image_cache), model_endpoint=url
        )
        r = await main.exec(["python3", "-c", _TRY, url], timeout=30)
        assert r.stdout == "host\n", r.stderr
    finally:
        host.httpd.shutdown()
