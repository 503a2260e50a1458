"""Every import of agentkit's own modules inside a function says why it is deferred.

Imports inside functions are where import circles hide (docs/architecture.md),
so the only ones allowed defer a heavy or optional dependency, with a
``# deferred: <reason>`` comment on one of the three lines above the import.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OWN = ("agentkit", "agentkit_")


def _sources() -> list[Path]:
    files = list((ROOT / "src").rglob("*.py"))
    for group in ("plugins", "contrib"):
        files += [p for p in (ROOT / group).glob("*/src/**/*.py")]
    return sorted(files)


def undeclared_deferred_imports(path: Path, root: Path = ROOT) -> list[str]:
    """``file:line: module`` for each in-function import of our own modules without a reason."""
    text = path.read_text()
    lines = text.splitlines()
    found: list[str] = []
    for node in ast.walk(ast.parse(text)):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for inner in ast.walk(node):
            if isinstance(inner, ast.ImportFrom) and inner.level == 0:
                modules = [inner.module or ""]
            elif isinstance(inner, ast.Import):
                modules = [alias.name for alias in inner.names]
            else:
                continue
            if not any(m == "agentkit" or m.startswith(OWN) for m in modules):
                continue
            above = lines[max(0, inner.lineno - 4) : inner.lineno - 1]
            if not any("# deferred:" in line for line in above):
                found.append(f"{path.relative_to(root)}:{inner.lineno}: {', '.join(modules)}")
    return sorted(set(found))


def test_every_in_function_import_of_our_modules_says_why() -> None:
    sources = _sources()
    assert len(sources) > 100  # the tree was found
    missing = [line for path in sources for line in undeclared_deferred_imports(path)]
    assert missing == [], (
        "in-function imports of agentkit's own modules need a '# deferred: <reason>' "
        "comment (a heavy or optional dependency) or a move to the top of the module:\n"
        + "\n".join(missing)
    )


def test_the_check_finds_an_undeclared_import(tmp_path: Path) -> None:
    module = tmp_path / "probe.py"
    module.write_text(
        "def f() -> None:\n"
        "    from agentkit.runs import open\n"
        "\n"
        "def g() -> None:\n"
        "    # deferred: a reason\n"
        "    import agentkit.proxy\n"
        "    from agentkit_fleet import x\n"
        "    import json\n"
    )
    assert undeclared_deferred_imports(module, tmp_path) == ["probe.py:2: agentkit.runs"]
