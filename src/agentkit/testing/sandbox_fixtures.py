"""Pytest fixtures for sandboxes (re-exported by agentkit's pytest plugin).

- ``sandbox_factory``: an async function building started sandboxes under
  ``tmp_path`` (``await sandbox_factory("local", hints=..., allow_network=...)``),
  all closed at the end of the test.
- ``local_sandbox``: a started bubblewrap sandbox (the test is skipped when
  bubblewrap is not installed).
- ``host_sandbox``: a started host-mode sandbox.
- ``docker_engine``: use it (or ``requires_docker``) in tests that need a
  Docker engine: they are skipped, saying why, when none answers, and fail
  instead under ``CI=true``.
- ``need_slirp4netns()`` and ``outward_address()``: for tests of a local
  sandbox allowed the network (the same skip-or-fail rule; the host's
  address that sandbox reaches it by).
- ``image_tool`` (or ``requires_image_tool``): the same for a tool the local
  sandbox can make images with (Docker, Podman or Buildah); ``image_cache``:
  a directory of exported image roots shared by the test session's workers.

They are async fixtures for anyio's pytest plugin on the asyncio backend
(the sandboxes use asyncio subprocesses).
"""

from __future__ import annotations

import asyncio
import itertools
import os
import random
import shutil
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any, NoReturn

import pytest

from agentkit import registry
from agentkit._errors import missing_extra
from agentkit._sandbox import ExecutionHints
from agentkit.images._tools import find_image_tool
from agentkit.sandbox import SandboxError
from agentkit.sandbox._base import BaseSandbox

__all__ = [
    "ROOT_ONLY",
    "docker_engine",
    "docker_unavailable",
    "host_pids_with_arg",
    "host_sandbox",
    "image_cache",
    "image_tool",
    "image_tool_unavailable",
    "local_sandbox",
    "need_docker",
    "need_image_tool",
    "need_slirp4netns",
    "outward_address",
    "requires_bwrap",
    "requires_docker",
    "requires_image_tool",
    "sandbox_factory",
    "unique_sleep_arg",
    "wait_gone",
    "wait_present",
]

#: Skip marker for tests that need a real bubblewrap.
requires_bwrap = pytest.mark.skipif(
    shutil.which("bwrap") is None, reason="bubblewrap (bwrap) is not installed"
)


_docker_reason: list[str | None] = []


def docker_unavailable() -> str | None:
    """Why no Docker engine can be used here (None when one answers); checked once."""
    if _docker_reason:
        return _docker_reason[0]
    import importlib.util
    import subprocess

    reason: str | None = None
    if importlib.util.find_spec("aiodocker") is None:
        reason = missing_extra("the docker sandbox", "aiodocker", "docker")
    elif shutil.which("docker") is None:
        reason = "the docker CLI is not installed (apt-get install docker.io)"
    else:
        try:
            proc = subprocess.run(
                ["docker", "info", "--format", "{{.ServerVersion}}"],
                capture_output=True,
                text=True,
                timeout=30,
            )
        except subprocess.TimeoutExpired:
            reason = "the Docker engine did not answer 'docker info' within 30 s"
        else:
            if proc.returncode != 0 or not proc.stdout.strip():
                err = (proc.stderr or proc.stdout).strip().splitlines()
                reason = f"no Docker engine answers: {err[-1] if err else 'docker info failed'}"
    _docker_reason.append(reason)
    return reason


#: How the skip of a test that needs root (or root's Docker engine) starts when the
#: suite runs unprivileged on purpose (``AGENTKIT_SECURITY_USER`` set): the one skip
#: the repository's CI allows.
ROOT_ONLY = "root only, and this run is unprivileged on purpose: "


def _skip_unless_ci(tests: str, reason: str) -> NoReturn:
    """Skip the running test saying ``reason`` (what this machine lacks); under ``CI=true``,
    fail instead: CI must run the ``tests`` tests (``Docker``, ``image-root``, ...)."""
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI must run the {tests} tests, but {reason}")
    pytest.skip(reason)


def need_docker() -> None:
    """Skip the running test (saying why) without a Docker engine; under ``CI=true``, fail
    (unless the suite runs unprivileged on purpose: the engine is root's)."""
    reason = docker_unavailable()
    if reason is None:
        return
    if os.environ.get("AGENTKIT_SECURITY_USER"):
        pytest.skip(f"{ROOT_ONLY}{reason}")
    _skip_unless_ci("Docker", reason)


@pytest.fixture
def docker_engine() -> None:
    """Skip the test (saying why) without a Docker engine; under ``CI=true``, fail."""
    need_docker()


#: Marker form of the ``docker_engine`` fixture.
requires_docker = pytest.mark.usefixtures("docker_engine")


