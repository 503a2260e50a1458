"""Forking a running sandbox: real bubblewrap sandboxes (on an image root and on the
host's userland) and the real Docker engine, on a real Harbor example task's image.

Every check writes different files in parent and children and reads them back
through the sandboxes themselves.
"""

from __future__ import annotations

import asyncio
import os
import shlex
import subprocess
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from agentkit import ForkableSandbox, Sandbox
from agentkit._sandbox import ExecResult, ExecutionHints, TaskImage
from agentkit.sandbox import SandboxForkError, fork_sandbox
from agentkit.sandbox._base import BaseSandbox
from agentkit.sandbox.docker import DockerSandbox
from agentkit.sandbox.docker._engine import prune
from agentkit.sandbox.local import LocalSandbox
from agentkit.testing.sandbox_fixtures import (
    host_pids_with_arg,
    requires_bwrap,
    unique_sleep_arg,
    wait_present,
)

pytestmark = [pytest.mark.anyio, requires_bwrap]

ROOT = Path(__file__).resolve().parents[1]
#: A real Harbor example task: its entrypoint serves /srv/www on 127.0.0.1:8080.
SERVICE_ENV = ROOT / "examples" / "harbor-docker" / "service-at-start" / "environment"
SERVICE = TaskImage(dockerfile=str(SERVICE_ENV / "Dockerfile"), context=str(SERVICE_ENV))
SIDECAR_ENV = ROOT / "examples" / "harbor-docker" / "sidecar-api" / "environment"
#: Lists every process's command line inside a sandbox (the image has no ps).
PROCESSES = "for f in /proc/[0-9]*/cmdline; do tr '\\0' ' ' < $f; echo; done"
#: Which bytes /app/f holds, and how many.
BYTES_SEEN = "d = open('/app/f', 'rb').read(); print(bytes(sorted(set(d))).decode(), len(d))"
#: Kills the entrypoint's server (the image has no pkill).
KILL_SERVER = (
    "python3 -c \"import os; [os.kill(int(p), 9) for p in os.listdir('/proc') if p.isdigit() "
    "and b'-m\\0http.server' in open('/proc/' + p + '/cmdline', 'rb').read()]\""
)
#: Asks the entrypoint's server for its listing of /srv/www, once it listens.
LISTING = (
    'python3 -c "import time, urllib.request as u\n'
    "for _ in range(600):\n"
    "    try: print(u.urlopen('http://127.0.0.1:8080/').read().decode()); break\n"
    '    except OSError: time.sleep(0.05)\n"'
)

Make = Callable[..., Awaitable[Any]]


def ok(r: ExecResult) -> str:
    assert r.ok, (r.exit_code, r.stdout, r.stderr)
    return r.stdout


@pytest.fixture(params=["host-userland", "image-root"])
def kind(request: pytest.FixtureRequest) -> str:
    """The local sandbox's two userlands."""
    if request.param == "image-root":
        request.getfixturevalue("image_tool")
    return str(request.param)


@pytest.fixture
def local(sandbox_factory, image_cache: Path, kind: str) -> Make:
    """A started local sandbox of ``kind`` (the example task's image on an image root)."""

    async def make(**options: Any) -> LocalSandbox:
        if kind == "image-root":
            hints = ExecutionHints(image=SERVICE, workdir="/app")
            options.setdefault("image_cache", str(image_cache))
        else:
            hints = ExecutionHints()
        box: LocalSandbox = await sandbox_factory("local", hints=hints, **options)
        return box

    return make


@pytest.fixture
async def children() -> Any:
    """Forks made by a test, closed at its end (closing twice is harmless)."""
    made: list[Sandbox] = []
    yield made
    for child in made:
        await child.close()


