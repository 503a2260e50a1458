"""Every distribution depends on what it imports, and imports what it depends on.

Read from the sources and each ``pyproject.toml``: the core, every plugin
under ``plugins/``, every bridge under ``contrib/`` and the example plugin. A
third-party module imported anywhere in a distribution's ``src`` (outside
``if TYPE_CHECKING:``) must come from a requirement it declares, in its
dependencies or one of its extras; every requirement in its dependencies must
be imported somewhere in its ``src``. The core's tests import only what the
core declares (the ``test`` extra, mostly).
"""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: Distribution directories: the core and every first-party distribution beside it.
DISTRIBUTIONS = [
    ROOT,
    *sorted(p.parent for p in ROOT.glob("plugins/*/pyproject.toml")),
    *sorted(p.parent for p in ROOT.glob("contrib/*/pyproject.toml")),
    ROOT / "examples" / "plugin" / "agentkit-example",
]

#: Import names that are not their distribution's name (after normalising).
DISTRIBUTION_OF = {"yaml": "pyyaml", "fleet": "fleet-python"}

#: Imports a distribution does not declare, and why that is right.
UNDECLARED = {
    # _plain() reads the OmegaConf configs SkyRL passes; where there is one,
    # omegaconf is installed, and the import is guarded for where there is not.
    ("agentkit-skyrl", "omegaconf"),
}


def normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_name(requirement: str) -> str:
    match = re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", requirement.strip())
    assert match, requirement
    return normalise(match.group(0))


def imported(node: ast.AST) -> set[str]:
    """Top-level names of the absolute imports under ``node``, not those for type checking."""
    names: set[str] = set()
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
            for stmt in child.orelse:
                names |= imported(ast.Module(body=[stmt], type_ignores=[]))
            continue
        if isinstance(child, ast.Import):
            names |= {alias.name.split(".")[0] for alias in child.names}
        elif isinstance(child, ast.ImportFrom) and child.level == 0 and child.module:
            names.add(child.module.split(".")[0])
        names |= imported(child)
    return names


def third_party(files: list[Path], local: set[str]) -> dict[str, list[Path]]:
    """Third-party module name -> the files importing it."""
    found: dict[str, list[Path]] = {}
    for path in files:
        for name in imported(ast.parse(path.read_text(), filename=str(path))):
            if name not in sys.stdlib_module_names and name not in local:
                found.setdefault(name, []).append(path)
    return found


def project(directory: Path) -> tuple[str, set[str], set[str]]:
    """(name, dependencies, dependencies and extras) of the distribution in ``directory``."""
    meta = tomllib.loads((directory / "pyproject.toml").read_text())["project"]
    runtime = {requirement_name(r) for r in meta.get("dependencies", [])}
    extras = {
        requirement_name(r) for reqs in meta.get("optional-dependencies", {}).values() for r in reqs
    }
    return normalise(meta["name"]), runtime, runtime | extras


def sources(directory: Path) -> tuple[list[Path], set[str]]:
    """The distribution's source files, and the names of its own top-level packages."""
    src = directory / "src"
    return sorted(src.rglob("*.py")), {p.name for p in src.iterdir() if p.is_dir()}


def label(directory: Path) -> str:
    return "agentkit" if directory == ROOT else directory.name


@pytest.mark.parametrize("directory", DISTRIBUTIONS, ids=label)
def test_every_import_is_declared(directory: Path) -> None:
    name, _runtime, declared = project(directory)
    files, own = sources(directory)
    assert files, f"no sources under {directory / 'src'}"
    missing = {
        module: [str(p.relative_to(ROOT)) for p in paths]
        for module, paths in third_party(files, own).items()
        if normalise(DISTRIBUTION_OF.get(module, module)) not in declared | {name}
        and (name, module) not in UNDECLARED
    }
    where = (directory / "pyproject.toml").relative_to(ROOT)
    assert not missing, f"{where} does not declare {missing}"


@pytest.mark.parametrize("directory", DISTRIBUTIONS, ids=label)
def test_every_dependency_is_imported(directory: Path) -> None:
    _name, runtime, _declared = project(directory)
    files, own = sources(directory)
    used = {normalise(DISTRIBUTION_OF.get(m, m)) for m in third_party(files, own)}
    unused = sorted(runtime - used)
    where = (directory / "pyproject.toml").relative_to(ROOT)
    assert not unused, f"{where} depends on {unused}, which its sources never import"


def test_the_core_tests_import_only_what_the_core_declares() -> None:
    name, _runtime, declared = project(ROOT)
    tests = ROOT / "tests"
    # tests/trainers and tests/servers run in their own sessions (nox -s trainers,
    # nox -s servers), which install the trainers' packages they import (TRAINER_PINS
    # in noxfile.py) and vLLM's, not the test extra
    own_sessions = {"trainers", "servers"}
    files = sorted(
        p for p in tests.rglob("*.py") if p.relative_to(tests).parts[0] not in own_sessions
    )
    local = {p.stem for p in files} | {p.name for p in tests.rglob("*") if p.is_dir()}
    local.add("agentkit_only_on_the_driver")  # written by test_executor_ray.py itself
    # tests/security's red team runs Harbor tasks through the Harbor plugin: the tests
    # and security sessions install every plugin of this repository beside the core
    security = tests / "security"
    missing = {
        module: sorted({str(p.relative_to(ROOT)) for p in paths})[:3]
        for module, paths in third_party(files, local).items()
        if normalise(DISTRIBUTION_OF.get(module, module)) not in declared | {name}
        and not (module == "agentkit_harbor" and all(security in p.parents for p in paths))
    }
    assert not missing, f"pyproject.toml's test extra does not declare {missing}"
