"""Shared by every test directory of the repository (core, plugins, contrib).

Under ``CI=true`` a skipped test is a failure: CI installs everything the tests need
(``ensure_system_tools`` in noxfile.py: bubblewrap, util-linux, ripgrep, node, npm,
chromium, opencode; the ``test`` extras: datasets, pyarrow, boto3, moto, fleet-python...),
so a skip there would mean a test silently did not run. That holds for a test skipped at
setup (a skip or skipif mark, a fixture that skips: a setup error) as for one that skips
as it runs (a failure), and for a whole module skipped while it is collected (a
module-level ``pytest.importorskip``: a collection error).
Elsewhere a skip says why. The one skip CI allows is that of a test that needs root
(marked ``needs_root``, or skipped by ``need_docker``: the engine is root's) while the
suite runs unprivileged on purpose (``AGENTKIT_SECURITY_USER``, set by the ``security``
nox session).
"""

from __future__ import annotations

import os
from collections.abc import Generator
from typing import Any

import pytest


def _skip_allowed(node: pytest.Item | pytest.Collector, reason: str) -> bool:
    """A test (or module) that needs root (or root's Docker engine) in a run unprivileged
    on purpose."""
    from agentkit.testing.sandbox_fixtures import ROOT_ONLY

    if not os.environ.get("AGENTKIT_SECURITY_USER"):
        return False
    return node.get_closest_marker("needs_root") is not None or ROOT_ONLY in reason


def _skip_reason(longrepr: Any) -> str:
    """The reason of a skip report (its longrepr is ``(path, line, reason)``)."""
    return str(longrepr[2]) if isinstance(longrepr, tuple) else str(longrepr)


def _ci_failure(reason: str) -> str:
    return (
        f"skipped under CI=true ({reason}): CI must provide what this test needs "
        "(see ensure_system_tools and the test extras in noxfile.py)"
    )


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: Any) -> Generator[None, Any, None]:
    outcome = yield
    report = outcome.get_result()
    if os.environ.get("CI") != "true" or not report.skipped or hasattr(report, "wasxfail"):
        return
    reason = _skip_reason(report.longrepr)
    if _skip_allowed(item, reason):
        return
    report.outcome = "failed"
    report.longrepr = _ci_failure(reason)


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> Generator[None, Any, None]:
    """A module skipped while it is collected (``pytest.importorskip`` at module level,
    ``pytest.skip(allow_module_level=True)``) fails under CI as a skipped test does: it is
    reported as a collection error, with the reason."""
    outcome = yield
    report = outcome.get_result()
    if os.environ.get("CI") != "true" or not report.skipped:
        return
    reason = _skip_reason(report.longrepr)
    if _skip_allowed(collector, reason):
        return
    report.outcome = "failed"
    report.longrepr = _ci_failure(reason)
