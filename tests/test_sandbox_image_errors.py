"""The local sandbox without a tool to make images: one clear error per task, and the way out.

These run where no image tool is installed too (they hide the tools).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from agentkit.sandbox import SandboxError
from agentkit.testing.sandbox_fixtures import requires_bwrap

pytestmark = [requires_bwrap]

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "harbor-docker"


def _agentkit_run(
    *args: str, env: dict[str, str]
) -> tuple[subprocess.CompletedProcess[str], list[dict[str, object]]]:
    out = Path(args[args.index("--out") + 1])
    proc = subprocess.run(
        [sys.executable, "-m", "agentkit", "run", *args, "--json", "--max-retries", "0"],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "NO_COLOR": "1", **env},
        check=False,
    )
    lines = (out / "rollouts.jsonl").read_text().splitlines() if out.exists() else []
    return proc, [json.loads(line) for line in lines]


@pytest.fixture
def harbor() -> None:
    pytest.importorskip("agentkit_harbor", reason="the Harbor plugin is not installed")


def _bin_dir_without_image_tools(tmp_path: Path) -> Path:
    """A PATH with what the local sandbox needs, and no docker, podman or buildah."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("bwrap", "nsenter", "setpriv", "prlimit", "env", "sh", "bash"):
        found = subprocess.run(["sh", "-c", f"command -v {name}"], capture_output=True, text=True)
        if found.stdout.strip():
            (bin_dir / name).symlink_to(found.stdout.strip())
    return bin_dir


@pytest.mark.usefixtures("harbor")
def test_without_an_image_tool_each_task_says_what_to_install(tmp_path: Path) -> None:
    bin_dir = _bin_dir_without_image_tools(tmp_path)
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    (tasks / "tools-in-image").symlink_to(EXAMPLES / "tools-in-image")
    proc, records = _agentkit_run(
        f"harbor:{tasks}", "oracle", "--out", str(tmp_path / "run"), env={"PATH": str(bin_dir)}
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    [record] = records
    error = str(record["error"])
    assert "no container tool can produce the task's image" in error
    assert "apt-get install docker.io" in error and "podman" in error and "buildah" in error
    assert "-S image=host" in error
    # On purpose, on the host's userland: it runs (and fails its test, as it should).
    proc, records = _agentkit_run(
        f"harbor:{tasks}",
        "oracle",
        "--out",
        str(tmp_path / "host"),
        "-S",
        "image=host",
        env={"PATH": str(bin_dir)},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    [record] = records
    assert record["reward"] == 0.0 and record["error_kind"] != "sandbox_prepare", record


@pytest.mark.parametrize("missing", ["podman", "buildah"])
def test_a_named_tool_that_is_missing_is_one_clear_error(
    missing: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from agentkit.sandbox._imagetools import find_image_tool

    monkeypatch.setenv("PATH", str(tmp_path))  # a PATH where neither tool is
    with pytest.raises(SandboxError, match=f"{missing} is not installed.*apt-get install"):
        find_image_tool(missing)