def image_tool_unavailable() -> str | None:
    """Why the local sandbox cannot make images here (None when it can)."""
    try:
        find_image_tool()
    except SandboxError as exc:
        return str(exc)
    return None


def need_slirp4netns() -> None:
    """Skip the running test (saying why) without slirp4netns, which gives a local
    sandbox allowed the network a namespace of its own; under ``CI=true``, fail."""
    if shutil.which("slirp4netns") is not None:
        return
    reason = "slirp4netns is not installed (apt-get install slirp4netns)"
    _skip_unless_ci("sandbox network", reason)


def outward_address() -> str:
    """This machine's address on its outward interface (not a loopback one): what a
    sandbox with network of its own reaches the host by. Skips the test without one."""
    import socket

    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        probe.connect(("192.0.2.1", 9))  # no packet is sent: this only picks a route
        return str(probe.getsockname()[0])
    except OSError as exc:
        pytest.skip(f"no outward network interface here ({exc})")
    finally:
        probe.close()


def need_image_tool() -> None:
    """Skip the running test (saying why) when no tool can make images; under CI, fail."""
    reason = image_tool_unavailable()
    if shutil.which("bwrap") is None:
        reason = "bubblewrap (bwrap) is not installed"
    if reason is None:
        return
    _skip_unless_ci("image-root", reason)


@pytest.fixture
def image_tool() -> None:
    """Skip the test (saying why) when no tool can make images; under ``CI=true``, fail."""
    need_image_tool()


#: Marker form of the ``image_tool`` fixture.
requires_image_tool = pytest.mark.usefixtures("image_tool")


@pytest.fixture(scope="session")
def image_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the session's sandboxes keep exported image roots (shared by xdist workers,
    whose exports of one image wait for each other)."""
    base = tmp_path_factory.getbasetemp()
    shared = base.parent if base.name.startswith("popen-gw") else base
    return shared / "agentkit-image-roots"


def host_pids_with_arg(arg: str) -> list[int]:
    """Host pids whose command line has ``arg`` as one argument (seen from the host's /proc)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if arg.encode() in argv:
            found.append(int(entry))
    return found


def unique_sleep_arg() -> str:
    """A ``sleep`` duration unlikely to be used by any other process (to find it in /proc)."""
    return f"{random.randint(10_000, 99_999)}.{random.randint(100, 999)}"


async def wait_present(arg: str, seconds: float = 5.0) -> list[int]:
    """Wait until some host process has ``arg`` (a forked child may not have exec'd yet)."""
    deadline = time.monotonic() + seconds
    pids = host_pids_with_arg(arg)
    while not pids and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
        pids = host_pids_with_arg(arg)
    return pids


async def wait_gone(arg: str, seconds: float = 5.0) -> list[int]:
    """Wait until no host process has ``arg``; return those still there after ``seconds``."""
    deadline = time.monotonic() + seconds
    pids = host_pids_with_arg(arg)
    while pids and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
        pids = host_pids_with_arg(arg)
    return pids


SandboxFactoryFixture = Callable[..., Awaitable[BaseSandbox]]


@pytest.fixture
async def sandbox_factory(tmp_path: Path) -> AsyncIterator[SandboxFactoryFixture]:
    """Build started sandboxes by name; every one is closed after the test."""
    made: list[BaseSandbox] = []
    counter = itertools.count()

    async def make(
        name: str = "local",
        *,
        hints: ExecutionHints | None = None,
        model_endpoint: str | None = None,
        root: Path | None = None,
        **options: Any,
    ) -> BaseSandbox:
        if name == "local" and shutil.which("bwrap") is None:
            pytest.skip("bubblewrap (bwrap) is not installed")
        if name == "docker":
            need_docker()
        n = next(counter)
        factory = registry.resolve_sandbox(name, **options)
        sandbox: BaseSandbox = factory(
            root=root or tmp_path / f"sandbox-{n}",
            hints=hints or ExecutionHints(),
            rollout_id=f"test-{n}",
            model_endpoint=model_endpoint,
        )
        made.append(sandbox)
        await sandbox.setup()
        return sandbox

    try:
        yield make
    finally:
        for sandbox in made:
            await sandbox.close()


@pytest.fixture
async def local_sandbox(sandbox_factory: SandboxFactoryFixture) -> BaseSandbox:
    """A started local (bubblewrap) sandbox with default hints."""
    return await sandbox_factory("local")


@pytest.fixture
async def host_sandbox(sandbox_factory: SandboxFactoryFixture) -> BaseSandbox:
    """A started host-mode sandbox with default hints."""
    return await sandbox_factory("host")
