"""Meta-test: docs/harnesses.md compares every harness a first-party distribution registers,
with one row per harness in each of its tables, and no row for a harness that does not exist."""

from __future__ import annotations

import re
from pathlib import Path

from agentkit import registry

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "harnesses.md"


def harness_tables(text: str) -> dict[str, list[str]]:
    """``{heading: [harness names of its rows]}`` for every table whose first column is
    ``Harness`` (the heading is the section the table is in)."""
    tables: dict[str, list[str]] = {}
    heading = "(top)"
    rows: list[str] | None = None
    for line in text.splitlines():
        if line.startswith("#"):
            heading = line.lstrip("#").strip()
        if not line.startswith("|"):
            rows = None
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if rows is None:
            if cells[0] == "Harness":
                rows = tables.setdefault(heading, [])
            continue
        if set(cells[0]) <= set("-: "):
            continue
        name = re.fullmatch(r"`([^`]+)`", cells[0])
        assert name, f"docs/harnesses.md ({heading}): row {cells[0]!r} is not a `harness` name"
        rows.append(name.group(1))
    return tables


def first_party_harnesses() -> set[str]:
    first_party = {"agentkit"} | {p.name for p in (ROOT / "plugins").iterdir() if p.is_dir()}
    return {
        name
        for plugin in registry.plugins()
        if plugin.distribution in first_party
        for name in plugin.registers.get("harness", [])
    }


def test_the_table_parser_reads_rows_under_their_heading() -> None:
    text = "## A\n\n| Harness | x |\n|---|---|\n| `chat` | y |\n\n| Other | z |\n| `no` | w |\n"
    assert harness_tables(text) == {"A": ["chat"]}


def test_every_first_party_harness_has_a_row_in_every_comparison_table() -> None:
    tables = harness_tables(DOC.read_text())
    assert len(tables) >= 3, f"docs/harnesses.md has only these harness tables: {list(tables)}"
    wanted = first_party_harnesses()
    assert {"chat", "mini-swe-agent"} <= wanted
    for heading, names in tables.items():
        missing = sorted(wanted - set(names))
        unknown = sorted(set(names) - wanted)
        twice = sorted({n for n in names if names.count(n) > 1})
        assert not missing, f"docs/harnesses.md ({heading}): add a row for {missing}"
        assert not unknown, f"docs/harnesses.md ({heading}): no such harness {unknown}"
        assert not twice, f"docs/harnesses.md ({heading}): more than one row for {twice}"
