"""The worked example in docs/writing-plugins.md, installed the way users install it.

The example distribution is pip-installed into a fresh target directory and
the real ``agentkit`` CLI runs in a subprocess with it on the path: the core
discovers it only through its entry point.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "plugin" / "agentkit-example"


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    target = tmp_path_factory.mktemp("site")
    # Built from a copy: setuptools builds in the source tree (build/, *.egg-info), which
    # must not be the repository's, shared with whatever else reads it meanwhile.
    source = tmp_path_factory.mktemp("example") / EXAMPLE.name
    shutil.copytree(EXAMPLE, source, ignore=shutil.ignore_patterns("build", "*.egg-info"))
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "--target",
            str(target),
            str(source),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, f"pip install of the example failed:\n{done.stderr}{done.stdout}"
    env = dict(os.environ)
    env["PYTHONPATH"] = str(target)
    env.pop("AGENTKIT_PLUGINS", None)
    env.pop("AGENTKIT_DISABLE_PLUGINS", None)
    return env


def agentkit(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agentkit", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_plugin_appears_in_agentkit_plugins(installed: dict[str, str]) -> None:
    proc = agentkit(installed, "plugins")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    (example,) = [p for p in data["plugins"] if p["name"] == "example"]
    assert example["distribution"] == "agentkit-example"
    assert example["version"] == "0.1.0"
    assert example["tasksets"] == ["reverse"]
    assert example["harnesses"] == ["reverser"]
    assert example["rubrics"] == ["brevity"]
    assert example["sandboxes"] == ["echo"]


def test_plugin_names_are_listed(installed: dict[str, str]) -> None:
    proc = agentkit(installed, "list", "harnesses")
    assert proc.returncode == 0, proc.stderr
    lines = {line.split()[0]: line for line in proc.stdout.splitlines() if line.strip()}
    assert "reverser" in lines and "chat" in lines
    assert "A harness without a model" in lines["reverser"]


def test_plugin_command_is_added(installed: dict[str, str]) -> None:
    proc = agentkit(installed, "reverse-word", "agentkit")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "tiktnega"


def test_plugin_runs_through_the_registry(installed: dict[str, str]) -> None:
    code = """
import asyncio, json
from agentkit import registry
ts = registry.resolve_taskset("reverse:2")
h = registry.resolve_harness("reverser", uppercase=False)
seen = []
task = ts.get_task("reverse:t1")
res = asyncio.run(h.run(task, on_event=seen.append))
contrib = [r.name for r in registry.resolve_rubric_contributors()]
print(json.dumps({"output": res.output, "target": task.target, "events": len(seen),
                  "contributors": contrib, "n": len(ts)}))
"""
    proc = subprocess.run(
        [sys.executable, "-c", code], env=installed, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["output"] == out["target"] == "ssenrah"
    assert out["events"] == 1
    assert "brevity" in out["contributors"]
    assert out["n"] == 2


def test_bad_option_is_one_clear_error(installed: dict[str, str]) -> None:
    code = "from agentkit import registry; registry.resolve_harness('reverser', uppercase='yes')"
    proc = subprocess.run(
        [sys.executable, "-c", code], env=installed, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode != 0
    assert "option 'uppercase' for harness 'reverser': expected bool" in proc.stderr
