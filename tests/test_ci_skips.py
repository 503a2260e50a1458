"""Under ``CI=true`` a skip is a failure: the repository's root ``conftest.py``.

Each test runs pytest in-process (pytester) on a few generated modules, with the
root conftest itself loaded as the run's plugin (the file, not a copy of its hooks),
once with ``CI=true`` and once without, and reads the outcome.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

from agentkit.testing.sandbox_fixtures import ROOT_ONLY

pytest_plugins = ["pytester"]

ROOT_CONFTEST = Path(__file__).resolve().parents[1] / "conftest.py"

PASSES = """
def test_passes():
    pass
"""
#: A module skipped while it is collected: what it imports is missing.
IMPORTS_WHAT_IS_MISSING = """
import pytest

pytest.importorskip("agentkit_no_such_module_ci_skips")

def test_never_collected():
    pass
"""
RUNTIME_SKIP = """
import pytest

def test_skips():
    pytest.skip("no such tool here")

@pytest.mark.xfail(reason="a known bug", strict=True)
def test_xfails():
    assert False
"""

#: Skips at setup, where most of this suite's happen: skip and skipif marks (on a
#: test, a parameter and a module), a fixture that skips (function- and module-scoped,
#: as the sandbox fixtures do when a tool is missing), a unittest skip.
SETUP_SKIPS = """
import unittest

import pytest

pytestmark = pytest.mark.skipif(False, reason="never")


@pytest.mark.skip(reason="marked off")
def test_skip_mark():
    pass


@pytest.mark.skipif(True, reason="no such tool here")
def test_skipif_mark():
    pass


@pytest.mark.parametrize("n", [1, pytest.param(2, marks=pytest.mark.skip(reason="param off"))])
def test_param(n):
    pass


@pytest.fixture
def tool():
    pytest.skip("the tool is missing")


def test_skipping_fixture(tool):
    pass


@pytest.fixture(scope="module")
def server():
    pytest.skip("the server is missing")


def test_module_fixture_one(server):
    pass


def test_module_fixture_two(server):
    pass


class TestUnit(unittest.TestCase):
    @unittest.skip("unittest off")
    def test_unit(self):
        pass
"""


def _root_conftest() -> ModuleType:
    """The repository's root conftest.py, loaded from its file as a plugin module."""
    spec = importlib.util.spec_from_file_location("agentkit_root_conftest", ROOT_CONFTEST)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _run(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, *, ci: bool
) -> pytest.RunResult:
    """pytest on the generated modules with the root conftest's hooks, under CI or not."""
    monkeypatch.delenv("AGENTKIT_SECURITY_USER", raising=False)
    if ci:
        monkeypatch.setenv("CI", "true")
    else:
        monkeypatch.delenv("CI", raising=False)
    return pytester.runpytest("-rA", "-p", "no:cacheprovider", plugins=[_root_conftest()])


@pytest.mark.parametrize("ci", [True, False], ids=["ci", "not-ci"])
def test_a_module_skipped_while_collected_fails_under_ci(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, ci: bool
) -> None:
    pytester.makepyfile(test_passes=PASSES, test_imports_what_is_missing=IMPORTS_WHAT_IS_MISSING)
    result = _run(pytester, monkeypatch, ci=ci)
    if ci:
        # a collection error, with the skip's reason, and the run fails
        assert result.ret == pytest.ExitCode.INTERRUPTED, result.stdout.str()
        result.assert_outcomes(errors=1)
        result.stdout.fnmatch_lines(
            [
                "ERROR test_imports_what_is_missing.py - skipped under CI=true "
                "(*could not import 'agentkit_no_such_module_ci_skips'*): "
                "CI must provide what this test needs*"
            ]
        )
    else:
        # elsewhere a plain skip that says why, beside the test that passed
        assert result.ret == pytest.ExitCode.OK, result.stdout.str()
        result.assert_outcomes(passed=1, skipped=1)
        result.stdout.fnmatch_lines(
            ["SKIPPED [[]1[]] test_imports_what_is_missing.py:*could not import*"]
        )
        assert "skipped under CI=true" not in result.stdout.str()


