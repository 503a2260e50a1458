"""The local sandbox makes and exports task images with Podman and with Buildah too.

Each tool builds a small Dockerfile of its own (a ``RUN``, ``ENV``, ``WORKDIR``,
``COPY`` and ``HEALTHCHECK``), exports the image's root once, and a rollout runs on that root under
bubblewrap. Docker's path is covered by ``test_sandbox_image.py``. The tools are
real (Debian's podman and buildah, installed by the tests session with the
offline stand-in base images loaded into their store).
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import shutil
import signal
import socket
import stat
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from agentkit._sandbox import ExecutionHints, TaskImage
from agentkit.images import ImageError
from agentkit.images._tools import TOOLS, buildah_export_name, find_image_tool
from agentkit.sandbox import SandboxError
from agentkit.sandbox._proctree import find_tree
from agentkit.sandbox._reaper import OWNER_LABEL, reap_orphans
from agentkit.sandbox.local import LocalSandbox
from agentkit.sandbox.local._image import export_labels
from agentkit.testing.sandbox_fixtures import need_docker

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


def crun_refuses_build_steps(tool: str, where: Path) -> str | None:
    """What crun says when ``tool`` cannot run a build step with it here (as on a
    kernel with hybrid cgroups), None when it can: the host's truth, found without agentkit."""
    where.mkdir()
    (where / "Dockerfile").write_text("FROM debian:bookworm-slim\nRUN true\n")
    tag = f"localhost/agentkit-test-crun:{uuid.uuid4().hex[:12]}"
    build = "build" if tool == "podman" else "bud"
    done = subprocess.run(
        [tool, build, "--no-cache", "--runtime", "crun", "-t", tag, str(where)],
        capture_output=True,
        text=True,
        check=False,
    )
    subprocess.run([tool, "rmi", "-f", tag], capture_output=True, check=False)
    return None if done.returncode == 0 else done.stdout + done.stderr


def crun_conf(where: Path) -> Path:
    """A containers.conf that makes crun the OCI runtime (given by CONTAINERS_CONF)."""
    conf = where / "containers.conf"
    conf.write_text('[engine]\nruntime = "crun"\n')
    return conf


@pytest.mark.parametrize("tool", ["podman", "buildah"])
async def test_with_crun_as_the_runtime_the_image_is_still_made(
    tool: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """crun refuses a kernel's hybrid cgroups (this CI machine's): the build is made
    with a runtime that works here, and its log says so; where crun works, with crun."""
    need(tool)
    need("crun")
    refused = crun_refuses_build_steps(tool, tmp_path / "oracle")
    monkeypatch.setenv("CONTAINERS_CONF", str(crun_conf(tmp_path)))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))  # where the build log goes
    image = write_task_image(tmp_path / "task", tool)
    box = LocalSandbox(
        root=tmp_path / "rollout",
        hints=ExecutionHints(image=image),
        rollout_id=f"{tool}-crun",
        image_tool=tool,
        image_cache=str(tmp_path / "cache"),
    )
    await box.setup()
    made = box.image_root.reference if box.image_root is not None else None
    try:
        r = await box.exec("cat /built.txt")
        assert r.ok and r.stdout == f"built by {tool}\n", r
    finally:
        await box.close()
        if made is not None:
            subprocess.run([tool, "rmi", made], capture_output=True, check=False)
    [log] = (tmp_path / "xdg" / "agentkit" / "image-logs").glob("task-*.log")
    switched = [line for line in log.read_text().splitlines() if "cannot run build steps" in line]
    if refused is None:
        assert switched == []
    else:
        [line] = switched
        says = f"# agentkit: {tool} cannot run build steps here with its default runtime (crun)"
        assert says in line, line
        assert line.endswith("building with --runtime runc instead"), line


