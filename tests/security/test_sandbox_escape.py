"""A hostile agent inside the sandbox tries the known ways out; every one is contained.

Run as root in CI (where the kernel would let host root do every one of
these) and as an unprivileged user. On the docker sandbox they run against the
engine CI starts (``dockerd --userns-remap=default``): the container's root
is a remapped host uid, and the sandbox refuses engines where it is not.
Each probe runs inside a real sandbox and the host's value is read before
and after: the probe must fail inside and the host must be unchanged. The
probes are written once and run on every sandbox kind listed in ``SANDBOXES``.
"""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
from pathlib import Path

import attrs
import pytest

from agentkit._sandbox import ExecResult, ExecutionHints, TaskImage
from agentkit.sandbox._base import BaseSandbox
from agentkit.sandbox.local import LocalSandbox
from agentkit.testing.sandbox_fixtures import (
    need_image_tool,
    requires_bwrap,
    unique_sleep_arg,
    wait_present,
)

pytestmark = [pytest.mark.anyio]

#: Sandbox kinds the probes run on, with what each needs (the docker one needs an
#: engine; the sandbox_factory fixture skips, or fails under CI, without one).
SANDBOXES = [
    pytest.param("local", marks=requires_bwrap, id="local"),
    pytest.param("docker", id="docker"),
    # The local sandbox on an image's root (its own overlay, a uid range, commands
    # with Docker's default capabilities in a user namespace of their own).
    pytest.param("local-image", marks=requires_bwrap, id="local-image"),
    # A sidecar service of a compose task on the local sandbox (its own image root and
    # namespaces, inside the rollout's network holder): the probes run in the sidecar.
    pytest.param("local-compose-sidecar", marks=requires_bwrap, id="local-compose-sidecar"),
]
#: Options per kind: the docker probes run in an image with python3 (the ptrace probe).
OPTIONS = {"docker": {"default_image": "python:3.11-slim"}}
#: The image the image-root probes run on (python3 for the ptrace probe).
PROBE_IMAGE = TaskImage(image="python:3.11-slim")

CORE_PATTERN = Path("/proc/sys/kernel/core_pattern")


#: A compose file whose sidecar ("side", on the probe image) only sleeps.
SIDECAR_COMPOSE = (
    Path(__file__).parents[1] / "fixtures" / "compose" / "cases" / "environment" / "sleepers.yaml"
)


@pytest.fixture(params=SANDBOXES)
async def sandbox(request: pytest.FixtureRequest, sandbox_factory) -> BaseSandbox:
    if request.param in ("local-image", "local-compose-sidecar"):
        if os.environ.get("AGENTKIT_SECURITY_USER"):
            # This machine's images (the offline stand-ins) are in root's Docker engine
            # and root's Podman store, and an ordinary user's Podman would pull from a
            # registry CI cannot reach: the user imports root's archive of them instead
            # (agentkit images import), and its sandboxes run on those roots, no engine.
            cache = request.getfixturevalue("imported_images")
        else:
            need_image_tool()
            cache = request.getfixturevalue("image_cache")
        if request.param == "local-compose-sidecar":
            hints = ExecutionHints(
                image=TaskImage(compose_file=str(SIDECAR_COMPOSE)), env={"SLEEP": "infinity"}
            )
            main = await sandbox_factory("local", hints=hints, image_cache=str(cache))
            assert isinstance(main, LocalSandbox) and main._project is not None
            side = main._project._services["side"].box
            assert isinstance(side, LocalSandbox)
            return side
        box: BaseSandbox = await sandbox_factory(
            "local", hints=ExecutionHints(image=PROBE_IMAGE), image_cache=str(cache)
        )
        return box
    box = await sandbox_factory(request.param, **OPTIONS.get(request.param, {}))
    return box


#: What every probe's shell prints first (a builtin, before the probe): no marker, the
#: probe never started (its shell missing, an exec the sandbox could not even begin).
PROBE_RAN = "agentkit-probe-ran"


async def _probe(sandbox: BaseSandbox, cmd: str) -> ExecResult:
    """Run ``cmd`` inside and show that it ran: its shell printed :data:`PROBE_RAN`
    first, and no program it names was missing (a probe that never started, or whose
    program the image lacks, tests nothing). The marker is taken out of the stdout."""
    r = await sandbox.exec(["bash", "-c", f"echo {PROBE_RAN}; {cmd}"])
    out = (r.stdout + r.stderr).strip()
    assert r.stdout.startswith(f"{PROBE_RAN}\n"), (
        f"{cmd!r} never ran inside the sandbox (exit {r.exit_code}): {out}"
    )
    missing = r.exit_code == 127 or "command not found" in out
    assert not missing, f"{cmd!r} could not run inside the sandbox (a tool is missing): {out}"
    return attrs.evolve(r, stdout=r.stdout[len(PROBE_RAN) + 1 :])