async def test_parent_and_eight_children_each_see_only_their_own_writes(
    local: Make, children: list[Sandbox], kind: str
) -> None:
    parent = await local()
    assert isinstance(parent, ForkableSandbox)
    ok(await parent.exec("mkdir -p /app/work && echo before > /app/work/shared"))
    ok(await parent.exec("echo 0 > /app/work/counter"))
    forks = await asyncio.gather(*(fork_sandbox(parent) for _ in range(8)))
    children += forks
    assert len({c.rollout_id for c in forks}) == 8  # type: ignore[attr-defined]
    # Everyone writes: a file of its own, and the same existing file in place.
    ok(await parent.exec("echo parent > /app/work/mine && echo parent >> /app/work/counter"))
    for i, child in enumerate(forks):
        ok(await child.exec(f"echo child{i} > /app/work/mine && echo {i} >> /app/work/counter"))
        ok(await child.exec(f"echo {i} > /app/work/only-child{i}"))
    assert ok(await parent.exec("cat /app/work/mine /app/work/counter")) == "parent\n0\nparent\n"
    assert ok(await parent.exec("ls /app/work")) == "counter\nmine\nshared\n"
    for i, child in enumerate(forks):
        out = ok(await child.exec("cat /app/work/shared /app/work/mine /app/work/counter"))
        assert out == f"before\nchild{i}\n0\n{i}\n"
        assert ok(await child.exec("ls /app/work")) == f"counter\nmine\nonly-child{i}\nshared\n"
    for child in forks:
        assert isinstance(child, LocalSandbox)
        assert child.fork_stats is not None and child.fork_stats.paused_sec > 0
        if parent.host_id is not None and kind == "host-userland":
            # Its own host id, and its files handed to it.
            assert child.host_id not in (None, parent.host_id)
            assert (child.fs_root / "app" / "work" / "mine").stat().st_uid == child.host_id


async def test_a_deletion_before_the_fork_stays_deleted(
    local: Make, children: list[Sandbox], kind: str
) -> None:
    parent = await local()
    ok(await parent.exec("mkdir -p /app/d/sub && touch /app/d/gone /app/d/sub/x /app/d/kept"))
    # Deleted files and a directory replaced by a new one of the same name (on an
    # image root: overlayfs whiteouts and an opaque directory in the upper layer).
    script = "rm /app/d/gone && rm -r /app/d/sub && mkdir /app/d/sub && touch /app/d/sub/new"
    if kind == "image-root":
        script += " && rm /srv/www/secret.txt && rm -r /usr/share/doc && mkdir /usr/share/doc"
        script += " && echo mine > /usr/share/doc/only"
    ok(await parent.exec(script))
    child = await fork_sandbox(parent)
    children.append(child)
    assert ok(await child.exec("find /app/d | sort")) == (
        "/app/d\n/app/d/kept\n/app/d/sub\n/app/d/sub/new\n"
    )
    if kind == "image-root":
        assert ok(await child.exec("ls -A /srv/www /usr/share/doc")) == (
            "/srv/www:\n\n/usr/share/doc:\nonly\n"
        )
        # The entrypoint's server (restarted in the child) serves the child's files.
        assert "secret.txt" not in ok(await child.exec(LISTING))
        assert ok(await child.exec("test -e /usr/bin/python3 && echo image")) == "image\n"


async def test_files_changed_after_the_fork_are_not_shared(
    local: Make, children: list[Sandbox]
) -> None:
    parent = await local()
    ok(await parent.exec("head -c 100000 /dev/zero > /app/big && echo v1 > /app/note"))
    child = await fork_sandbox(parent)
    children.append(child)
    # In place (the same inode), in both directions: a copy sharing inodes would leak.
    ok(await parent.exec("printf P | dd of=/app/big bs=1 seek=10 conv=notrunc status=none"))
    ok(await child.exec("printf C | dd of=/app/big bs=1 seek=20 conv=notrunc status=none"))
    ok(await parent.exec("echo parent-after > /app/p && echo v2 >> /app/note"))
    ok(await child.exec("echo child-after > /app/c && rm /app/note"))
    assert ok(await parent.exec("od -An -c -j10 -N11 /app/big")).split() == ["P"] + ["\\0"] * 10
    assert ok(await child.exec("od -An -c -j10 -N11 /app/big")).split() == ["\\0"] * 10 + ["C"]
    assert ok(await parent.exec("cat /app/note; ls /app/p; ls /app/c || true")) == (
        "v1\nv2\n/app/p\n"
    )
    assert ok(await child.exec("ls /app/note /app/p || ls /app/c")) == "/app/c\n"


