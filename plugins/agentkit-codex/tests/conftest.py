"""Fixtures for the Codex harness tests: the real binary, process and secret checks.

Tests that run codex are skipped, with the reason, when the binary is absent
(``python3 -m nox -s tests`` installs it: ``npm install @openai/codex@0.169.0``,
and sets ``AGENTKIT_CODEX_BIN``); under ``CI=true`` they fail instead.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from agentkit_codex import BINARY_ENV, CODEX_VERSION, NPM_PACKAGE, find_codex

from agentkit import HarnessError
from agentkit.programs import ProgramBinary

HERE = Path(__file__).parent


@pytest.fixture(scope="session")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="session")
def codex_bin() -> ProgramBinary:
    """The codex binary (as the harness finds it), or a skip saying how to install it."""
    try:
        found = find_codex(cwd=HERE)
    except HarnessError as exc:
        reason = (
            f"the Codex CLI is not installed (npm install {NPM_PACKAGE}@{CODEX_VERSION} "
            f"or set {BINARY_ENV}): {exc}"
        )
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI must run the Codex tests, but {reason}")
        pytest.skip(reason)
    # the harness (and the CLI it spawns) find the same binary from any working directory
    os.environ.setdefault(BINARY_ENV, str(found.path))
    return found
