"""Shared by every test directory of the repository (core, plugins, contrib).

Under ``CI=true`` a skipped test is a failure: CI installs everything the tests need
(``ensure_system_tools`` in noxfile.py: bubblewrap, util-linux, ripgrep, node, npm,
chromium, opencode), so a skip there would mean a test silently did not run. Elsewhere a skip
says why. The one skip CI allows is that of a test that needs root (marked
``needs_root``, or skipped by ``need_docker``: the engine is root's) while the suite
runs unprivileged on purpose (``AGENTKIT_SECURITY_USER``, set by the ``security``
nox session).
"""

from __future__ import annotations

import os
from collections.abc import Generator
from typing import Any

import pytest


def _skip_allowed(item: pytest.Item, reason: str) -> bool:
    """A test that needs root (or root's Docker engine) in a run unprivileged on purpose."""
    from agentkit.testing.sandbox_fixtures import ROOT_ONLY

    if not os.environ.get("AGENTKIT_SECURITY_USER"):
        return False
    return item.get_closest_marker("needs_root") is not None or ROOT_ONLY in reason


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: Any) -> Generator[None, Any, None]:
    outcome = yield
    report = outcome.get_result()
    if os.environ.get("CI") != "true" or not report.skipped or hasattr(report, "wasxfail"):
        return
    reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
    if _skip_allowed(item, reason):
        return
    report.outcome = "failed"
    report.longrepr = (
        f"skipped under CI=true ({reason}): CI must provide what this test needs "
        "(see ensure_system_tools in noxfile.py)"
    )
