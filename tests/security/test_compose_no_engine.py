"""A compose task with no container engine and no daemon, as an ordinary user too.

The ``security`` nox session runs this as an unprivileged user who can reach no
image registry, no Docker daemon and no image store of root's: its images come
from root's ``docker save`` archive of the stand-in image, imported with
``agentkit images import`` (as root, the run saves that archive itself).
``agentkit run`` then runs a compose task (the main service and a database
sidecar with a healthcheck, reached by its name and its alias) on the local
sandbox with no docker, podman or buildah on ``PATH``, two rollouts at once
(each database on the same port, in its own rollout's network): both must score
1.0 and leave no process of their own behind.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from _no_engines import no_engines

from agentkit.testing.sandbox_fixtures import requires_bwrap

pytestmark = [requires_bwrap]

TASK = Path(__file__).resolve().parents[1] / "fixtures" / "compose" / "sidecar-by-name"


def _left_by(owner: bytes) -> list[int]:
    """Live processes whose environment names ``owner`` as their sandbox's owner, or
    that run this task's database."""
    found = []
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                environ = f.read()
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read()
        except OSError:
            continue
        if owner in environ or b"/srv/app/db.py" in cmdline:
            found.append(int(entry))
    return found


def test_a_compose_task_runs_on_imported_images_with_no_engine(
    imported_images: Path, tmp_path: Path
) -> None:
    pytest.importorskip("agentkit_harbor", reason="the Harbor plugin is not installed")
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    (tasks / TASK.name).symlink_to(TASK)
    out = tmp_path / "run"
    env = {**os.environ, "NO_COLOR": "1", **no_engines(tmp_path)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "agentkit", "run", f"harbor:{tasks}", "oracle",
         "--sandbox", "local", "-S", f"image_cache={imported_images}",
         "-n", "2", "-c", "2", "--out", str(out), "--json", "--max-retries", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    stdout, stderr = proc.communicate(timeout=600)
    assert proc.returncode == 0, stdout[-3000:] + stderr[-3000:]
    # two rollouts at once, each database on the same port of its own rollout's network
    records = [json.loads(x) for x in (out / "rollouts.jsonl").read_text().splitlines()]
    assert [(r["reward"], r["error"]) for r in records] == [(1.0, None)] * 2, records
    # Closed with the run: nothing it started (every sandbox process carries its owner,
    # the run's pid and start time) is left, nor the database sidecar.
    assert _left_by(f"AGENTKIT_SANDBOX_OWNER={proc.pid}:".encode()) == []
