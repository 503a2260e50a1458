"""Shared test setup: async tests run on asyncio; ``site`` holds the installed fixture plugins."""

import importlib.util
import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from hypothesis import settings

from agentkit.proxy import ModelProxy, shared_proxy

# Property tests check what is computed, never how fast: no per-example deadline
# (on a loaded machine one example can take 700 ms once, a wall-clock flake).
settings.register_profile("agentkit", deadline=None)
settings.load_profile("agentkit")

# tests/trainers load exports with the trainers' own packages, installed by the
# ``trainers`` nox session only (it sets AGENTKIT_TRAINERS=1)
collect_ignore = [] if os.environ.get("AGENTKIT_TRAINERS") == "1" else ["trainers"]
# tests/servers run a real vLLM (the ``servers`` nox session installs it, with the
# trainers' packages, and sets AGENTKIT_SERVERS=1)
if os.environ.get("AGENTKIT_SERVERS") != "1":
    collect_ignore.append("servers")

_spec = importlib.util.spec_from_file_location(
    "agentkit_fixture_install", Path(__file__).parent / "fixtures" / "plugins" / "install.py"
)
assert _spec is not None and _spec.loader is not None
fixture_install = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fixture_install)


@pytest.fixture(scope="session")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def proxy() -> AsyncIterator[ModelProxy]:
    """A model proxy started for the test (the proxy tests' routes are added to it)."""
    async with shared_proxy() as running:
        yield running


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Say so loudly when no test ran: CI must not read exit code 5 as success."""
    if exitstatus == pytest.ExitCode.NO_TESTS_COLLECTED:
        print("\nagentkit: no tests were collected; treating this run as a failure.")


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory holding every fixture distribution, installed for real."""
    site: Path = fixture_install.installed_site(tmp_path_factory.getbasetemp())
    return site
