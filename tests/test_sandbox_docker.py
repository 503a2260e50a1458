"""The docker sandbox: a real engine, real containers, real processes (no mocks).

The docker twin of tests/test_sandbox_local.py, plus what only containers
have: the image's ENV/WORKDIR/USER/ENTRYPOINT/HEALTHCHECK, resource limits,
the per-rollout network, compose projects and leftovers.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from agentkit import registry
from agentkit._sandbox import ExecutionHints, Sandbox, TaskImage
from agentkit.sandbox import SandboxError, end_processes, open_sandbox
from agentkit.sandbox.docker import DockerSandbox
from agentkit.sandbox.docker._engine import (
    HOST_ROOT_WARNING,
    LABEL,
    EngineInfo,
    decide_engine,
    prune,
)
from agentkit.testing.model_server import ScriptedModelServer
from agentkit.testing.sandbox_fixtures import requires_docker, wait_gone, wait_present
from agentkit.testing.sandbox_fixtures import unique_sleep_arg as unique_sleep

pytestmark = [pytest.mark.anyio, requires_docker]


def _docker(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["docker", *args], capture_output=True, text=True, check=False)


def _exists(name: str) -> bool:
    return _docker("inspect", name).returncode == 0


def _image(tmp_path: Path, dockerfile: str, **files: str) -> TaskImage:
    env = tmp_path / f"env-{uuid.uuid4().hex[:6]}"
    env.mkdir()
    (env / "Dockerfile").write_text(dockerfile)
    for name, text in files.items():
        (env / name).write_text(text)
        (env / name).chmod(0o755)
    return TaskImage(dockerfile=str(env / "Dockerfile"), context=str(env))


async def test_runs_commands_in_the_expected_layout(sandbox_factory) -> None:
    sb = await sandbox_factory("docker")
    assert isinstance(sb, Sandbox)
    r = await sb.exec("pwd; id -u; ls -d /app /logs/agent /logs/verifier /logs/artifacts")
    assert r.ok, r.stderr
    assert r.stdout.split()[:2] == ["/app", "0"]
    r = await sb.exec("echo oops >&2; exit 3", env={"X": "y"})
    assert (r.exit_code, r.stderr, r.ok) == (3, "oops\n", False)
    r = await sb.exec("echo $X; pwd", env={"X": "y"}, cwd="/logs")
    assert r.stdout == "y\n/logs\n"


async def test_files_in_and_out(sandbox_factory, tmp_path: Path) -> None:
    sb = await sandbox_factory("docker")
    assert (await sb.exec("echo 1 > /logs/verifier/reward.txt")).ok
    await sb.download("/logs/verifier/reward.txt", tmp_path / "reward.txt")
    assert (tmp_path / "reward.txt").read_text() == "1\n"
    assert sb.host_path("/logs/verifier/reward.txt").read_text() == "1\n"  # kept on the host
    src = tmp_path / "tests"
    (src / "sub").mkdir(parents=True)
    (src / "sub" / "test.sh").write_text("echo from-test\n")
    await sb.upload(src, "/tests")
    await sb.upload(src / "sub" / "test.sh", "/new/dir/copy.sh")  # parents are made
    r = await sb.exec("bash /tests/sub/test.sh && bash /new/dir/copy.sh", cwd="/tests")
    assert r.stdout == "from-test\nfrom-test\n", r.stderr
    # Downloads keep regular files; a link to a host-looking path is not followed on the host.
    await sb.exec("mkdir -p /app/out && echo a > /app/out/a && ln -s /etc/shadow /app/out/link")
    await sb.download("/app/out", tmp_path / "out")
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["a"]
    with pytest.raises(SandboxError):
        sb.host_path("/app/out/a")


async def test_hints_workdir_env_and_paths(sandbox_factory, tmp_path: Path) -> None:
    data = tmp_path / "environment"
    data.mkdir()
    (data / "data.txt").write_text("payload")
    hints = ExecutionHints(
        workdir="/workspace", env={"TASK": "t1"}, paths={"/workspace": str(data)}
    )
    sb = await sandbox_factory("docker", hints=hints)
    r = await sb.exec("pwd; echo $TASK; cat data.txt")
    assert r.stdout == "/workspace\nt1\npayload"


async def test_the_images_env_workdir_user_entrypoint_and_healthcheck(
    sandbox_factory, tmp_path: Path
) -> None:
    image = _image(
        tmp_path,
        "FROM python:3.11-slim\n"
        "COPY entrypoint.sh /entrypoint.sh\n"
        "ENV FROM_IMAGE=yes\n"
        "RUN useradd -m player\n"
        "WORKDIR /home/player\n"
        "USER player\n"
        # Failures in the start period do not count: however slow the machine,
        # the check turns healthy once the entrypoint is done (a bound, not a timing).
        "HEALTHCHECK --interval=1s --start-period=120s CMD test -f /tmp/ready\n"
        'ENTRYPOINT ["/entrypoint.sh"]\n',
        **{"entrypoint.sh": '#!/bin/sh\nsleep 1; touch /tmp/ready\nexec "$@"\n'},
    )
    sb = await sandbox_factory("docker", hints=ExecutionHints(image=image, workdir="/home/player"))
    # The healthcheck passed before setup returned: the entrypoint's work is done.
    r = await sb.exec("test -f /tmp/ready && echo $FROM_IMAGE; whoami; pwd; ps -o args= -p 1")
    assert r.stdout.split("\n")[:3] == ["yes", "player", "/home/player"], r.stderr
    r = await sb.exec("whoami", user="root")
    assert r.stdout == "root\n"


async def test_background_process_outlives_exec_but_not_close(sandbox_factory) -> None:
    sb = await sandbox_factory("docker")
    arg = unique_sleep()
    assert (await sb.exec(f"sleep {arg} > /dev/null 2>&1 &")).ok
    assert await wait_present(arg), "a background process keeps running between commands"
    # A child holding the command's output open: the exec ends with the command (after
    # the engine's grace), not with the child, which still runs once it has returned.
    held = unique_sleep()
    r = await sb.exec(f"sleep {held} & echo started", timeout=30)
    assert (r.stdout, r.exit_code, r.timed_out) == ("started\n", 0, False), r.stderr
    assert await wait_present(held), "the child outlives the exec"
    await sb.close()
    assert await wait_gone(arg) == [] and await wait_gone(held) == []
    assert not _exists(sb.container_name)


async def test_timeout_kills_the_whole_tree(sandbox_factory) -> None:
    sb = await sandbox_factory("docker")
    a, b = unique_sleep(), unique_sleep()
    proc = await sb.start(f"sleep {a} & sleep {b}; echo never")
    # Both sleeps run (seen from the host) before the timeout may fire.
    assert await wait_present(a) and await wait_present(b)
    r = await proc.wait(timeout=0.1)
    assert r.timed_out and not r.ok
    assert "never" not in r.stdout
    assert await wait_gone(a) == [] and await wait_gone(b) == []
    assert (await sb.exec("echo alive")).stdout == "alive\n"


async def test_start_streams_lines_and_takes_stdin(sandbox_factory) -> None:
    sb = await sandbox_factory("docker")
    proc = await sb.start(["sh", "-c", "read x; echo got-$x; cat; echo second; sleep 30"])
    await proc.write_stdin(b"prompt\nrest\n")  # closed after: cat sees end-of-file
    lines = proc.stdout_lines()
    assert await anext(lines) == "got-prompt"
    assert await anext(lines) == "rest"
    assert await anext(lines) == "second"
    result = await proc.wait(timeout=0.3)
    assert result.timed_out
    assert result.stdout == "got-prompt\nrest\nsecond\n"


async def test_memory_limit_kills_and_says_so(sandbox_factory) -> None:
    sb = await sandbox_factory(
        "docker", hints=ExecutionHints(memory_mb=64, image=TaskImage(image="python:3.11-slim"))
    )
    r = await sb.exec(
        ["python3", "-c", "x = bytearray(512 << 20); x[::4096] = b'1' * len(x[::4096])"]
    )
    assert r.exit_code == 137
    assert "out-of-memory killer" in r.stderr and "64 MB" in r.stderr
    assert (await sb.exec("echo alive")).ok  # the container goes on
    r = await sb.exec("cat /sys/fs/cgroup/memory/memory.limit_in_bytes /sys/fs/cgroup/memory.max")
    assert str(64 << 20) in r.stdout


async def test_cpus_limit(sandbox_factory) -> None:
    sb = await sandbox_factory("docker", hints=ExecutionHints(cpus=0.5))
    r = await sb.exec("cat /sys/fs/cgroup/cpu.max /sys/fs/cgroup/cpu/cpu.cfs_quota_us 2>/dev/null")
    assert "50000" in r.stdout


_PROBE = (
    "import sys, urllib.request\n"
    "print(urllib.request.urlopen(sys.argv[1] + '/models', timeout=10).status)\n"
)
_OUTSIDE = (
    "import socket\n"
    "try:\n"
    "    socket.create_connection(('8.8.8.8', 53), timeout=3); print('reached')\n"
    "except OSError:\n"
    "    print('unreachable')\n"
)


async def test_no_network_yet_the_model_endpoint_works(sandbox_factory) -> None:
    with ScriptedModelServer("hi") as server:
        sb = await sandbox_factory(
            "docker",
            hints=ExecutionHints(image=TaskImage(image="python:3.11-slim")),
            model_endpoint=server.base_url,
        )
        r = await sb.exec(["python3", "-c", _PROBE, server.base_url])
        assert r.stdout.strip() == "200", r.stderr
        r = await sb.exec(["python3", "-c", _OUTSIDE])
        assert r.stdout.strip() == "unreachable"
        r = await sb.exec("cat /proc/net/dev | grep -c ':' ")
        assert r.stdout.strip() == "1"  # the loopback only


async def test_ending_every_process_relays_the_model_endpoint_again(sandbox_factory) -> None:
    """end_processes kills the container and starts it again: its relay to the model
    endpoint (a listener in the container's network namespace) is made again."""
    with ScriptedModelServer("hi") as server:
        sb = await sandbox_factory(
            "docker",
            hints=ExecutionHints(image=TaskImage(image="python:3.11-slim")),
            model_endpoint=server.base_url,
        )
        r = await sb.exec(["python3", "-c", _PROBE, server.base_url])
        assert r.stdout.strip() == "200", r.stderr
        await end_processes(sb)
        r = await sb.exec(["python3", "-c", _PROBE, server.base_url])
        assert r.stdout.strip() == "200", r.stderr


async def test_network_only_when_the_task_asks_and_the_user_allows(sandbox_factory) -> None:
    hints = ExecutionHints(network=True, image=TaskImage(image="python:3.11-slim"))
    with ScriptedModelServer("hi") as server:
        denied = await sandbox_factory("docker", hints=hints, model_endpoint=server.base_url)
        assert (await denied.exec("grep -c : /proc/net/dev")).stdout.strip() == "1"
        allowed = await sandbox_factory(
            "docker", hints=hints, model_endpoint=server.base_url, allow_network=True
        )
        assert int((await allowed.exec("grep -c : /proc/net/dev")).stdout) >= 2
        # A loopback endpoint is still relayed: the container's 127.0.0.1 is its own.
        r = await allowed.exec(["python3", "-c", _PROBE, server.base_url])
        assert r.stdout.strip() == "200", r.stderr
        network = allowed._network_id
        assert network is not None
    await allowed.close()
    assert _docker("network", "inspect", network).returncode != 0


@pytest.mark.parametrize("down", ["works", "fails"])
async def test_compose_sidecar_and_teardown(sandbox_factory, tmp_path: Path, down: str) -> None:
    """Closing removes the project's services and network, even when ``docker compose
    down`` fails (here its file is gone): what it left is removed by the project label."""
    env = tmp_path / "environment"
    (env / "side").mkdir(parents=True)
    (env / "Dockerfile").write_text("FROM python:3.11-slim\nWORKDIR /app\n")
    (env / "side" / "Dockerfile").write_text(
        "FROM python:3.11-slim\nRUN echo sidecar > /srv/hello.txt\nWORKDIR /srv\n"
        'CMD ["python3", "-m", "http.server", "5000"]\n'
    )
    (env / "docker-compose.yaml").write_text(
        "services:\n  main:\n    depends_on:\n      side:\n        condition: service_healthy\n"
        "  side:\n    build:\n      context: ./side\n    healthcheck:\n"
        "      test: ['CMD', 'python3', '-c', \"import socket; "
        "socket.create_connection(('localhost', 5000))\"]\n"
        "      interval: 1s\n      retries: 30\n"
    )
    image = TaskImage(
        dockerfile=str(env / "Dockerfile"),
        context=str(env),
        compose_file=str(env / "docker-compose.yaml"),
    )
    prepared = await DockerSandbox.prepare([ExecutionHints(image=image)])
    assert not isinstance(prepared[0], BaseException), prepared[0]
    sb = await sandbox_factory("docker", hints=ExecutionHints(image=image))
    fetch = "import urllib.request as u; print(u.urlopen('http://side:5000/hello.txt').read())"
    r = await sb.exec(["python3", "-c", fetch])
    assert "sidecar" in r.stdout, r.stderr
    r = await sb.exec(["python3", "-c", _OUTSIDE])
    assert r.stdout.strip() == "unreachable"  # internal: the sidecar, not the world
    project = sb._compose.name
    if down == "fails":
        (sb.root / "compose.agentkit.json").unlink()
    await sb.close()
    left = _docker("ps", "-a", "-q", "--filter", f"label=com.docker.compose.project={project}")
    assert left.stdout.strip() == ""
    assert _docker("network", "inspect", f"{project}_default").returncode != 0


async def test_a_compose_file_cannot_read_agentkits_environment(
    sandbox_factory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Compose interpolates from its own environment: a task's compose file that
    names agentkit's secrets (``${VAR}`` or a bare ``environment: [VAR]``) gets
    nothing, the task's own variables still interpolate, and a task's variable
    does not choose the engine the CLI talks to."""
    secret = f"sk-{uuid.uuid4().hex}"
    monkeypatch.setenv("OPENAI_API_KEY", secret)
    monkeypatch.setenv("AGENTKIT_TEST_TOKEN", secret)
    env = tmp_path / "environment"
    env.mkdir()
    (env / "Dockerfile").write_text("FROM debian:bookworm-slim\nWORKDIR /app\n")
    (env / "docker-compose.yaml").write_text(
        "services:\n  main:\n    environment:\n"
        "      - LEAK=${OPENAI_API_KEY:-none}\n      - AGENTKIT_TEST_TOKEN\n"
        "      - MINE=${TASK_VALUE}\n"
    )
    image = TaskImage(
        dockerfile=str(env / "Dockerfile"),
        context=str(env),
        compose_file=str(env / "docker-compose.yaml"),
    )
    task_env = {"TASK_VALUE": "from-the-task", "DOCKER_HOST": "unix:///nonexistent.sock"}
    hints = ExecutionHints(image=image, env=task_env)
    sb = await sandbox_factory("docker", hints=hints)
    r = await sb.exec("env")
    assert "MINE=from-the-task" in r.stdout and "LEAK=none" in r.stdout, r.stdout
    assert secret not in r.stdout
    written = [p.read_bytes() for p in sb.root.rglob("*") if p.is_file()]
    assert written and not any(secret.encode() in data for data in written)


async def test_a_failed_build_is_the_tasks_error_with_its_log(tmp_path: Path) -> None:
    marker = uuid.uuid4().hex
    bad = _image(tmp_path, f"FROM debian:bookworm-slim\nRUN echo {marker} && false\n")
    lines: list[str] = []
    results = await DockerSandbox.prepare(
        [ExecutionHints(image=bad), ExecutionHints()], log_dir=tmp_path / "logs",
        on_progress=lines.append,
    )  # fmt: skip
    assert isinstance(results[0], BaseException) and not isinstance(results[1], BaseException)
    log = Path(results[0].log_path).read_text()
    assert marker in log and str(tmp_path / "logs") in results[0].log_path
    assert lines and lines[-1].startswith("images 1/2 ready") and "1 failed" in lines[-1]


async def test_close_then_remove_root(tmp_path: Path) -> None:
    sb = DockerSandbox(root=tmp_path / "r", rollout_id="r1")
    async with sb:
        assert (await sb.exec("echo hi > /logs/agent/x")).ok
        name = sb.container_name
    assert not _exists(name)
    assert (tmp_path / "r" / "fs" / "logs" / "agent" / "x").exists()  # kept by default
    await sb.close(remove=True)
    assert not (tmp_path / "r").exists()
    with pytest.raises(SandboxError, match="closed"):
        await sb.exec("true")


async def test_open_sandbox_and_registered_options(tmp_path: Path) -> None:
    async with open_sandbox("docker") as sb:
        assert (await sb.exec("echo ok")).stdout == "ok\n"
        root = sb.root
    assert not root.exists()
    factory = registry.resolve_sandbox(
        "docker", allow_network=True, default_image="python:3.11-slim"
    )
    sb = factory(root=tmp_path, hints=ExecutionHints(network=True), rollout_id="x")
    assert isinstance(sb, DockerSandbox) and sb.network
    schema = registry.option_schema("sandbox", "docker")
    assert schema.parse_cli(["allow_host_root=true"], flag="-S") == {"allow_host_root": True}


async def test_sandboxes_run_concurrently_and_are_isolated(sandbox_factory) -> None:
    boxes = await asyncio.gather(*(sandbox_factory("docker") for _ in range(3)))
    await asyncio.gather(*(b.exec(f"echo {i} > /app/id") for i, b in enumerate(boxes)))
    results = await asyncio.gather(*(b.exec("cat /app/id") for b in boxes))
    assert [r.stdout.strip() for r in results] == ["0", "1", "2"]


def test_the_engine_check_refuses_host_root_unless_allowed() -> None:
    host_root = EngineInfo(version="x", userns_remap=False, rootless=False, root_dir="/d")
    with pytest.raises(SandboxError, match="userns-remap") as info:
        decide_engine(host_root, allow_host_root=False)
    assert "allow_host_root=true" in str(info.value)
    assert decide_engine(host_root, allow_host_root=True) == HOST_ROOT_WARNING
    for safe in (
        EngineInfo(version="x", userns_remap=True, rootless=False, root_dir="/d"),
        EngineInfo(version="x", userns_remap=False, rootless=True, root_dir="/d"),
    ):
        assert decide_engine(safe, allow_host_root=False) is None


async def test_this_engine_maps_root_elsewhere(sandbox_factory) -> None:
    """CI starts dockerd with --userns-remap=default: the check passes, root is remapped."""
    sb = await sandbox_factory("docker")
    r = await sb.exec("cat /proc/self/uid_map")
    inside, outside, _ = (int(x) for x in r.stdout.split())
    assert inside == 0 and outside != 0


async def test_leftovers_of_a_killed_orchestrator_are_pruned(tmp_path: Path) -> None:
    arg = unique_sleep()
    script = f"""
import asyncio, os, signal
from agentkit.sandbox.docker import DockerSandbox
async def main():
    sb = DockerSandbox(root={str(tmp_path / "r")!r}, rollout_id="killed",
                       hints=__import__("agentkit").ExecutionHints(network=True),
                       allow_network=True)
    await sb.setup()
    await sb.exec("sleep {arg} > /dev/null 2>&1 &")
    print(sb.container_name, flush=True)
    os.kill(os.getpid(), signal.SIGKILL)
asyncio.run(main())
"""
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    name = proc.stdout.strip()
    assert name and _exists(name), proc.stderr
    assert await wait_present(arg)
    report = await prune()
    # Another run starting meanwhile (a parallel test) may have pruned it first.
    assert name in report.containers or not _exists(name)
    assert not _exists(name) and not _exists(f"{name}-net")
    assert await wait_gone(arg) == []
    names = _docker("ps", "-a", "--format", "{{.Names}}", "--filter", f"label={LABEL}").stdout
    assert name not in names.split()


#: A docker sandbox made by a process of its own, which prints its container's name and
#: then dies with SIGKILL ("killed") or runs until its stdin closes ("alive").
_OWNER = """
import asyncio, os, signal, sys
from agentkit.sandbox.docker import DockerSandbox
async def main():
    sb = DockerSandbox(root=sys.argv[1], rollout_id=sys.argv[2])
    await sb.setup()
    print(sb.container_name, flush=True)
    if sys.argv[2] == "killed":
        os.kill(os.getpid(), signal.SIGKILL)
    await asyncio.to_thread(sys.stdin.read)
    await sb.close()
asyncio.run(main())
"""


def _on_host(name: str) -> list[str]:
    """Run a command under host name ``name`` (a UTS namespace of its own).

    Owner labels name the host, and prune leaves other hosts' sandboxes alone: the
    sandboxes made and pruned under this name are this test's only, whatever other
    runs on this engine prune meanwhile.
    """
    userns = [] if os.geteuid() == 0 else ["--user", "--map-root-user"]
    return ["unshare", *userns, "--uts", "--", "sh", "-c", 'hostname "$0" && exec "$@"', name]


def test_prune_command(tmp_path: Path) -> None:
    host = f"agentkit-prune-{uuid.uuid4().hex[:8]}"
    alive = subprocess.Popen(
        [*_on_host(host), sys.executable, "-c", _OWNER, str(tmp_path / "a"), "alive"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert alive.stdout is not None
        in_use = alive.stdout.readline().strip()
        assert in_use and _exists(in_use)
        killed = subprocess.run(
            [*_on_host(host), sys.executable, "-c", _OWNER, str(tmp_path / "k"), "killed"],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        left = killed.stdout.strip()
        assert killed.returncode == -9 and left and _exists(left), killed.stderr
        proc = subprocess.run(
            [*_on_host(host), sys.executable, "-m", "agentkit", "sandbox", "prune"],
            capture_output=True, text=True, env={**os.environ, "NO_COLOR": "1"}, check=False,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.splitlines() == [f"removed container {left}"], proc.stdout
        assert not _exists(left)
        assert _exists(in_use)  # its run goes on
    finally:
        # Its stdin closes: it closes its sandbox and ends.
        _, err = alive.communicate(timeout=120)  # a hang guard, not a measurement
    assert alive.returncode == 0, err
    assert not _exists(in_use)


async def test_close_waits_for_a_removal_already_under_way(sandbox_factory) -> None:
    """A close that finds its container's removal already under way (the engine's 409:
    one a close cut short by its timeout started, or a prune's) waits for that removal
    through the engine's wait API instead of failing with the container still there."""
    import aiodocker  # deferred: optional (agentkit[docker]); without it these tests skip

    sb = await sandbox_factory(
        "docker", hints=ExecutionHints(image=TaskImage(image="debian:bookworm-slim"))
    )
    # enough files in its layer that the engine takes a while to remove it
    assert (await sb.exec("mkdir /many && cd /many && seq 1 20000 | xargs touch")).ok
    other = aiodocker.Docker()
    try:
        container = other.containers.container(sb.container_id)
        removing = asyncio.create_task(container.delete(force=True))
        while (await container.show())["State"].get("Status") != "removing":
            assert not removing.done(), "removed before the engine said it was removing it"
        await sb.close()  # its own delete: 409, removal already in progress
        await removing
        with pytest.raises(aiodocker.DockerError) as gone:
            await container.show()
        assert gone.value.status == 404
    finally:
        await other.close()