@pytest.mark.parametrize("tool", ["podman", "buildah"])
async def test_with_only_crun_the_image_is_made_or_one_error_says_what_to_change(
    tool: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """crun as the runtime, and a stand-in of the tool that refuses other runtimes and
    chroot isolation, as a host with only crun and no chroot isolation would: where crun
    refuses the host (this CI machine's hybrid cgroups), one error with what each way
    said and what to change; where crun works, the image."""
    need(tool)
    need("crun")
    refused = crun_refuses_build_steps(tool, tmp_path / "oracle")
    real = shutil.which(tool)
    stand_in = tmp_path / "bin" / tool
    stand_in.parent.mkdir()
    stand_in.write_text(
        "#!/bin/sh\n"
        'for a in "$@"; do case "$a" in\n'
        '  --runtime|--isolation) echo "Error: $a is not available on this host" >&2; exit 125;;\n'
        "esac; done\n"
        f'exec {real} "$@"\n'
    )
    stand_in.chmod(0o755)
    monkeypatch.setenv("CONTAINERS_CONF", str(crun_conf(tmp_path)))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("PATH", f"{stand_in.parent}:{os.environ['PATH']}")
    box = LocalSandbox(
        root=tmp_path / "rollout",
        hints=ExecutionHints(image=write_task_image(tmp_path / "task", tool)),
        rollout_id=f"{tool}-no-runtime",
        image_tool=tool,
        image_cache=str(tmp_path / "cache"),
    )
    if refused is None:
        try:
            await box.setup()
            assert box.image_root is not None
            assert (await box.exec("cat /built.txt")).stdout == f"built by {tool}\n"
        finally:
            await box.close()
            if box.image_root is not None:
                subprocess.run([tool, "rmi", box.image_root.reference], check=False)
        return
    try:
        with pytest.raises(ImageError) as failed:
            await box.setup()
    finally:
        await box.close()
    message = str(failed.value)
    assert f"{tool} cannot run a build step on this host: " in message
    assert "with its default runtime (crun): " in message and "hybrid mode" in message
    assert "with --runtime runc: Error: --runtime is not available on this host" in message
    assert "with --isolation chroot: Error: --isolation is not available" in message
    assert "make " in message and "[engine] runtime of containers.conf" in message
    assert "systemd.unified_cgroup_hierarchy=1" in message


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


@pytest.mark.parametrize("tool", ["docker", "podman"])
async def test_the_container_an_image_is_exported_through_names_its_owner(
    tool: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Docker's and Podman's export goes through a container made for it: labelled as the
    docker sandbox's are (its owner, this process), so that one left behind by an
    orchestrator killed mid-export is found by ``agentkit sandbox prune``."""
    need(tool)
    real = shutil.which(tool)
    calls = tmp_path / "calls.log"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    shim = bin_dir / tool
    shim.write_text(f'#!/bin/sh\nprintf "%s\\n" "$*" >> {calls}\nexec {real} "$@"\n')
    shim.chmod(shim.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    box = LocalSandbox(
        root=tmp_path / "rollout",
        hints=ExecutionHints(image=TaskImage(image="debian:bookworm-slim")),
        rollout_id=f"{tool}-export",
        image_tool=tool,
        image_cache=str(tmp_path / "cache"),  # a cache of its own: exported now
    )
    try:
        await box.setup()
        assert (await box.exec("test -f /etc/debian_version")).ok
    finally:
        await box.close()
    made = [line for line in calls.read_text().splitlines() if line.startswith("create ")]
    assert len(made) == 1, calls.read_text()
    owner = f"{socket.gethostname()}:{os.getpid()}:"
    assert "--label org.agentkit.sandbox=local-image-export" in made[0]
    assert f"--label org.agentkit.owner={owner}" in made[0]
    assert "--label org.agentkit.rollout=image-export" in made[0]


#: An orchestrator exporting an image as the local sandbox does (its tool from
#: ``_export_tool``), that says ``exporting`` once the first bytes arrive (having
#: written the id of the container it exports through to ``made``); with
#: ``nopdeathsig``, its commands are started without setpriv.
_EXPORTER = """
import asyncio, sys
from pathlib import Path
from agentkit.images import _tools
from agentkit.sandbox.local._image import _export_tool
tool_name, reference, dest, how, made = sys.argv[1:]
if how == "nopdeathsig":
    _tools._setpriv = lambda: None
run = _tools.ImageTool.run
def noting(self, argv):
    done = run(self, argv)
    if argv[1] in ("create", "from"):
        Path(made).write_text(done.stdout.strip().splitlines()[-1])
    return done
_tools.ImageTool.run = noting
real = _tools.extract_root
def first_bytes(stream, into, id_base):
    stream.peek(1)
    print("exporting", flush=True)
    return real(stream, into, id_base)
_tools.extract_root = first_bytes
tool = asyncio.run(_export_tool(tool_name))
tool.export(reference, Path(dest), None)
"""


@pytest.mark.parametrize(
    ("tool", "how"),
    [
        ("podman", "pdeathsig"),
        ("buildah", "pdeathsig"),
        ("docker", "pdeathsig"),
        ("podman", "nopdeathsig"),
    ],
)
def test_an_export_ends_with_the_orchestrator_killed_mid_way(
    tool: str, how: str, tmp_path: Path
) -> None:
    """An orchestrator killed (SIGKILL) mid-export leaves no export running: ``podman
    export`` holds its own pipe's read end, so it would block for ever on the full pipe,
    its container locked. The kernel kills it with the orchestrator (setpriv's
    pdeathsig); started without that, the next start's reaper ends it (its environment
    names its dead owner). The tool answers afterwards."""
    need(tool)
    if tool == "docker":
        need_docker()
    made = tmp_path / "made"
    child = subprocess.Popen(
        [sys.executable, "-c", _EXPORTER, tool, "debian:bookworm-slim", str(tmp_path / "r"),
         how, str(made)],
        stdout=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    assert child.stdout is not None
    try:
        assert child.stdout.readline() == "exporting\n"
        tree = find_tree([child.pid]) - {child.pid}
        assert tree, "the export runs as the orchestrator's child"
        waits = {pid: os.pidfd_open(pid) for pid in tree}
    finally:
        child.kill()
        child.wait()
        child.stdout.close()
    try:
        if how == "nopdeathsig":
            assert reap_orphans() >= 1
        for pid, fd in waits.items():
            ready, _, _ = select.select([fd], [], [], 30)
            assert ready, f"{tool}'s export (pid {pid}) outlived the orchestrator killed mid-way"
    finally:
        for fd in waits.values():
            with contextlib.suppress(ProcessLookupError):
                signal.pidfd_send_signal(fd, signal.SIGKILL)
            os.close(fd)
    # the container it exported through (what `agentkit sandbox prune` removes)
    removed = subprocess.run(
        [tool, "rm", *(["-f"] if tool != "buildah" else []), made.read_text()],
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert removed.returncode == 0, removed.stderr
    answered = subprocess.run([tool, "images"], capture_output=True, timeout=60, check=False)
    assert answered.returncode == 0, answered.stderr


def _buildah_names() -> list[str]:
    listed = subprocess.run(["buildah", "containers", "--json"], capture_output=True,
                            text=True, timeout=60, check=True)  # fmt: skip
    return [c["containername"] for c in json.loads(listed.stdout or "null") or []]


def test_prune_removes_the_buildah_export_of_a_killed_orchestrator_only(tmp_path: Path) -> None:
    """Buildah's working containers have no labels: the one an export goes through is
    named after its owner. ``agentkit sandbox prune`` (no Docker engine answering) removes
    the one an orchestrator killed mid-export left, and keeps a live owner's."""
    need("buildah")
    made = tmp_path / "made"
    child = subprocess.Popen(
        [sys.executable, "-c", _EXPORTER, "buildah", "debian:bookworm-slim",
         str(tmp_path / "r"), "pdeathsig", str(made)],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    with child:
        assert child.stdout is not None
        assert child.stdout.readline() == "exporting\n"
        child.kill()
    left = made.read_text()
    owner = f"{socket.gethostname()}_{child.pid}_"
    assert left.startswith(f"agentkit-export_{owner}") and left in _buildah_names()
    live = buildah_export_name(export_labels()[OWNER_LABEL])  # this process's
    subprocess.run(["buildah", "from", "--pull-never", "--name", live, "debian:bookworm-slim"],
                   capture_output=True, timeout=60, check=True)  # fmt: skip
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "agentkit", "sandbox", "prune"],
            capture_output=True, text=True, timeout=300, check=False,
            env={**os.environ, "NO_COLOR": "1", "DOCKER_HOST": f"unix://{tmp_path}/none.sock"},
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        assert f"removed buildah container {left}" in proc.stdout.splitlines(), proc.stdout
        assert live not in proc.stdout
        names = _buildah_names()
        assert left not in names and live in names
    finally:
        subprocess.run(["buildah", "rm", live], capture_output=True, timeout=60, check=False)
