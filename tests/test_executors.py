"""Executors without a cluster: Ray stays an optional extra, never imported unless used."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )


def test_import_and_a_local_run_never_import_ray(tmp_path: Path) -> None:
    tasks = tmp_path / "t.jsonl"
    tasks.write_text(json.dumps({"id": "1", "input": "q", "target": "a"}) + "\n")
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"default": {"content": "a"}}))
    code = f"""
import sys
import agentkit, agentkit.executors, agentkit.cli
from agentkit import AgentEnv
env = AgentEnv.from_names("jsonl:{tasks}", "chat")
results = env.run(model="scripted:{script}", out={str(tmp_path / "run")!r}, progress=False)
assert len(results.rollouts) == 1, results.rollouts
print(sorted(m for m in sys.modules if m == "ray" or m.startswith("ray.")))
"""
    done = _python(code)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_the_ray_executor_without_ray_says_how_to_install_it(tmp_path: Path) -> None:
    tasks = tmp_path / "t.jsonl"
    tasks.write_text(json.dumps({"id": "1", "input": "q"}) + "\n")
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"default": {"content": "a"}}))
    code = f"""
import sys
sys.modules["ray"] = None  # as if Ray were not installed
from agentkit.cli import main
sys.argv = ["agentkit", "run", "jsonl:{tasks}", "chat", "--model", "scripted:{script}",
            "--out", {str(tmp_path / "run")!r}, "--executor", "ray"]
main()
"""
    done = _python(code)
    assert done.returncode != 0
    assert "pip install 'agentkit[ray]'" in done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    ("given", "told"),
    [
        (["--ray-address", "h:1"], "--ray-address needs --executor ray"),
        (["--ray-init", "num_cpus=2"], "--ray-init needs --executor ray"),
        (
            ["--executor", "ray", "--ray-init", "address=h:1"],
            "--ray-init address: give the Ray cluster to join with --ray-address",
        ),
        (["--executor", "ray", "--ray-init", "num_cpus"], "--ray-init 'num_cpus': expected "
         "KEY=VALUE (an argument of ray.init)"),
    ],
)  # fmt: skip
def test_ray_options_need_the_ray_executor(tmp_path: Path, given: list[str], told: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "agentkit", "run", "jsonl:x.jsonl", "chat", *given],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=tmp_path,
    )
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    assert f"Error: {told}\n" in done.stderr, done.stderr
