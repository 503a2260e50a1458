"""Fixtures for the mini-swe-agent harness tests: the real installation and its runtime.

Tests that run mini are skipped, with the reason, only when it is not
installed (``python3 -m nox -s tests`` installs it with
``python -m agentkit_mini_swe_agent install`` and sets
``AGENTKIT_MINI_SWE_AGENT``); under ``CI=true`` they fail instead.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from agentkit_mini_swe_agent import (
    BINARY_ENV,
    MINI_SWE_AGENT_VERSION,
    MiniSweAgentInstall,
    MiniSweAgentRuntime,
    find_mini_swe_agent,
    portable_runtime,
)

from agentkit import HarnessError

HERE = Path(__file__).parent


@pytest.fixture(scope="session")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="session")
def mini_install() -> MiniSweAgentInstall:
    """The mini-swe-agent installation (as the harness finds it), or a skip saying how
    to install it."""
    try:
        found = find_mini_swe_agent(cwd=HERE)
    except HarnessError as exc:
        message = (
            f"mini-swe-agent is not installed (python -m agentkit_mini_swe_agent install, "
            f"or set {BINARY_ENV}): {exc}"
        )
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    # the harness finds the same installation from any working directory
    os.environ.setdefault(BINARY_ENV, str(found.python))
    return found


@pytest.fixture(scope="session")
def mini_runtime(mini_install: MiniSweAgentInstall) -> MiniSweAgentRuntime:
    """The portable runtime of that installation (built once, in the cache)."""
    return portable_runtime(mini_install)


@pytest.fixture(scope="session")
def pinned(mini_install: MiniSweAgentInstall) -> None:
    """The tests that compare exact output need the pinned version."""
    assert mini_install.version == MINI_SWE_AGENT_VERSION
