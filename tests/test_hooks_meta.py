"""Meta-tests: every hookspec is documented and exercised by a test (as datasette does)."""

from __future__ import annotations

import re
from pathlib import Path

from agentkit import hookspecs

ROOT = Path(__file__).resolve().parents[1]
HOOKS = sorted(name for name in dir(hookspecs) if name.startswith("agentkit_"))


def test_there_are_hooks() -> None:
    assert "agentkit_register_harnesses" in HOOKS
    assert len(HOOKS) >= 5


def test_every_hook_is_documented() -> None:
    text = (ROOT / "docs" / "hooks.md").read_text()
    headings = set(re.findall(r"^##+ +`?(agentkit_\w+)", text, flags=re.M))
    assert headings == set(HOOKS), (
        f"undocumented: {set(HOOKS) - headings}; stale: {headings - set(HOOKS)}"
    )


def test_every_hook_has_a_docstring() -> None:
    for name in HOOKS:
        assert (getattr(hookspecs, name).__doc__ or "").strip(), name


def test_every_hook_is_exercised_by_a_test() -> None:
    """Some test module or test fixture plugin (not this file, not the example plugin,
    which implements every hook by design) implements or calls each hook."""
    this = Path(__file__).resolve()
    sources = [p for p in ROOT.glob("tests/**/*.py") if p.resolve() != this]
    sources += list(ROOT.glob("plugins/*/tests/**/*.py"))
    used = {h: [p for p in sources if re.search(rf"\b{h}\b", p.read_text())] for h in HOOKS}
    missing = [h for h, files in used.items() if not files]
    assert not missing, f"hooks no test exercises: {missing}"


def test_the_example_plugin_implements_every_hook() -> None:
    example = (ROOT / "examples/plugin/agentkit-example/src/agentkit_example/plugin.py").read_text()
    missing = [h for h in HOOKS if not re.search(rf"^def {h}\(", example, flags=re.M)]
    assert not missing, f"the example plugin does not implement: {missing}"
