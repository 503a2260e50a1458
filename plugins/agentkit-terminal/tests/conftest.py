"""Fixtures of the terminal plugin's tests (helpers live in terminal_helpers.py)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def anyio_backend() -> str:
    return "asyncio"