async def test_processes_are_not_carried_and_the_parent_goes_on(
    local: Make, children: list[Sandbox]
) -> None:
    parent = await local()
    marker, held = unique_sleep_arg(), unique_sleep_arg()
    inside = ok(await parent.exec(f"sleep {marker} & sleep {held} & echo $!")).strip()
    (sleeper,) = await wait_present(marker)
    (stopped,) = await wait_present(held)
    ok(await parent.exec(f"kill -STOP {inside}"))  # stopped by the task itself
    while _state(stopped) != "T":  # (the signal is delivered after kill returns)
        await asyncio.sleep(0.01)
    # A command running through the fork (paused and resumed with the rest) ends well.
    reader = await parent.start(["sh", "-c", "read line; echo got $line"])
    child = await fork_sandbox(parent)
    children.append(child)
    await reader.write_stdin(b"hello\n")
    assert (await reader.wait(timeout=60)).stdout == "got hello\n"
    assert marker not in ok(await child.exec(PROCESSES))
    assert marker in ok(await parent.exec(PROCESSES))
    assert host_pids_with_arg(marker) == [sleeper]
    assert _state(sleeper) == "S"  # resumed, asleep again
    assert _state(stopped) == "T"  # stopped inside before the fork: left stopped


def _state(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0]


async def test_a_file_written_during_the_fork_is_never_torn(
    local: Make, children: list[Sandbox]
) -> None:
    parent = await local()
    # Rewrites a 4 MiB file in place, all A then all B, with one write each, forever.
    writer = (
        "import os\n"
        "fd = os.open('/app/f', os.O_RDWR | os.O_CREAT, 0o644)\n"
        "blocks = [c * (4 << 20) for c in (b'A', b'B')]\n"
        "os.pwrite(fd, blocks[0], 0)\n"
        "open('/app/started', 'w').close()\n"
        "while True:\n"
        "    for b in blocks:\n"
        "        os.pwrite(fd, b, 0)\n"
    )
    ok(await parent.exec(f"cat > /app/w.py <<'EOF'\n{writer}EOF\npython3 /app/w.py &"))
    ok(await parent.exec("while [ ! -e /app/started ]; do sleep 0.01; done"))
    for _ in range(4):
        child = await fork_sandbox(parent)
        children.append(child)
        seen = ok(await child.exec(f"python3 -c {BYTES_SEEN!r}"))
        assert seen in ("A 4194304\n", "B 4194304\n"), seen  # all A or all B, never a mix
        await child.close()


#: What a child finds in /app/f of the two-step writer below: ``empty`` (just truncated),
#: ``first`` (its first write done), ``whole`` (both), or ``torn`` (anything else).
STEPS_SEEN = (
    "import re\n"
    "d = open('/app/f', 'rb').read()\n"
    "m = re.fullmatch(rb'(\\d+):first:(A*)\\n(?:(\\d+):second:(B*)\\n)?', d, re.S)\n"
    "one = m and len(m[2]) == 1 << 20\n"
    "two = one and m[3] is not None and m[3] == m[1] and len(m[4]) == 1 << 20\n"
    "print('empty' if not d else 'whole' if two else 'first' if one and m[3] is None\n"
    "      else f'torn {len(d)}')\n"
)