async def _fails(sandbox: BaseSandbox, cmd: str) -> str:
    """Run ``cmd`` inside (:func:`_probe`: it must have run); it must fail. Returns its
    output for the assertion message."""
    r = await _probe(sandbox, cmd)
    out = (r.stdout + r.stderr).strip()
    assert r.exit_code != 0, f"{cmd!r} succeeded inside the sandbox: {out}"
    return out


def test_probes_run_as_root_where_ci_runs() -> None:
    """Under CI the probes must run as root at least once: that is where they matter."""
    if os.environ.get("CI") == "true" and os.environ.get("AGENTKIT_SECURITY_USER") is None:
        assert os.geteuid() == 0, "CI runs the sandbox escape probes as root"


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


async def _sleep_pids(arg: str) -> list[int]:
    """Host pids of ``sleep arg`` itself, once it has been executed."""
    for _ in range(500):
        found = [p for p in await wait_present(arg) if _comm(p) == "sleep"]
        if found:
            return found
        await asyncio.sleep(0.01)
    return []


async def test_inside_root_is_never_host_root(sandbox: BaseSandbox) -> None:
    r = await sandbox.exec(["bash", "-c", "id -u"])
    assert r.ok, r.stderr
    assert r.stdout == "0\n"  # root inside, as tasks expect
    # The kernel's own view from the host: which host uid the sandbox's root runs as.
    arg = unique_sleep_arg()
    proc = await sandbox.start(["sleep", arg])
    try:
        # The sleep itself (not the host-side process that started it in the sandbox).
        [pid] = await _sleep_pids(arg)
        with open(f"/proc/{pid}/status") as f:
            uids = next(line for line in f if line.startswith("Uid:")).split()[1:]
    finally:
        await proc.kill()
    assert "0" not in uids, f"the sandbox's root is the host's root ({uids})"
    if os.geteuid() != 0 and sandbox.name == "local":
        assert set(uids) == {str(os.geteuid())}


async def test_cannot_set_the_hosts_core_pattern(sandbox: BaseSandbox) -> None:
    before = CORE_PATTERN.read_text()
    await _fails(sandbox, "echo '|/tmp/agentkit-pwned %p' > /proc/sys/kernel/core_pattern")
    # Not through a shell: python3 (every probe image has it) opens and writes the file.
    write = "open('/proc/sys/kernel/core_pattern', 'w').write('|/tmp/agentkit-pwned')"
    await _fails(sandbox, f'python3 -c "{write}"')
    assert CORE_PATTERN.read_text() == before


async def test_kernel_knobs_are_read_only_or_absent(sandbox: BaseSandbox) -> None:
    for knob in (
        "/proc/sys/vm/drop_caches",
        "/proc/sys/kernel/hostname",
        "/proc/sys/kernel/modprobe",
        "/proc/sys/kernel/sysrq",
        "/proc/sysrq-trigger",
        "/sys/kernel/uevent_helper",
    ):
        await _fails(sandbox, f"echo 3 > {knob}")
    # Under cgroup v2 /sys/fs/cgroup is the kernel's; under v1 a container's is a
    # tmpfs of its own (a file written there is only a file), its controllers read-only.
    kind = (await _probe(sandbox, "stat -f -c %T /sys/fs/cgroup")).stdout.strip()
    if kind != "tmpfs":
        await _fails(sandbox, "echo 3 > /sys/fs/cgroup/cgroup.procs")
    else:
        await _fails(sandbox, "echo 3 > /sys/fs/cgroup/memory/cgroup.procs")
    r = await _probe(sandbox, "find /proc/sys /sys -writable -type f ! -fstype tmpfs 2>/dev/null")
    assert r.stdout.strip() == "", f"writable kernel knobs inside: {r.stdout[:500]}"


async def test_cannot_rename_the_host(sandbox: BaseSandbox) -> None:
    before = socket.gethostname()
    await _fails(sandbox, "hostname agentkit-pwned")
    await _fails(sandbox, "echo agentkit-pwned > /proc/sys/kernel/hostname")
    assert socket.gethostname() == before


