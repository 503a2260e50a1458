"""The local sandbox makes and exports task images with Podman and with Buildah too.

Each tool builds a small Dockerfile of its own (a ``RUN``, ``ENV``, ``WORKDIR``,
``COPY`` and ``HEALTHCHECK``), exports the image's root once, and a rollout runs on that root under
bubblewrap. Docker's path is covered by ``test_sandbox_image.py``. The tools are
real (Debian's podman and buildah, installed by the tests session with the
offline stand-in base images loaded into their store).
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import uuid
from pathlib import Path

import pytest

from agentkit._sandbox import ExecutionHints, TaskImage
from agentkit.sandbox import SandboxError
from agentkit.sandbox._imagetools import TOOLS, find_image_tool
from agentkit.sandbox.local import LocalSandbox

pytestmark = [pytest.mark.anyio, pytest.mark.xdist_group("image-roots")]


def need(tool: str) -> None:
    """Skip (saying why) when ``tool`` or bubblewrap is missing; under ``CI=true``, fail."""
    missing = [name for name in (tool, "bwrap") if shutil.which(name) is None]
    if not missing:
        return
    reason = f"{' and '.join(missing)} not installed (apt-get install {' '.join(missing)})"
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI must run the {tool} image tests, but {reason}")
    pytest.skip(reason)


def write_task_image(where: Path, tool: str) -> TaskImage:
    """A Dockerfile no other test builds (so this tool really builds it)."""
    context = where / "environment"
    context.mkdir(parents=True)
    (context / "data.txt").write_text(f"copied for {tool}\n")
    (context / "Dockerfile").write_text(
        "FROM debian:bookworm-slim\n"
        f"LABEL org.agentkit.test={uuid.uuid4().hex}\n"
        f"RUN echo 'built by {tool}' > /built.txt\n"
        "COPY data.txt /srv/data.txt\n"
        f"ENV MADE_WITH={tool}\n"
        "WORKDIR /srv\n"
        "HEALTHCHECK --interval=1s CMD test -f /srv/data.txt\n"
    )
    return TaskImage(dockerfile=str(context / "Dockerfile"), context=str(context))


@pytest.mark.parametrize("tool", ["podman", "buildah"])
async def test_a_rollout_runs_on_an_image_the_tool_built_and_exported(
    tool: str, tmp_path: Path
) -> None:
    need(tool)
    image = write_task_image(tmp_path / "task", tool)
    box = LocalSandbox(
        root=tmp_path / "rollout",
        hints=ExecutionHints(image=image),
        rollout_id=f"{tool}-test",
        image_tool=tool,
        image_cache=str(tmp_path / "cache"),
    )
    await box.setup()
    made = box.image_root.reference if box.image_root is not None else None
    try:
        assert box.image_root is not None and box.image_root.tool == tool
        # WORKDIR is read from the image (commands start in hints.workdir, which the
        # Harbor taskset takes from the Dockerfile)
        assert box.image_root.config.workdir == "/srv"
        # Built in Docker's format, which keeps HEALTHCHECK (OCI's drops it); waited for.
        check = box.image_root.config.healthcheck
        assert check is not None and check.test == ("CMD-SHELL", "test -f /srv/data.txt")
        r = await box.exec("cat /built.txt /srv/data.txt; echo $MADE_WITH; id -u")
        assert r.ok, r.stderr
        assert r.stdout.splitlines() == [
            f"built by {tool}",
            f"copied for {tool}",
            tool,
            "0",
        ]
    finally:
        await box.close()
        if made is not None:  # each run builds a new image: do not keep it
            subprocess.run([tool, "rmi", made], capture_output=True, check=False)


def test_auto_takes_podman_when_docker_is_not_installed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    need("podman")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("podman", "buildah"):
        (bin_dir / name).symlink_to(shutil.which(name) or name)
    monkeypatch.setenv("PATH", str(bin_dir))
    assert find_image_tool().name == "podman"
    (bin_dir / "podman").unlink()
    assert find_image_tool().name == "buildah"


def test_an_export_that_yields_no_archive_is_a_clear_error(tmp_path: Path) -> None:
    """A tool that exits 0 with no archive (as ``buildah unshare`` did as root on some
    kernels) is one SandboxError naming the tool, not a tar traceback that ends the run."""
    fake = tmp_path / "podman"
    fake.write_text('#!/bin/sh\ncase "$1" in create) echo c1;; esac\nexit 0\n')
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    tool = TOOLS["podman"](str(fake))
    with pytest.raises(SandboxError, match="exporting the image with podman gave no readable"):
        tool.export("some-image", tmp_path / "root", None)