async def test_a_child_sees_each_file_as_it_was_at_the_pause(
    local: Make, children: list[Sandbox]
) -> None:
    """What docs/sandboxes.md promises of a fork: each file as it was at the moment the
    parent was paused, each of the parent's writes either in it whole or not at all. A
    file the parent rewrites in two steps (truncate and write, then write more) is seen
    in a state it passed through, which may be between the steps; a file written and
    closed before fork() is whole."""
    parent = await local()
    ok(await parent.exec("python3 -c \"open('/app/done', 'wb').write(b'D' * (4 << 20))\""))
    # Rewrites /app/f forever: truncate, write 1 MiB of A, then 1 MiB of B, close.
    writer = (
        "import os\n"
        "i = 0\n"
        "while True:\n"
        "    i += 1\n"
        "    fd = os.open('/app/f', os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)\n"
        "    os.write(fd, b'%d:first:' % i + b'A' * (1 << 20) + b'\\n')\n"
        "    if i == 1:\n"
        "        open('/app/started', 'w').close()\n"
        "    os.write(fd, b'%d:second:' % i + b'B' * (1 << 20) + b'\\n')\n"
        "    os.close(fd)\n"
    )
    ok(await parent.exec(f"cat > /app/w.py <<'EOF'\n{writer}EOF\npython3 /app/w.py &"))
    ok(await parent.exec("while [ ! -e /app/started ]; do sleep 0.01; done"))
    seen = []
    for _ in range(6):
        child = await fork_sandbox(parent)
        children.append(child)
        seen.append(ok(await child.exec(f"python3 -c {shlex.quote(STEPS_SEEN)}")).strip())
        assert ok(await child.exec("wc -c < /app/done; tr -d D < /app/done | wc -c")) == (
            f"{4 << 20}\n0\n"
        )
        await child.close()
    assert set(seen) <= {"empty", "first", "whole"}, seen  # never a write half done

    # Paused between the two steps, for certain: the child has the first step only.
    stepper = (
        "import os\n"
        "fd = os.open('/app/g', os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)\n"
        "os.write(fd, b'step one\\n')\n"
        "open('/app/between', 'w').close()\n"
        "open('/app/go').read()\n"  # a FIFO: waits for the test
        "os.write(fd, b'step two\\n')\n"
        "os.close(fd)\n"
        "open('/app/done-g', 'w').close()\n"
    )
    ok(await parent.exec(f"mkfifo /app/go && cat > /app/s.py <<'EOF'\n{stepper}EOF\n"
                         "python3 /app/s.py &"))  # fmt: skip
    ok(await parent.exec("while [ ! -e /app/between ]; do sleep 0.01; done"))
    child = await fork_sandbox(parent)
    children.append(child)
    ok(await parent.exec("echo go > /app/go && while [ ! -e /app/done-g ]; do sleep 0.01; done"))
    assert ok(await parent.exec("cat /app/g")) == "step one\nstep two\n"
    assert ok(await child.exec("cat /app/g")) == "step one\n"  # as it was at the pause


#: Busy threads that never block: a thread left running would be seen in state R.
BUSY_THREADS = (
    "import threading\n"
    "def spin():\n"
    "    while True: pass\n"
    "for _ in range(3): threading.Thread(target=spin, daemon=True).start()\n"
    "spin()\n"
)