async def test_cannot_mount_or_make_namespaces(sandbox: BaseSandbox) -> None:
    await _fails(sandbox, "mkdir -p /tmp/m && mount -t tmpfs none /tmp/m")
    await _fails(sandbox, "mount --bind /usr /tmp")
    # A nested user namespace would give the agent capabilities again.
    await _fails(sandbox, "unshare --user true")
    await _fails(sandbox, "unshare --user --map-root-user --mount true")
    await _fails(sandbox, "unshare --mount true")


async def test_cannot_ptrace_host_processes(sandbox: BaseSandbox) -> None:
    host = subprocess.Popen(["sleep", "600"])
    try:
        probe = (
            "import ctypes, os, sys\n"
            "libc = ctypes.CDLL(None, use_errno=True)\n"
            "bad = []\n"
            # The host process's pid number, and whatever is visible and not the
            # sandbox's own user (pid 1, bubblewrap's init, when run as root).
            "def foreign(p):\n"
            "    try:\n"
            "        return os.stat(f'/proc/{p}').st_uid != os.getuid()\n"
            "    except OSError:\n"
            "        return False\n"
            "for pid in [int(sys.argv[1])] + [int(p) for p in os.listdir('/proc') "
            "if p.isdigit() and foreign(p)]:\n"
            "    if libc.ptrace(16, pid, 0, 0) == 0:\n"  # PTRACE_ATTACH
            "        bad.append(pid)\n"
            "print(bad)\n"
        )
        r = await sandbox.exec(["python3", "-c", probe, str(host.pid)])
        assert r.ok, r.stderr
        assert r.stdout.strip() == "[]", f"attached to {r.stdout.strip()} from inside"
        status = Path(f"/proc/{host.pid}/status").read_text()
        assert "TracerPid:\t0" in status
        assert host.poll() is None
    finally:
        host.kill()
        host.wait()


async def test_writing_through_proc_1_root_stays_inside(
    sandbox: BaseSandbox, tmp_path: Path
) -> None:
    marker = f"agentkit-escape-{os.getpid()}-{tmp_path.name}"
    await _probe(
        sandbox, f"echo pwned > /proc/1/root/tmp/{marker}; echo pwned > /proc/1/cwd/{marker}"
    )
    assert not Path(f"/tmp/{marker}").exists()
    assert not Path(f"/{marker}").exists()
    assert not (Path.cwd() / marker).exists()
    # /proc/1/root is the sandbox's own root, or out of reach.
    r = await sandbox.exec(["bash", "-c", "stat -c %d:%i / /proc/1/root/ 2>/dev/null"])
    inodes = r.stdout.split()
    assert len(inodes) == 1 or inodes[0] == inodes[1], r.stdout


async def test_setuid_files_made_inside_grant_nothing(sandbox: BaseSandbox) -> None:
    """A setuid-root binary the agent plants runs with the privileges of whoever runs it
    (no_new_privs): an ordinary user inside stays that user, with no capability."""
    plant = "cp /usr/bin/cat /tmp/suid && chmod 4755 /tmp/suid && stat -c %a:%u /tmp/suid"
    r = await sandbox.exec(["bash", "-c", plant])
    assert r.stdout.strip() == "4755:0", r.stdout + r.stderr  # setuid root: the probe is armed
    one_uid = isinstance(sandbox, LocalSandbox) and (sandbox.image is None or os.geteuid() != 0)
    if one_uid:
        # On the host's userland, and on an image root as an ordinary user, only uid 0
        # exists inside (one id is mapped): there is no one to rise from, and the binary
        # gains nothing over what any command there holds (none on the host's
        # userland; on an image root Docker's default set, in its user namespace only).
        user, uid = None, "0"
        plain = await sandbox.exec(["cat", "/proc/self/status"])
        assert plain.ok, plain.stderr
        before = dict(line.split(":", 1) for line in plain.stdout.splitlines() if ":" in line)
        allowed = {c: int(before[c], 16) for c in ("CapPrm", "CapEff")}
        if sandbox.image is None:
            assert allowed == {"CapPrm": 0, "CapEff": 0}, before
    else:
        user, uid = "nobody", "65534"
        allowed = {"CapPrm": 0, "CapEff": 0}
    r = await sandbox.exec(["/tmp/suid", "/proc/self/status"], user=user)
    assert r.ok, r.stderr
    status = dict(line.split(":", 1) for line in r.stdout.splitlines() if ":" in line)
    assert status["Uid"].split() == [uid] * 4, f"the planted binary ran as {status['Uid']}"
    for caps in ("CapPrm", "CapEff"):
        assert int(status[caps], 16) == allowed[caps], (
            f"the planted binary holds {caps} {status[caps]} (a command: {allowed[caps]:x})"
        )
    assert status["NoNewPrivs"].strip() == "1"


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-v"]))