@pytest.mark.parametrize("ci", [True, False], ids=["ci", "not-ci"])
def test_a_test_skipped_while_it_runs_fails_under_ci(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, ci: bool
) -> None:
    pytester.makepyfile(test_runtime_skip=RUNTIME_SKIP)
    result = _run(pytester, monkeypatch, ci=ci)
    if ci:
        assert result.ret == pytest.ExitCode.TESTS_FAILED, result.stdout.str()
        # an expected failure is not a skip: it stays one
        result.assert_outcomes(failed=1, xfailed=1)
        result.stdout.fnmatch_lines(
            [
                "FAILED test_runtime_skip.py::test_skips - skipped under CI=true "
                "(Skipped: no such tool here): CI must provide what this test needs*"
            ]
        )
    else:
        assert result.ret == pytest.ExitCode.OK, result.stdout.str()
        result.assert_outcomes(skipped=1, xfailed=1)
        assert "skipped under CI=true" not in result.stdout.str()


def test_under_ci_a_root_only_skip_is_allowed_in_a_run_unprivileged_on_purpose(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The one skip CI allows: a test (or module) that needs root, while the suite runs
    unprivileged on purpose (the ``security`` session); any other skip still fails."""
    pytester.makeini("[pytest]\nmarkers =\n    needs_root: needs root\n")
    pytester.makepyfile(
        test_root_module=f"""
import pytest

pytest.skip({ROOT_ONLY + "the engine is root's"!r}, allow_module_level=True)
""",
        test_root_tests="""
import pytest

@pytest.mark.needs_root
def test_needs_root():
    pytest.skip("not root")

def test_other():
    pytest.skip("no such tool here")
""",
    )
    monkeypatch.setenv("CI", "true")
    monkeypatch.setenv("AGENTKIT_SECURITY_USER", "65534")
    result = pytester.runpytest("-rA", "-p", "no:cacheprovider", plugins=[_root_conftest()])
    result.assert_outcomes(skipped=2, failed=1)
    result.stdout.fnmatch_lines(
        [
            "FAILED test_root_tests.py::test_other - skipped under CI=true "
            "(Skipped: no such tool here)*"
        ]
    )


@pytest.mark.parametrize("ci", [True, False], ids=["ci", "not-ci"])
def test_a_test_skipped_at_setup_fails_under_ci(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, ci: bool
) -> None:
    """A skip mark, a skipif that holds, a skipped parameter, a fixture that skips (of a
    test or of a module), a unittest skip: each fails under CI, naming its reason; the
    test that ran is unaffected."""
    pytester.makepyfile(test_setup_skips=SETUP_SKIPS)
    result = _run(pytester, monkeypatch, ci=ci)
    reasons = {
        "test_skip_mark": "marked off",
        "test_skipif_mark": "no such tool here",
        "test_param[[]2[]]": "param off",
        "test_skipping_fixture": "the tool is missing",
        "test_module_fixture_one": "the server is missing",
        "test_module_fixture_two": "the server is missing",
    }
    if ci:
        assert result.ret == pytest.ExitCode.TESTS_FAILED, result.stdout.str()
        # a skip at setup is a setup error; the unittest skip (raised as its test runs) a failure
        result.assert_outcomes(passed=1, errors=6, failed=1)
        result.stdout.fnmatch_lines_random(
            [
                f"ERROR test_setup_skips.py::{name} - skipped under CI=true "
                f"(Skipped: {reason}): CI must provide what this test needs*"
                for name, reason in reasons.items()
            ]
            + [
                "FAILED test_setup_skips.py::TestUnit::test_unit - skipped under CI=true "
                "(Skipped: unittest off)*"
            ]
        )
    else:
        assert result.ret == pytest.ExitCode.OK, result.stdout.str()
        result.assert_outcomes(passed=1, skipped=7)
        assert "skipped under CI=true" not in result.stdout.str()