def _pid_namespace(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/pid")
    except OSError:
        return None


def _descendants(pid: int) -> set[int]:
    """``pid`` and every process below it (host pids)."""
    out, level = {pid}, [pid]
    while level:
        found = []
        for parent in level:
            try:
                tids = os.listdir(f"/proc/{parent}/task")
            except OSError:
                continue
            for tid in tids:
                try:
                    with open(f"/proc/{parent}/task/{tid}/children") as f:
                        found += [int(c) for c in f.read().split()]
                except OSError:
                    continue
        level = [c for c in found if c not in out]
        out.update(level)
    return out


def _thread_states(pid: int) -> list[str]:
    """The state letter of each of ``pid``'s threads (none once it is gone)."""
    states: list[str] = []
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return states
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                states.append(f.read().rsplit(")", 1)[1].split()[0])
        except OSError:
            continue
    return states


def _sandbox_processes(box: LocalSandbox) -> dict[int, list[str]]:
    """Every process of ``box``, found without its own bookkeeping of them: each host
    process in its pid namespace (daemons that left their parent included), and the
    wrappers of its running commands with what runs below them; each with its threads'
    states."""
    namespace = _pid_namespace(box._holder_pid)
    assert namespace is not None
    pids = {
        int(e) for e in os.listdir("/proc") if e.isdigit() and _pid_namespace(int(e)) == namespace
    }
    for process in box._procs:
        pids |= _descendants(process.pid)
    return {pid: _thread_states(pid) for pid in sorted(pids)}


async def test_every_process_of_the_parent_is_stopped_while_its_files_are_copied(
    local: Make, children: list[Sandbox], monkeypatch: pytest.MonkeyPatch
) -> None:
    """At the moment the parent's files are copied (the copy's own first step, through
    a hook on it), every thread of every process of the parent is stopped: a sleeper,
    a daemon that left its parent, a process of four threads spinning, a shell forking
    without pause, a command the orchestrator runs (its wrapper and its shell); after
    the fork they all run again, but one the task had stopped itself."""
    parent = await local()
    sleeper, daemon, spin, held = (unique_sleep_arg() for _ in range(4))
    ok(await parent.exec(f"cat > /tmp/spin.py <<'EOF'\n{BUSY_THREADS}EOF"))
    inside = ok(await parent.exec(
        f"sleep {sleeper} & setsid sh -c 'sleep {daemon}' & python3 /tmp/spin.py {spin} & "
        f"sh -c 'while :; do /bin/true; done' & sleep {held} & echo $!"
    )).strip()  # fmt: skip
    (stopped,) = await wait_present(held)
    ok(await parent.exec(f"kill -STOP {inside}"))  # stopped by the task itself
    while _thread_states(stopped) != ["T"]:  # (the signal is delivered after kill returns)
        await asyncio.sleep(0.01)
    (spinner,) = await wait_present(spin)
    while len(_thread_states(spinner)) < 4:  # its threads have started
        await asyncio.sleep(0.01)
    for arg in (sleeper, daemon):
        assert await wait_present(arg)
    reader = await parent.start(["sh", "-c", "read line; echo got $line"])

    import agentkit.sandbox.local._sandbox as local_module

    seen: dict[int, list[str]] = {}
    copy_tree = local_module.copy_tree

    def observed(*args: Any, **kwargs: Any) -> Any:
        if not seen:  # the first copy: the parent's files, while it is paused
            seen.update(_sandbox_processes(parent))
        return copy_tree(*args, **kwargs)

    monkeypatch.setattr(local_module, "copy_tree", observed)
    child = await fork_sandbox(parent)
    children.append(child)
    assert seen, "the fork copied nothing"
    running = {pid: states for pid, states in seen.items() if set(states) - set("TtZX")}
    assert not running, f"processes not stopped while the parent was copied: {running}"
    for arg in (sleeper, daemon, spin, held):
        assert set(host_pids_with_arg(arg)) <= set(seen), arg
    assert reader.pid in seen and len(seen[spinner]) == 4
    assert len(seen) >= 8  # init, sleeper, daemon (and its shell), spinner, loop, held, reader
    # resumed, all but the one the task stopped itself
    await reader.write_stdin(b"again\n")
    assert (await reader.wait(timeout=60)).stdout == "got again\n"
    for pid in (host_pids_with_arg(sleeper)[0], host_pids_with_arg(daemon)[0], spinner):
        while "T" in _thread_states(pid):
            await asyncio.sleep(0.01)
    assert _thread_states(stopped) == ["T"]


async def test_closing_either_side_leaves_the_other_working(
    local: Make, children: list[Sandbox]
) -> None:
    parent = await local()
    ok(await parent.exec("echo root > /app/gen"))
    child = await fork_sandbox(parent)
    children.append(child)
    await parent.close()
    ok(await child.exec("echo child >> /app/gen"))
    grandchild = await fork_sandbox(child)
    children.append(grandchild)
    await child.close()
    assert ok(await grandchild.exec("cat /app/gen && echo more >> /app/gen")) == "root\nchild\n"
    assert ok(await grandchild.exec("cat /app/gen")) == "root\nchild\nmore\n"
    assert isinstance(child, BaseSandbox) and not child.root.exists()  # its own root, removed


async def test_the_host_userlands_etc_is_carried_but_its_network_files(
    sandbox_factory, children: list[Sandbox]
) -> None:
    parent = await sandbox_factory("local")
    ok(await parent.exec("useradd agent && mkdir /etc/app && echo conf > /etc/app/x"))
    ok(await parent.exec("echo '10.9.9.9 edited' >> /etc/hosts"))
    child = await fork_sandbox(parent)
    children.append(child)
    assert ok(await child.exec("id -u agent; cat /etc/app/x")) == "1000\nconf\n"
    assert "edited" not in ok(await child.exec("cat /etc/hosts"))  # written for itself
    assert ok(await child.exec("test -e /etc/ssl/certs && echo host-pieces")) == "host-pieces\n"


@pytest.mark.usefixtures("image_tool")
async def test_the_entrypoint_runs_again_in_the_child(
    sandbox_factory, image_cache: Path, children: list[Sandbox]
) -> None:
    hints = ExecutionHints(image=SERVICE)
    parent = await sandbox_factory("local", hints=hints, image_cache=str(image_cache))
    assert "secret.txt" in ok(await parent.exec(LISTING))
    # The parent's server is stopped: the child's is its own, started as at start.
    ok(await parent.exec(KILL_SERVER))
    assert not ok(await parent.exec(f"{PROCESSES} | grep -c http[.]server || true")).strip("0\n")
    child = await fork_sandbox(parent)
    children.append(child)
    assert "secret.txt" in ok(await child.exec(LISTING))
    assert ok(await child.exec(f"{PROCESSES} | grep -c http[.]server")) == "1\n"


async def test_what_cannot_fork_says_so_naming_the_sandbox(sandbox_factory, tmp_path: Path) -> None:
    host = await sandbox_factory("host")
    with pytest.raises(SandboxForkError, match=r"sandbox 'host' \(test-0\) cannot fork"):
        await fork_sandbox(host)
    not_started = LocalSandbox(root=tmp_path / "idle", rollout_id="idle-1")
    with pytest.raises(SandboxForkError, match=r"sandbox 'local' \(idle-1\) cannot fork: it is "):
        await fork_sandbox(not_started)
    running = await sandbox_factory("local")
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "x").touch()
    with pytest.raises(SandboxForkError, match="exists and is not an empty directory"):
        await fork_sandbox(running, root=tmp_path / "taken")
    await running.close()
    with pytest.raises(SandboxForkError, match="it is closed"):
        await fork_sandbox(running)

    class Elsewhere:  # a third-party sandbox that offers no fork
        name = "elsewhere"
        rollout_id = "r-7"

    with pytest.raises(SandboxForkError, match=r"sandbox 'elsewhere' \(r-7\) cannot fork"):
        await fork_sandbox(Elsewhere())  # type: ignore[arg-type]


