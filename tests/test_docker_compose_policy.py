"""A hostile task's compose file cannot escape the docker sandbox: the project is
checked (as ``docker compose config`` resolves it) before anything starts, and one
error names the file, each service and every refused feature.

On the real engine and the real Compose CLI: each case's services carry a label
of their own, and no container with it may exist after the refusal.
"""

from __future__ import annotations

import asyncio
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentkit._sandbox import ExecutionHints, TaskImage
from agentkit.images import ImageError
from agentkit.sandbox import SandboxError
from agentkit.sandbox.docker import DockerSandbox
from agentkit.sandbox.docker._composepolicy import ComposePolicyError
from agentkit.testing.sandbox_fixtures import requires_docker

pytestmark = [pytest.mark.anyio, requires_docker]

_SOCKET = "/var/run/docker.sock"

#: The main escapes: (the main service's lines, what the error must name).
_ESCAPES = {
    "host-root": ('    volumes: ["/:/host"]\n', "volumes: bind mount '/' is outside"),
    "engine-socket": (
        f'    volumes: ["{_SOCKET}:{_SOCKET}"]\n',
        f"volumes: bind mount '{_SOCKET}'",
    ),
    "privileged-userns-host": (
        "    privileged: true\n    userns_mode: host\n",
        "privileged: would give",
    ),
    "pid-host": ("    pid: host\n", "pid: 'host' would join a namespace outside the project"),
    "logging-remote": (
        "    logging: {driver: syslog, options: {syslog-address: 'udp://203.0.113.1:514'}}\n",
        "logging: driver 'syslog' would send the container's output off this machine's engine "
        "(allowed: json-file, local, none)",
    ),
    "env-file-outside": (
        "    env_file: [/etc/hostname]\n",
        "env_file: file '/etc/hostname' is outside",
    ),
}


def _task(tmp_path: Path, main: str, marker: str, extra: str = "") -> TaskImage:
    env = tmp_path / "task" / "environment"
    env.mkdir(parents=True)
    (env / "docker-compose.yaml").write_text(
        "services:\n"
        f"  main:\n    image: debian:bookworm-slim\n    labels: {{agentkit-test: {marker}}}\n"
        f"{main}"
        f"  side:\n    image: debian:bookworm-slim\n    command: sleep infinity\n"
        f"    labels: {{agentkit-test: {marker}}}\n"
        f"{extra}"
    )
    return TaskImage(compose_file=str(env / "docker-compose.yaml"))


