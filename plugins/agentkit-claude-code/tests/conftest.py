"""Fixtures for the Claude Code harness tests: the real binary.

Tests that run claude are skipped, with the reason, when the binary is absent
(``python3 -m nox -s tests`` installs it: ``npm install
@anthropic-ai/claude-code@2.1.328``, and sets ``AGENTKIT_CLAUDE_CODE_BIN``);
under ``CI=true`` they fail instead.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from agentkit_claude_code import BINARY_ENV, CLAUDE_CODE_VERSION, NPM_PACKAGE, find_claude

from agentkit import HarnessError
from agentkit.programs import ProgramBinary

HERE = Path(__file__).parent


@pytest.fixture(scope="session")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="session")
def claude_bin() -> ProgramBinary:
    """The claude binary (as the harness finds it), or a skip saying how to install it."""
    try:
        found = find_claude(cwd=HERE)
    except HarnessError as exc:
        reason = (
            f"Claude Code is not installed (npm install {NPM_PACKAGE}@{CLAUDE_CODE_VERSION} "
            f"or set {BINARY_ENV}): {exc}"
        )
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI must run the Claude Code tests, but {reason}")
        pytest.skip(reason)
    # the harness (and the CLI it spawns) find the same binary from any working directory
    os.environ.setdefault(BINARY_ENV, str(found.path))
    return found