async def test_the_tasks_paths_are_not_copied_in_again(
    sandbox_factory, children: list[Sandbox], tmp_path: Path
) -> None:
    (tmp_path / "task").mkdir()
    (tmp_path / "task" / "spec.txt").write_text("original\n")
    hints = ExecutionHints(paths={"/app": str(tmp_path / "task")})
    parent = await sandbox_factory("local", hints=hints)
    ok(await parent.exec("echo edited > /app/spec.txt && touch /app/added"))
    child = await fork_sandbox(parent)
    children.append(child)
    assert ok(await child.exec("cat /app/spec.txt; ls /app")) == "edited\nadded\nspec.txt\n"


async def test_a_fork_into_a_given_root_is_kept(
    sandbox_factory, children: list[Sandbox], tmp_path: Path
) -> None:
    parent = await sandbox_factory("local")
    ok(await parent.exec("echo x > /app/x"))
    child = await fork_sandbox(parent, root=tmp_path / "branch", rollout_id="branch-1")
    children.append(child)
    assert child.rollout_id == "branch-1"  # type: ignore[attr-defined]
    await child.close()
    assert (tmp_path / "branch" / "fs" / "app" / "x").read_text() == "x\n"


# -- docker -------------------------------------------------------------------------


def _fork_images() -> set[str]:
    """The fork images the engine holds, as ``repository:tag`` (other tests' included)."""
    out = subprocess.run(
        ["docker", "images", "agentkit/fork", "--format", "{{.Repository}}:{{.Tag}}"],
        capture_output=True,
        text=True,
        check=True,
    )
    return set(out.stdout.split())


@pytest.mark.usefixtures("docker_engine")
async def test_docker_parent_and_children_diverge(sandbox_factory, children: list[Sandbox]) -> None:
    parent = await sandbox_factory("docker", hints=ExecutionHints(image=SERVICE))
    assert isinstance(parent, DockerSandbox)
    marker = unique_sleep_arg()
    ok(await parent.exec("mkdir -p /app/w && echo before > /app/w/shared && echo 0 > /app/w/n"))
    ok(await parent.exec(f"rm /srv/www/secret.txt && echo log > /logs/agent/l && sleep {marker} &"))
    forks = [await fork_sandbox(parent) for _ in range(3)]
    children += forks
    ok(await parent.exec("echo parent > /app/w/mine && echo p >> /app/w/n"))
    for i, child in enumerate(forks):
        ok(await child.exec(f"echo child{i} > /app/w/mine && echo {i} >> /app/w/n"))
    assert ok(await parent.exec("cat /app/w/mine /app/w/n")) == "parent\n0\np\n"
    for i, child in enumerate(forks):
        out = ok(await child.exec("cat /app/w/shared /app/w/mine /app/w/n /logs/agent/l"))
        assert out == f"before\nchild{i}\n0\n{i}\nlog\n"
        assert ok(await child.exec("ls -A /srv/www")) == ""  # deleted stays deleted
        listing = ok(await child.exec(f"{PROCESSES}; {LISTING}"))
        assert marker not in listing  # processes are not carried...
        assert "Directory listing" in listing  # ...the entrypoint's server runs again
    assert marker in ok(await parent.exec(PROCESSES))
    # each child runs on an image of its own (other tests may fork beside this one)
    mine = {child._fork_image for child in forks if isinstance(child, DockerSandbox)}
    assert len(mine) == 3 and None not in mine
    assert mine <= _fork_images()
    for child in forks:
        await child.close()
    assert not mine & _fork_images()  # each child's image goes with it


