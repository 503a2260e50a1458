"""``agentkit.missing_extra``: one message for every missing optional dependency, and
every extra it names is one its distribution declares."""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

from agentkit import missing_extra

ROOT = Path(__file__).resolve().parents[1]


def test_the_message_names_what_needs_it_the_package_and_the_command() -> None:
    assert missing_extra("writing parquet", "pyarrow", "parquet") == (
        "writing parquet needs the 'pyarrow' package: pip install 'agentkit[parquet]'"
    )
    assert missing_extra("reading from S3", "boto3") == (
        "reading from S3 needs the 'boto3' package: pip install boto3"
    )
    assert missing_extra(
        "the Fleet platform", "fleet-python", "platform", dist="agentkit-fleet", note="see docs"
    ) == (
        "the Fleet platform needs the 'fleet-python' package: "
        "pip install 'agentkit-fleet[platform]' (see docs)"
    )


def _calls() -> list[tuple[Path, int, str, str | None]]:
    """Every ``missing_extra(...)`` call in agentkit and the plugins: (file, line,
    distribution, extra)."""
    found = []
    sources = [ROOT / "src", *sorted((ROOT / "plugins").glob("*/src"))]
    for path in sorted(p for src in sources for p in src.rglob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            if not (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id == "missing_extra"
            ):
                continue
            keywords = {k.arg: k.value for k in node.keywords}
            dist_node = keywords.get("dist")
            extra_node = node.args[2] if len(node.args) > 2 else keywords.get("extra")
            dist = ast.literal_eval(dist_node) if dist_node is not None else "agentkit"
            extra = ast.literal_eval(extra_node) if extra_node is not None else None
            found.append((path.relative_to(ROOT), node.lineno, dist, extra))
    return found


def _extras(dist: str) -> set[str]:
    project = (
        ROOT / "pyproject.toml"
        if dist == "agentkit"
        else ROOT / "plugins" / dist / ("pyproject.toml")
    )
    data = tomllib.loads(project.read_text())
    assert data["project"]["name"] == dist, project
    return set(data["project"].get("optional-dependencies", {}))


def test_every_extra_a_message_names_is_declared() -> None:
    calls = _calls()
    assert len(calls) >= 9, calls  # the core's hints and the Fleet plugin's
    wrong = [
        f"{path}:{line}: {dist}[{extra}]"
        for path, line, dist, extra in calls
        if extra is not None and extra not in _extras(dist)
    ]
    assert wrong == [], "install hints naming an extra their distribution lacks"