class _Watch:
    """The engine's container events for one case's label, from before its sandbox starts
    (a refused sandbox's close would remove a container that did start, so what exists
    afterwards proves nothing alone). :meth:`actions` makes a sentinel container with a
    label of its own and reads up to its ``create``: every event before it has arrived
    (the first call, at the start, waits for the stream to be live)."""

    def __init__(self, marker: str) -> None:
        self.marker = marker
        self.proc = subprocess.Popen(
            ["docker", "events", "--since", f"{time.time() - 1:.3f}", "--filter",
             "type=container", "--filter", "label=agentkit-test", "--format",
             '{{index .Actor.Attributes "agentkit-test"}} {{.Action}}'],
            stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        # from a moment ago: the engine replays what it sent since, then streams on,
        # so the sentinel is seen whenever the stream becomes live
        self.actions()

    def actions(self) -> list[str]:
        sentinel = f"{self.marker}-sentinel"
        made = subprocess.run(
            ["docker", "create", "--label", f"agentkit-test={sentinel}", "debian:bookworm-slim"],
            capture_output=True, text=True, check=True,
        )  # fmt: skip
        subprocess.run(["docker", "rm", made.stdout.strip()], capture_output=True, check=True)
        found: list[str] = []
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            label, _, action = line.strip().partition(" ")
            if label == sentinel and action == "create":
                return found
            if label == self.marker:
                found.append(action)
        raise AssertionError("docker events ended")

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()
        assert self.proc.stdout is not None
        self.proc.stdout.close()


@pytest.fixture
def watch() -> Iterator[_Watch]:
    found = _Watch(uuid.uuid4().hex)
    yield found
    found.close()


@pytest.mark.parametrize("case", sorted(_ESCAPES))
async def test_an_escaping_compose_file_is_refused_before_anything_starts(
    sandbox_factory, tmp_path: Path, case: str, watch: _Watch
) -> None:
    lines, named = _ESCAPES[case]
    marker = watch.marker
    image = _task(tmp_path, lines, marker)
    hints = ExecutionHints(image=image)
    [prepared] = await DockerSandbox.prepare([hints])
    assert isinstance(prepared, ImageError), prepared
    assert str(prepared).startswith(f"{image.compose_file}: the docker sandbox refuses")
    with pytest.raises(SandboxError) as refused:
        await sandbox_factory("docker", hints=hints)
    message = str(refused.value)
    assert str(prepared) in message, message
    assert f"service 'main': {named}" in message, message
    assert watch.actions() == []


async def test_every_refused_feature_is_named_at_once(tmp_path: Path) -> None:
    """One error lists each service's every refused feature (on the project as
    compose resolved it: the relative paths made absolute, ``extends`` merged in)."""
    main = (
        "    extends: {file: base.yaml, service: base}\n"
        "    security_opt: ['seccomp:unconfined']\n    devices: ['/dev/kmsg:/dev/kmsg']\n"
        "    ipc: host\n    uts: host\n    cgroup_parent: /\n    ports: ['8080:80', '90']\n"
        "    secrets: [key]\n    volumes: [../../escape:/x, data:/data, scratch:/s]\n"
    )
    extra = (
        "    volumes_from: ['container:someone-else']\n    network_mode: host\n"
        "    build: {context: /etc}\n"
        "secrets:\n  key: {file: /etc/shadow}\n"
        "volumes:\n  scratch: {}\n"
        "  data: {driver_opts: {type: none, o: bind, device: /}}\n"
    )
    image = _task(tmp_path, main, uuid.uuid4().hex, extra)
    (tmp_path / "task" / "environment" / "base.yaml").write_text(
        "services:\n  base:\n    cap_add: [SYS_ADMIN]\n"
    )
    [prepared] = await DockerSandbox.prepare([ExecutionHints(image=image)])
    assert isinstance(prepared, ImageError), prepared
    problems = str(prepared).splitlines()[1:]
    root = tmp_path / "task"
    assert sorted(problems) == sorted(
        f"  - {p}"
        for p in (
            f"secret 'key': file: file '/etc/shadow' is outside the task's folder ({root})",
            "volume 'data': driver_opts: only the engine's default driver is allowed",
            f"service 'main': volumes: bind mount '{tmp_path / 'escape'}' is outside the "
            f"task's folder ({root})",
            "service 'main': ipc: 'host' would join a namespace outside the project",
            "service 'main': uts: 'host' would join a namespace outside the project",
            "service 'main': devices: would open host devices",
            "service 'main': cgroup_parent: would place the containers in a cgroup of the host's",
            "service 'main': cap_add: SYS_ADMIN beyond Docker's default capabilities",
            "service 'main': security_opt: 'seccomp:unconfined' would loosen the container's "
            "confinement",
            "service 'main': ports: publishing 8080 on the host is not allowed (services reach "
            "each other on the project's network)",
            f"service 'side': build: build context '/etc' is outside the task's folder ({root})",
            "service 'side': build: Dockerfile '/etc/Dockerfile' is outside the task's folder "
            f"({root})",
            "service 'side': network_mode: 'host' would join a namespace outside the project",
            "service 'side': volumes_from: 'container:someone-else' is not a service of the "
            "project",
        )
    )


async def test_a_symlink_out_of_the_task_is_refused(
    sandbox_factory, tmp_path: Path, watch: _Watch
) -> None:
    marker = watch.marker
    image = _task(tmp_path, '    volumes: ["./data:/host"]\n', marker)
    (tmp_path / "task" / "environment" / "data").symlink_to("/")
    named = r"bind mount '.*/environment/data' \(through a symlink, to '/'\) is outside"
    with pytest.raises(SandboxError, match=named):
        await sandbox_factory("docker", hints=ExecutionHints(image=image))
    assert watch.actions() == []


async def test_a_tasks_variable_cannot_bring_back_a_refused_mount(
    sandbox_factory, tmp_path: Path, watch: _Watch
) -> None:
    """The file alone is checked before the images are made; ``up`` reads it with the
    task's variables, so the project is checked again as ``up`` reads it."""
    marker = watch.marker
    image = _task(tmp_path, '    volumes: ["${HOST_DIR:-./data}:/host"]\n', marker)
    hints = ExecutionHints(image=image, env={"HOST_DIR": "/"})
    [prepared] = await DockerSandbox.prepare([hints])
    assert not isinstance(prepared, BaseException), prepared
    with pytest.raises(ComposePolicyError, match="service 'main': volumes: bind mount '/' is"):
        await sandbox_factory("docker", hints=hints)
    assert watch.actions() == []


async def test_what_the_docker_sandbox_keeps(
    sandbox_factory, tmp_path: Path, watch: _Watch
) -> None:
    """Named volumes, tmpfs, a bind inside the task's folder, an env_file and a secret
    from it, ports without a host port, resource limits, a local logging driver: the
    project starts."""
    marker = watch.marker
    main = (
        "    volumes: [./data:/data:ro, cache:/cache]\n    tmpfs: [/scratch]\n"
        "    env_file: [task.env]\n    secrets: [token]\n    ports: ['80']\n"
        "    mem_limit: 256m\n    cap_add: [NET_RAW]\n    depends_on: [side]\n"
        "    logging: {driver: json-file, options: {max-size: 1m}}\n"
    )
    extra = "volumes:\n  cache: {}\nsecrets:\n  token: {file: ./token.txt}\n"
    image = _task(tmp_path, main, marker, extra)
    env = tmp_path / "task" / "environment"
    (env / "data").mkdir()
    (env / "data" / "hello.txt").write_text("inside\n")
    (env / "task.env").write_text("FROM_FILE=yes\n")
    (env / "token.txt").write_text("t0ken\n")
    sb = await sandbox_factory("docker", hints=ExecutionHints(image=image))
    r = await sb.exec("cat /data/hello.txt /run/secrets/token; echo $FROM_FILE; touch /scratch/x")
    assert r.ok and r.stdout.split() == ["inside", "t0ken", "yes"], (r.stdout, r.stderr)
    assert "start" in watch.actions()
    await sb.close()
    assert "destroy" in watch.actions()


async def test_include_extends_and_a_fixed_container_name_in_two_rollouts_at_once(
    sandbox_factory, tmp_path: Path, watch: _Watch
) -> None:
    """A file included and a service extended from inside the task work as in compose
    (the base's bind is relative to its own file); a ``container_name`` is each
    rollout's own, its fixed name an alias on the rollout's network, so two rollouts
    run at once."""
    marker = watch.marker
    env = tmp_path / "task" / "environment"
    (env / "common" / "data").mkdir(parents=True)
    (env / "common" / "data" / "hello.txt").write_text("from the base's folder\n")
    (env / "common" / "base.yaml").write_text(
        "services:\n  base:\n    environment: {FROM_BASE: 'yes'}\n    volumes: [./data:/data:ro]\n"
    )
    (env / "side.yaml").write_text(
        "services:\n  side:\n    image: debian:bookworm-slim\n    command: sleep infinity\n"
        f"    container_name: fixed-side\n    labels: {{agentkit-test: {marker}}}\n"
    )
    (env / "docker-compose.yaml").write_text(
        "include: [side.yaml]\nservices:\n  main:\n    image: debian:bookworm-slim\n"
        "    extends: {file: common/base.yaml, service: base}\n"
        f"    labels: {{agentkit-test: {marker}}}\n    depends_on: [side]\n"
    )
    hints = ExecutionHints(image=TaskImage(compose_file=str(env / "docker-compose.yaml")))
    boxes = await asyncio.gather(*(sandbox_factory("docker", hints=hints) for _ in range(2)))
    for sb in boxes:
        r = await sb.exec(
            "echo $FROM_BASE; cat /data/hello.txt; getent hosts side fixed-side | cut -d' ' -f1"
        )
        lines = r.stdout.splitlines()
        assert r.ok and lines[:2] == ["yes", "from the base's folder"], (r.stdout, r.stderr)
        assert len(lines) == 4 and lines[2] == lines[3], lines  # the fixed name: the side
    names = subprocess.run(
        ["docker", "ps", "--filter", f"label=agentkit-test={marker}", "--format", "{{.Names}}"],
        capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    sides = sorted(n for n in names if n.endswith("-side"))
    assert len(names) == 4 and len(sides) == 2 and sides[0] != sides[1], names
    assert "fixed-side" not in names
