"""Grading's clean state, asked of real sandboxes from outside: every process ended, fresh
directories nothing can reach, a fresh sandbox given chosen paths of another.

Each check runs on the local sandbox on the host's userland and on an image
root, and on the docker sandbox, with a real Harbor example task's image
(its entrypoint serves /srv/www on 127.0.0.1:8080). What a command left is
planted the way an agent would, then read back through the sandbox itself.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from agentkit._sandbox import ExecResult, ExecutionHints, TaskImage
from agentkit.sandbox import (
    SandboxDiedError,
    SandboxPathError,
    carry_paths,
    changed_paths,
    close_with,
    end_processes,
    fresh_sandbox,
    fresh_sandbox_carrying,
    open_dir,
    reset_dir,
    restart_sandbox,
)
from agentkit.testing.sandbox_fixtures import (
    host_pids_with_arg,
    requires_bwrap,
    unique_sleep_arg,
    wait_present,
)

pytestmark = [pytest.mark.anyio, requires_bwrap]

ROOT = Path(__file__).resolve().parents[1]
SERVICE_ENV = ROOT / "examples" / "harbor-docker" / "service-at-start" / "environment"
SERVICE = TaskImage(dockerfile=str(SERVICE_ENV / "Dockerfile"), context=str(SERVICE_ENV))
#: The entrypoint's server: its pid and start time inside (the image has no ps).
SERVER = (
    "for f in /proc/[0-9]*; do if tr '\\0' ' ' < $f/cmdline 2>/dev/null | grep -q http.server;"
    " then echo ${f#/proc/} $(cut -d' ' -f22 $f/stat); fi; done"
)
#: Waits until the entrypoint's server answers (it starts in the background).
ANSWERS = (
    'python3 -c "import time, urllib.request as u\n'
    "for _ in range(600):\n"
    "    try: print(u.urlopen('http://127.0.0.1:8080/secret.txt').read().decode()); break\n"
    '    except OSError: time.sleep(0.05)\n"'
)

Make = Callable[..., Awaitable[Any]]


def ok(r: ExecResult) -> str:
    assert r.ok, (r.exit_code, r.stdout, r.stderr)
    return r.stdout


@pytest.fixture(params=["host-userland", "image-root", "docker"])
def kind(request: pytest.FixtureRequest) -> str:
    """The local sandbox's two userlands, and the docker sandbox."""
    if request.param == "image-root":
        request.getfixturevalue("image_tool")
    if request.param == "docker":
        request.getfixturevalue("docker_engine")
    return str(request.param)


@pytest.fixture
def box(sandbox_factory: Any, image_cache: Path, kind: str) -> Make:
    """A started sandbox of ``kind`` (the example task's image where it has one)."""

    async def make() -> Any:
        if kind == "host-userland":
            return await sandbox_factory("local", hints=ExecutionHints(), image="host")
        hints = ExecutionHints(image=SERVICE, workdir="/app")
        if kind == "docker":
            return await sandbox_factory("docker", hints=hints)
        return await sandbox_factory("local", hints=hints, image_cache=str(image_cache))

    return make


@pytest.fixture
async def made() -> Any:
    """Sandboxes a test made itself, closed at its end."""
    out: list[Any] = []
    yield out
    for sb in out:
        await sb.close()


async def test_every_process_ends_whatever_it_did_to_detach(box: Make, kind: str) -> None:
    sb = await box()
    args = [unique_sleep_arg() for _ in range(6)]
    running = await sb.start(["sleep", args[0]])
    another_uid = "" if kind == "host-userland" else f"(setpriv --reuid=1000 sleep {args[5]} &);"
    ok(
        await sb.exec(
            f"setsid sleep {args[1]} & (sleep {args[2]} &); "
            f"nohup sh -c 'sleep {args[3]}' >/dev/null 2>&1 & "
            # stopped once it is sleep, not before its exec (its command line is then the
            # shell's, this whole script, which holds the argument too)
            f"sleep {args[4]} & until grep -qx sleep /proc/$!/comm; do :; done; "
            f"kill -STOP $!; {another_uid} true"
        )
    )
    expected = args if kind != "host-userland" else args[:5]
    for arg in expected:
        assert await wait_present(arg), (expected.index(arg), arg)
    if kind != "host-userland":
        ok(await sb.exec(ANSWERS))
        server_before = ok(await sb.exec(SERVER)).split()
    ended = await end_processes(sb)
    assert ended >= len(expected)
    for arg in expected:
        assert host_pids_with_arg(arg) == [], f"sleep {arg} outlived end_processes"
    assert not (await running.wait(5)).ok
    assert ok(await sb.exec("echo still here")) == "still here\n"
    if kind != "host-userland":
        # the image's entrypoint started again: its service is a new process
        assert ok(await sb.exec(ANSWERS)) == "open sesame\n\n"
        server_after = ok(await sb.exec(SERVER)).split()
        assert server_after and server_after != server_before


