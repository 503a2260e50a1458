"""The local sandbox without a tool to make images: one clear error per task, and the way out.

These run where no image tool is installed too (they hide the tools).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from agentkit.sandbox import SandboxError
from agentkit.testing.sandbox_fixtures import requires_bwrap, requires_docker

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
    from agentkit.images._tools import find_image_tool

    monkeypatch.setenv("PATH", str(tmp_path))  # a PATH where neither tool is
    with pytest.raises(SandboxError, match=f"{missing} is not installed.*apt-get install"):
        find_image_tool(missing)


def _task_on_image(tasks: Path, reference: str) -> None:
    """A Harbor task that runs on a prebuilt image (its ``docker_image``)."""
    task = tasks / "on-an-image"
    (task / "tests").mkdir(parents=True)
    (task / "solution").mkdir()
    (task / "task.toml").write_text(
        f'schema_version = "1.4"\n[task]\nname = "agentkit/on-an-image"\n'
        f'[environment]\ndocker_image = "{reference}"\nnetwork_mode = "no-network"\n'
    )
    (task / "instruction.md").write_text("Write ok to ok.txt.\n")
    (task / "solution" / "solve.sh").write_text("#!/bin/sh\necho ok > ok.txt\n")
    (task / "tests" / "test.sh").write_text(
        "#!/bin/sh\ntest -f ok.txt && echo 1 > /logs/verifier/reward.txt\n"
    )


@requires_docker
@pytest.mark.usefixtures("harbor")
def test_a_tool_passed_over_is_named_with_why_when_the_next_one_cannot_get_the_image(
    tmp_path: Path,
) -> None:
    """Docker installed and holding the task's image, Podman installed, agentkit's
    docker extra (aiodocker) missing: Podman is used and cannot pull the image, and the
    error says Docker was passed over and what to install for it."""
    if shutil.which("podman") is None:
        if os.environ.get("CI") == "true":
            pytest.fail("CI must run the Podman image tests, but podman is not installed")
        pytest.skip("podman is not installed (apt-get install podman)")
    # Docker has it; no registry serves it (nothing listens on port 1), so Podman cannot.
    reference = f"localhost:1/agentkit-test/docker-only:{uuid.uuid4().hex[:12]}"
    subprocess.run(["docker", "tag", "debian:bookworm-slim", reference], check=True)
    try:
        tasks = tmp_path / "tasks"
        _task_on_image(tasks, reference)
        # This agentkit cannot import aiodocker, as without `pip install 'agentkit[docker]'`.
        site = tmp_path / "site"
        site.mkdir()
        (site / "sitecustomize.py").write_text('import sys\nsys.modules["aiodocker"] = None\n')
        proc, records = _agentkit_run(
            f"harbor:{tasks}",
            "oracle",
            "--out",
            str(tmp_path / "run"),
            env={"PYTHONPATH": str(site)},
        )
    finally:
        subprocess.run(["docker", "rmi", reference], capture_output=True, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    [record] = records
    error = str(record["error"])
    assert f"pulling {reference} failed (podman)" in error, error
    assert (
        "image tools tried, in order: docker: installed, but talking to it needs the "
        "'aiodocker' package: pip install 'agentkit[docker]'; then podman, which failed as above"
    ) in error, error