@pytest.mark.usefixtures("docker_engine")
async def test_docker_fork_carries_files_and_never_processes(
    sandbox_factory, children: list[Sandbox]
) -> None:
    # docs/sandboxes.md: a fork "carries files and never processes"; a process the parent
    # started writes a file, then runs on: the file is in the child, the process is not
    parent = await sandbox_factory("docker", hints=ExecutionHints(image=SERVICE))
    marker = unique_sleep_arg()
    ok(await parent.exec(f"sh -c 'echo up > /app/up && exec sleep {marker}' >/dev/null 2>&1 &"))
    (sleeper,) = await wait_present(marker)  # it wrote the file before it became this sleep
    child = await fork_sandbox(parent)
    children.append(child)
    assert ok(await child.exec("cat /app/up")) == "up\n"
    assert marker not in ok(await child.exec(PROCESSES))
    # nor anywhere else on the host: the one such process is still the parent's, running
    assert host_pids_with_arg(marker) == [sleeper]
    assert marker in ok(await parent.exec(PROCESSES))
    await child.close()
    assert host_pids_with_arg(marker) == [sleeper]  # closing the child leaves it be


@pytest.mark.usefixtures("docker_engine")
async def test_docker_compose_project_cannot_fork(sandbox_factory) -> None:
    image = TaskImage(
        dockerfile=str(SIDECAR_ENV / "Dockerfile"),
        context=str(SIDECAR_ENV),
        compose_file=str(SIDECAR_ENV / "docker-compose.yaml"),
    )
    parent = await sandbox_factory("docker", hints=ExecutionHints(image=image))
    with pytest.raises(SandboxForkError, match=r"sandbox 'docker' \(test-0\) cannot fork: it runs"):
        await fork_sandbox(parent)
    assert ok(await parent.exec("echo still")) == "still\n"


#: Forks a docker sandbox in a process of its own, prints the child's image, dies (SIGKILL).
_KILLED_AFTER_FORK = """
import asyncio, os, signal, sys
from agentkit.sandbox.docker import DockerSandbox
async def main():
    sb = DockerSandbox(root=sys.argv[1], rollout_id="fork-killed")
    await sb.setup()
    child = await sb.fork()
    print(child.image, flush=True)
    os.kill(os.getpid(), signal.SIGKILL)
asyncio.run(main())
"""


@pytest.mark.usefixtures("docker_engine")
async def test_docker_fork_images_left_by_a_killed_orchestrator_are_pruned(
    tmp_path: Path,
) -> None:
    killed = subprocess.run(
        [sys.executable, "-c", _KILLED_AFTER_FORK, str(tmp_path / "r")],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    image = killed.stdout.strip()
    assert killed.returncode == -9 and image.startswith("agentkit/fork:"), killed.stderr
    assert _image_exists(image)
    report = await prune()
    # (Another run starting meanwhile may have pruned it first.)
    assert image in report.images or not _image_exists(image)
    assert not _image_exists(image)


def _image_exists(reference: str) -> bool:
    inspect = subprocess.run(["docker", "image", "inspect", reference], capture_output=True)
    return inspect.returncode == 0


def test_fork_is_optional_in_the_contract() -> None:
    """A sandbox without fork still satisfies Sandbox (third-party plugins keep working)."""
    from agentkit.sandbox.host import HostSandbox

    host = HostSandbox(root=Path(os.devnull).parent / "unused")
    assert isinstance(host, Sandbox) and not isinstance(host, ForkableSandbox)
    assert isinstance(LocalSandbox(root=Path("/nonexistent")), ForkableSandbox)