#: A process that forks and exits at once, over and over: its live pid is never the one
#: a scan of /proc saw a moment before. Once running, it says so on /tmp/hopping.
HOPPER = (
    "import os\n"
    "with open('/tmp/hopping', 'w') as f: f.write('hop\\n')\n"
    "while True:\n"
    "    if os.fork(): os._exit(0)\n"
)


@pytest.mark.parametrize("kind", ["host-userland", "image-root"], indirect=True)
async def test_processes_hopping_from_pid_to_pid_end_too(box: Make) -> None:
    """Three processes that each fork and exit at once, for ever, all end: the whole
    namespace is stopped at once (kill(-1) from inside), so no fork gets past the stop
    (found by a /proc scan alone, one of them outlived end_processes about a third of
    the time). Six rounds."""
    sb = await box()
    for _ in range(6):
        mark = unique_sleep_arg()
        # the script as $0, the mark as $1: no quoting in the shell's line
        script = (
            "rm -f /tmp/hopping && mkfifo /tmp/hopping && exec 3<>/tmp/hopping && "
            'for i in 1 2 3; do python3 -c "$0" "$1" >/dev/null 2>&1 & done && '
            "head -n3 <&3 >/dev/null"
        )
        ok(await sb.exec(["sh", "-c", script, HOPPER, mark]))
        await end_processes(sb)
        assert host_pids_with_arg(mark) == [], "a hopping process outlived end_processes"
    assert ok(await sb.exec("echo still here")) == "still here\n"


@pytest.mark.parametrize("kind", ["host-userland", "image-root"], indirect=True)
async def test_a_sandbox_killed_from_inside_says_it_died(box: Make, kind: str) -> None:
    # (a container killed from inside starts again on its files: below)
    sb = await box()
    # every process the command may signal: the holder (the sandbox's root's)
    await sb.exec("kill -KILL -1")
    # the death is the kernel's to finish: wait for it (an event, not a delay)
    await sb._bwrap_proc.wait()
    with pytest.raises(SandboxDiedError, match="no longer running"):
        await end_processes(sb)


@pytest.mark.parametrize("stopped", [True, False], ids=["stopped", "stopping"])
async def test_a_container_killed_from_inside_starts_again_on_its_files(
    sandbox_factory: Any, docker_engine: Any, stopped: bool
) -> None:
    hints = ExecutionHints(image=SERVICE, workdir="/app")
    sb = await sandbox_factory("docker", hints=hints)
    ok(await sb.exec("echo 41 > /app/answer.txt"))
    # the container's keep-alive shell (pid 1) exits with its child: the container
    # stops, which the engine learns of a moment later; asked before or after, the
    # processes end and the container starts again on its files
    await sb.exec("kill -KILL -1")
    if stopped:
        await sb._container.wait()
    await end_processes(sb)
    assert ok(await sb.exec("cat /app/answer.txt")) == "41\n"
    assert ok(await sb.exec(ANSWERS)) == "open sesame\n\n"  # the entrypoint's, again


async def test_reset_dir_follows_nothing_and_keeps_nothing(box: Make, kind: str) -> None:
    sb = await box()
    # A folder the agent prepared, reached through a link where /logs/verifier was (on
    # docker that is a mount point: the link goes inside it), and a /tests full of files
    # of another owner and odd modes, an extended attribute on it.
    ok(await sb.exec("mkdir -p /app/fake && echo '{\"reward\": 1}' > /app/fake/reward.json"))
    if kind == "docker":
        plant = "ln -s /app/fake /logs/verifier/fake && ln -s /app/fake/reward.json /logs/verifier/"
    else:
        plant = "rm -rf /logs/verifier && ln -s /app/fake /logs/verifier"
    ok(await sb.exec(plant))
    owner = "" if kind == "host-userland" else "chown -R 1000:1000 /tests/conftest.d &&"
    ok(
        await sb.exec(
            "mkdir -p /tests/conftest.d && echo 'pass' > /tests/conftest.d/x.py && "
            f"mkfifo /tests/fifo && {owner} chmod 000 /tests/conftest.d && chmod 700 /tests && "
            "python3 -c \"import os; os.setxattr('/tests', 'user.planted', b'1')\""
        )
    )
    await reset_dir(sb, "/logs/verifier", mode=0o777)
    await reset_dir(sb, "/tests")
    listing = ok(
        await sb.exec(
            "for d in /logs/verifier /tests; do test -d $d && ! test -L $d && "
            'echo "$d $(stat -c "%u %a" $d) [$(ls -A $d)]"; done; '
            "python3 -c \"import os; print(os.listxattr('/tests'))\"; cat /app/fake/reward.json"
        )
    )
    assert listing == '/logs/verifier 0 777 []\n/tests 0 755 []\n[]\n{"reward": 1}\n'


