"""No function over 100 lines and no module over 700 lines in agentkit and its plugins,
and no package with more modules of its own than its limit.

A long function or module holds more than one concept (docs/architecture.md: small
modules named after one concept); split it by what it does. A package with too many
modules beside each other holds rooms of its own: give them subpackages (as
``sandbox/`` has one a backend). The allowlist names only
files other work is changing now, each until that work lands; an entry that no longer
needs to be there is an error too, so the list only shrinks.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: The longest a function (or method) may be, its ``def`` line to its last line.
MAX_FUNCTION_LINES = 100
#: The longest a module may be.
MAX_MODULE_LINES = 700

#: Packages (from the repository's root) and the most modules each may hold of its own:
#: the ``.py`` files directly in it, its ``__init__`` included, its subpackages' not.
MAX_OWN_MODULES: dict[str, int] = {
    # the sandboxes' shared parts beside the backends (local/, docker/, host) (#35)
    "src/agentkit/sandbox": 12,
}

#: Files (from the repository's root) let through for now, and what they wait for.
ALLOWED: dict[str, str] = {}


def _sources() -> list[Path]:
    files = list((ROOT / "src" / "agentkit").rglob("*.py"))
    files += ROOT.glob("plugins/*/src/**/*.py")
    return sorted(files)


def too_long(path: Path, root: Path = ROOT) -> list[str]:
    """``file:line: what`` for each function of ``path`` over :data:`MAX_FUNCTION_LINES`
    lines, and for the module when it is over :data:`MAX_MODULE_LINES`."""
    text = path.read_text()
    name = path.relative_to(root).as_posix()
    found: list[str] = []
    lines = len(text.splitlines())
    if lines > MAX_MODULE_LINES:
        found.append(f"{name}: the module has {lines} lines (at most {MAX_MODULE_LINES})")
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            length = (node.end_lineno or node.lineno) - node.lineno + 1
            if length > MAX_FUNCTION_LINES:
                found.append(
                    f"{name}:{node.lineno}: {node.name} has {length} lines "
                    f"(at most {MAX_FUNCTION_LINES})"
                )
    return found


def too_full(package: Path, limit: int, root: Path = ROOT) -> list[str]:
    """``package: what`` when ``package`` holds more than ``limit`` modules of its own."""
    own = sorted(p.name for p in package.glob("*.py"))
    if len(own) <= limit:
        return []
    name = package.relative_to(root).as_posix()
    return [f"{name}: {len(own)} modules of its own (at most {limit}): {', '.join(own)}"]


def test_no_function_or_module_is_too_long() -> None:
    sources = _sources()
    assert len(sources) > 100  # the tree was found
    found = [
        line
        for path in sources
        if path.relative_to(ROOT).as_posix() not in ALLOWED
        for line in too_long(path)
    ]
    assert found == [], (
        "split these by what they do (one concept a module, a function doing one thing):\n"
        + "\n".join(found)
    )


def test_no_package_holds_too_many_modules_of_its_own() -> None:
    found = [
        line for name, limit in MAX_OWN_MODULES.items() for line in too_full(ROOT / name, limit)
    ]
    assert all((ROOT / name / "__init__.py").is_file() for name in MAX_OWN_MODULES)
    assert found == [], "give the rooms inside these packages subpackages:\n" + "\n".join(found)


def test_the_allowlist_names_only_files_still_too_long() -> None:
    stale = [name for name in ALLOWED if not (ROOT / name).is_file() or not too_long(ROOT / name)]
    assert stale == [], f"no longer too long (or gone): take them off ALLOWED: {stale}"


def test_the_check_finds_a_long_function_and_a_long_module(tmp_path: Path) -> None:
    def body(indent: str) -> str:  # a function of MAX_FUNCTION_LINES lines with its def
        return "".join(f"{indent}x{i} = {i}\n" for i in range(MAX_FUNCTION_LINES - 1))

    module = tmp_path / "probe.py"
    module.write_text(
        f"def fits() -> None:\n{body('    ')}\n\n"
        f"class C:\n    async def long(self) -> None:\n{body('        ')}        pass\n"
    )
    n = MAX_FUNCTION_LINES
    assert too_long(module, tmp_path) == [f"probe.py:{n + 4}: long has {n + 1} lines (at most {n})"]
    module.write_text("x = 1\n" * (MAX_MODULE_LINES + 1))
    assert too_long(module, tmp_path) == [
        f"probe.py: the module has {MAX_MODULE_LINES + 1} lines (at most {MAX_MODULE_LINES})"
    ]


def test_the_check_finds_a_package_with_too_many_modules(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    for name in ("__init__", "_a", "b"):
        (package / f"{name}.py").write_text("")
    (package / "sub" / "_c.py").write_text("")  # a subpackage's module is not its own
    (package / "notes.md").write_text("")
    assert too_full(package, 3, tmp_path) == []
    assert too_full(package, 2, tmp_path) == [
        "pkg: 3 modules of its own (at most 2): __init__.py, _a.py, b.py"
    ]