# in a container /logs/verifier and /tests are mount points: nothing stands on their way
@pytest.mark.parametrize("kind", ["host-userland", "image-root"], indirect=True)
async def test_reset_dir_mends_what_stands_on_the_way(box: Make) -> None:
    sb = await box()
    ok(await sb.exec("rm -rf /logs && echo not a directory > /logs && mkfifo /tests-fifo"))
    ok(await sb.exec("rm -rf /tests && ln -s /tests-fifo /tests"))
    await reset_dir(sb, "/logs/verifier")
    await reset_dir(sb, "/tests")
    out = ok(await sb.exec("test -d /logs && test -d /logs/verifier && test -d /tests && echo ok"))
    assert out == "ok\n"
    assert ok(await sb.exec("test -p /tests-fifo && echo fifo kept")) == "fifo kept\n"


async def test_open_dir_never_follows_a_link(box: Make, kind: str) -> None:
    sb = await box()
    if kind == "docker":
        ok(await sb.exec("mkdir -p /app/elsewhere && ln -s /app/elsewhere /logs/verifier/sub"))
        path = "/logs/verifier/sub"
    else:
        ok(await sb.exec("mkdir -p /app/elsewhere && rm -rf /logs/verifier"))
        ok(await sb.exec("ln -s /app/elsewhere /logs/verifier"))
        path = "/logs/verifier"
    with pytest.raises(SandboxPathError, match="not a directory"):
        open_dir(sb, path)
    with pytest.raises(FileNotFoundError):
        open_dir(sb, "/logs/agent/missing")
    if kind == "docker":
        with pytest.raises(SandboxPathError, match="not in a directory on the host"):
            open_dir(sb, "/app")


async def test_a_fresh_sandbox_gets_only_the_paths_carried(
    box: Make, kind: str, made: list[Any]
) -> None:
    parent = await box()
    chown = "" if kind == "host-userland" else "chown 1000 /app/sub/a &&"
    # the host's /usr is read-only on its userland: a tool goes to /opt there
    bin_dir = "/opt/bin" if kind == "host-userland" else "/usr/local/bin"
    ok(
        await parent.exec(
            f"mkdir -p /app/sub {bin_dir} && echo a > /app/sub/a && ln -s sub/a /app/link && "
            f"mkfifo /app/fifo && {chown} printf '#!/bin/sh\\nexit 0\\n' > {bin_dir}/frob && "
            f"chmod +x {bin_dir}/frob && echo scratch > /tmp/scratch"
        )
    )
    if kind != "host-userland":
        ok(await parent.exec("rm /srv/www/secret.txt"))
    fresh = await fresh_sandbox(parent)
    made.append(fresh)
    assert fresh.rollout_id != parent.rollout_id
    out = ok(await fresh.exec(f"ls {bin_dir} 2>/dev/null; ls -A /app"))
    assert "frob" not in out and "sub" not in out
    if kind != "host-userland":
        # the image's file is there again in a fresh sandbox
        assert ok(await fresh.exec("cat /srv/www/secret.txt")) == "open sesame\n"
    carried_www = [] if kind == "host-userland" else ["/srv/www"]
    carried = await carry_paths(parent, fresh, ["/app", "/app/sub", "/nowhere/x", *carried_www])
    how = carried.paths.pop("/app")
    assert how in ("copied", "changes copied"), how
    assert carried.paths.pop("/nowhere/x") in ("missing", "unchanged")
    listing = ok(
        await fresh.exec(
            "cd /app && ls -A && cat sub/a link && readlink link && test -p fifo && "
            f"stat -c %u sub/a && (test -e {bin_dir}/frob && echo frob || echo no frob)"
        )
    )
    owner = "0" if kind == "host-userland" else "1000"
    assert listing == f"fifo\nlink\nsub\na\na\nsub/a\n{owner}\nno frob\n"
    if kind != "host-userland":
        # a file the agent deleted under a carried path is deleted in the fresh one
        assert ok(await fresh.exec("ls -A /srv/www")) == ""
    changes = await changed_paths(parent, exclude=["/app", "/tmp"])
    assert f"{bin_dir}/frob" in changes
    assert not any(c.startswith(("/app", "/tmp")) for c in changes)
    if kind != "host-userland":
        assert "/srv/www/secret.txt" in changes


@pytest.mark.parametrize("www", ["/srv", "/srv/www"], ids=["top-level", "nested"])
async def test_a_fresh_sandbox_made_carrying_gets_the_same_files(
    box: Make, kind: str, made: list[Any], www: str
) -> None:
    """fresh_sandbox_carrying: on an image root, top-level paths go from upper layer to
    upper layer before the fresh sandbox starts (a nested one: the two calls); the
    fresh sandbox's files are the same either way, and the same as the two calls'."""
    parent = await box()
    chown = "" if kind == "host-userland" else "chown 1000 /app/sub/a &&"
    bin_dir = "/opt/bin" if kind == "host-userland" else "/usr/local/bin"
    ok(
        await parent.exec(
            f"mkdir -p /app/sub {bin_dir} && echo a > /app/sub/a && ln -s sub/a /app/link && "
            f"mkfifo /app/fifo && {chown} chmod 640 /app/sub/a && "
            f"printf '#!/bin/sh\\nexit 0\\n' > {bin_dir}/frob && chmod +x {bin_dir}/frob"
        )
    )
    if kind != "host-userland":
        ok(await parent.exec("rm /srv/www/secret.txt && echo new > /srv/www/new.txt"))
    paths = ["/app"] if kind == "host-userland" else ["/app", www]
    fresh, carried = await fresh_sandbox_carrying(parent, paths)
    made.append(fresh)
    assert fresh.rollout_id != parent.rollout_id
    assert carried.paths.pop("/app") in ("copied", "changes copied")
    assert carried.entries >= 1 and carried.bytes >= 2
    listing = ok(
        await fresh.exec(
            "cd /app && ls -A && cat sub/a link && readlink link && test -p fifo && "
            f"stat -c '%u %a' sub/a && (test -e {bin_dir}/frob && echo frob || echo no frob)"
        )
    )
    owner = "0" if kind == "host-userland" else "1000"
    assert listing == f"fifo\nlink\nsub\na\na\nsub/a\n{owner} 640\nno frob\n"
    if kind != "host-userland":
        assert carried.paths.pop(www) == "changes copied"
        # deleted under a carried path: deleted; made: made; the image's others: there
        assert ok(await fresh.exec("ls -A /srv/www; ls /srv/www/secret.txt || true")) == (
            "new.txt\n"
        )
        assert ok(await fresh.exec("test -d /usr/bin && ls /usr/local/bin")) == ""
    # the fresh sandbox runs as any does: it writes, and its entrypoint serves
    ok(await fresh.exec("echo b > /app/b && cat /app/b"))


async def test_a_restart_keeps_the_files_and_nothing_else(box: Make, kind: str) -> None:
    sb = await box()
    arg = unique_sleep_arg()
    etc = "/etc/agentkit-restart"
    ok(
        await sb.exec(
            f"echo kept > /app/kept && echo in-etc > {etc} && rm -f /etc/hostname.bak; "
            f"setsid sleep {arg} & readlink /proc/self/ns/pid > /tmp/ns"
        )
    )
    assert await wait_present(arg)
    if kind == "host-userland":
        # bubblewrap's link /bin -> usr/bin in the root, made a directory by a command
        ok(await sb.exec(["/usr/bin/bash", "-c", "rm /bin && mkdir /bin"]))
    await restart_sandbox(sb)
    assert host_pids_with_arg(arg) == []
    out = ok(await sb.exec(f"cat /app/kept {etc}; readlink /proc/self/ns/pid; cat /tmp/ns"))
    kept, in_etc, ns_now, ns_before = out.splitlines()
    assert (kept, in_etc) == ("kept", "in-etc")
    if kind != "docker":  # a container keeps its pid namespace's name across a restart
        assert ns_now != ns_before
    if kind != "host-userland":
        assert ok(await sb.exec(ANSWERS)) == "open sesame\n\n"  # the entrypoint again


async def test_close_with_a_closed_owner_closes_at_once(box: Make, made: list[Any]) -> None:
    owner = await box()
    other = await fresh_sandbox(owner)
    made.append(other)
    arg = unique_sleep_arg()
    ok(await other.exec(f"setsid sleep {arg} >/dev/null 2>&1 &"))
    assert await wait_present(arg)
    await owner.close()
    await close_with(owner, other)
    assert host_pids_with_arg(arg) == []
