"""The local (bubblewrap) sandbox: real bwrap, real processes, no mocks."""

from __future__ import annotations

import os
import random
import shutil
from pathlib import Path

import pytest

from agentkit import registry
from agentkit._sandbox import ExecutionHints, Sandbox
from agentkit.sandbox import SandboxUnavailableError, open_sandbox
from agentkit.sandbox.local import LocalSandbox
from agentkit.testing.sandbox_fixtures import requires_bwrap, wait_gone, wait_present
from agentkit.testing.sandbox_fixtures import unique_sleep_arg as unique_sleep

pytestmark = [pytest.mark.anyio, requires_bwrap]


async def test_runs_commands_in_the_expected_layout(local_sandbox: LocalSandbox) -> None:
    assert isinstance(local_sandbox, Sandbox)
    r = await local_sandbox.exec(
        "pwd; id -u; ls -d /app /logs/agent /logs/verifier /logs/artifacts /tests /solution /tmp"
    )
    assert r.ok, r.stderr
    lines = r.stdout.split()
    assert lines[:2] == ["/app", "0"]
    assert "/logs/verifier" in lines
    r = await local_sandbox.exec(["python3", "-c", "print(6*7)"])
    assert r.stdout == "42\n"
    r = await local_sandbox.exec(["node", "-e", "console.log(6*7)"])
    assert r.stdout == "42\n", r.stderr


async def test_files_persist_between_commands_and_reach_the_host(
    local_sandbox: LocalSandbox, tmp_path: Path
) -> None:
    assert (await local_sandbox.exec("echo 1 > /logs/verifier/reward.txt")).ok
    assert (await local_sandbox.exec("cat /logs/verifier/reward.txt")).stdout == "1\n"
    await local_sandbox.download("/logs/verifier/reward.txt", tmp_path / "reward.txt")
    assert (tmp_path / "reward.txt").read_text() == "1\n"
    src = tmp_path / "tests"
    (src / "sub").mkdir(parents=True)
    (src / "sub" / "test.sh").write_text("echo from-test\n")
    await local_sandbox.upload(src, "/tests")
    r = await local_sandbox.exec("bash /tests/sub/test.sh", cwd="/tests")
    assert r.stdout == "from-test\n"


async def test_exit_code_stderr_env_and_cwd(local_sandbox: LocalSandbox) -> None:
    r = await local_sandbox.exec("echo oops >&2; exit 3", env={"X": "y"})
    assert (r.exit_code, r.stderr, r.ok) == (3, "oops\n", False)
    r = await local_sandbox.exec("echo $X; pwd", env={"X": "y"}, cwd="/logs")
    assert r.stdout == "y\n/logs\n"


async def test_commands_start_in_the_workdir_even_when_it_was_replaced(
    local_sandbox: LocalSandbox,
) -> None:
    assert (await local_sandbox.exec("cd / && rm -rf /app && mkdir /app && touch /app/new")).ok
    r = await local_sandbox.exec("ls; pwd")
    assert r.stdout == "new\n/app\n", r.stderr
    setup = "mkdir /elsewhere && touch /elsewhere/x && cd / && rm -rf /app && ln -s /elsewhere /app"
    assert (await local_sandbox.exec(setup)).ok
    r = await local_sandbox.exec(["ls"])
    assert r.stdout == "x\n", r.stderr
    assert (await local_sandbox.exec("cd / && rm /app")).ok
    r = await local_sandbox.exec(["true"])
    assert not r.ok and "/app" in r.stderr


async def test_hints_workdir_env_and_paths(sandbox_factory, tmp_path: Path) -> None:
    env_dir = tmp_path / "environment"
    env_dir.mkdir()
    (env_dir / "data.txt").write_text("payload")
    hints = ExecutionHints(
        workdir="/workspace", env={"TASK": "t1"}, paths={"/workspace": str(env_dir)}
    )
    sb = await sandbox_factory("local", hints=hints)
    r = await sb.exec("pwd; echo $TASK; cat data.txt")
    assert r.stdout == "/workspace\nt1\npayload"


async def test_cannot_write_outside_its_own_directories(
    local_sandbox: LocalSandbox, tmp_path: Path
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    host_passwd = Path("/etc/passwd").read_bytes()
    script = f"""
    touch /usr/agentkit-escape 2>/dev/null && echo usr-writable
    touch /etc/ssl/agentkit-escape 2>/dev/null && echo ssl-writable
    echo 'evil:x:0:0::/:/bin/sh' >> /etc/passwd
    mkdir -p {outside} && touch {outside}/escaped
    mount -o remount,rw /usr 2>/dev/null && echo remounted
    echo done
    """
    r = await local_sandbox.exec(script)
    assert r.stdout == "done\n", r.stdout
    assert not Path("/usr/agentkit-escape").exists()
    assert Path("/etc/passwd").read_bytes() == host_passwd
    assert not (outside / "escaped").exists()
    # What it wrote landed in the rollout's own root.
    assert (local_sandbox.fs_root / outside.relative_to("/") / "escaped").exists()
    assert "evil" in (await local_sandbox.exec("cat /etc/passwd")).stdout


async def test_has_no_capabilities(local_sandbox: LocalSandbox) -> None:
    r = await local_sandbox.exec("grep -E '^Cap(Eff|Prm|Bnd|Amb)' /proc/self/status")
    values = {line.split()[1] for line in r.stdout.splitlines()}
    assert values == {"0000000000000000"}, r.stdout


async def test_cannot_read_the_orchestrator_environment(
    sandbox_factory, monkeypatch: pytest.MonkeyPatch
) -> None:
    import subprocess

    secret = f"sk-agentkit-test-{random.randint(0, 10**9)}"
    monkeypatch.setenv("OPENAI_API_KEY", secret)
    # a host process started with the secret in its environment and a unique argument:
    # what the sandbox sees of the host's processes, it would see of this one
    arg = unique_sleep()
    host = subprocess.Popen(["sleep", arg], env={**os.environ, "HOST_SECRET": secret})
    try:
        assert await wait_present(arg)
        sb = await sandbox_factory("local")
        r = await sb.exec(
            "env; for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline; echo; "
            "tr '\\0' '\\n' < $p/environ; done 2>/dev/null"
        )
        assert r.ok, r.stderr
        assert "for p in /proc/[0-9]*" in r.stdout  # the listing did see processes: its own
        assert secret not in r.stdout and "OPENAI_API_KEY" not in r.stdout
        assert arg not in r.stdout  # the host process is not there at all
    finally:
        host.kill()
        host.wait()


async def test_background_process_outlives_exec_but_not_close(
    sandbox_factory,
) -> None:
    sb = await sandbox_factory("local")
    arg = unique_sleep()
    r = await sb.exec(f"sleep {arg} > /dev/null 2>&1 &")
    assert r.ok
    assert await wait_present(arg), "a background process keeps running between commands"
    await sb.close()
    assert await wait_gone(arg) == []


async def test_background_process_holding_stdout_does_not_block_exec(
    local_sandbox: LocalSandbox,
) -> None:
    arg = unique_sleep()
    r = await local_sandbox.exec(f"sleep {arg} & echo started", timeout=60)
    # exec returned (not at its timeout) while the background sleep, which holds
    # the command's stdout open, still runs
    assert not r.timed_out and r.stdout == "started\n"
    assert await wait_present(arg)


async def test_timeout_kills_the_whole_tree(local_sandbox: LocalSandbox) -> None:
    a, b = unique_sleep(), unique_sleep()
    r = await local_sandbox.exec(
        f"sleep {a} & echo $! >> started; sleep {b} & echo $! >> started; wait; echo never",
        timeout=0.5,
    )
    assert r.timed_out and not r.ok
    assert "never" not in r.stdout
    # both had started (their pids were written) before the timeout killed them
    assert len(local_sandbox.host_path("/app/started").read_text().split()) == 2
    assert await wait_gone(a) == [] and await wait_gone(b) == []
    # The sandbox still works after a timeout.
    assert (await local_sandbox.exec("echo alive")).stdout == "alive\n"


async def test_start_streams_lines_before_exit(local_sandbox: LocalSandbox) -> None:
    proc = await local_sandbox.start(["sh", "-c", "read x; echo got-$x; echo second; sleep 30"])
    await proc.write_stdin(b"prompt\n")
    lines = proc.stdout_lines()
    assert await anext(lines) == "got-prompt"
    assert await anext(lines) == "second"
    result = await proc.wait(timeout=0.3)  # still running: this times out and kills it
    assert result.timed_out
    assert result.stdout == "got-prompt\nsecond\n"


async def test_close_then_remove_root(tmp_path: Path) -> None:
    sb = LocalSandbox(root=tmp_path / "r", rollout_id="r1")
    async with sb:
        assert (await sb.exec("echo hi > /app/x")).ok
    assert (tmp_path / "r" / "fs" / "app" / "x").exists()  # kept by default
    await sb.close(remove=True)
    assert not (tmp_path / "r").exists()


async def test_open_sandbox_uses_and_removes_a_temporary_root() -> None:
    async with open_sandbox("local") as sb:
        root = sb.root
        assert (await sb.exec("echo ok")).stdout == "ok\n"
        assert root.exists()
    assert not root.exists()


async def test_missing_bubblewrap_is_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(SandboxUnavailableError, match="apt-get install bubblewrap"):
        LocalSandbox(root=tmp_path, bwrap=str(tmp_path / "no-bwrap"))
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(SandboxUnavailableError, match="--sandbox host"):
        registry.resolve_sandbox("local")(root=tmp_path, hints=ExecutionHints(), rollout_id="x")


async def test_registered_with_typed_options(tmp_path: Path) -> None:
    factory = registry.resolve_sandbox("local", allow_network=True, max_open_files=100)
    sb = factory(root=tmp_path, hints=ExecutionHints(network=True), rollout_id="x")
    assert isinstance(sb, LocalSandbox) and sb.network
    schema = registry.option_schema("sandbox", "local")
    assert schema.parse_cli(["allow_network=true"], flag="-S") == {"allow_network": True}
    assert LocalSandbox.warning is None


async def test_extra_read_only_binds(sandbox_factory, tmp_path: Path) -> None:
    tool = tmp_path / "tooldir"
    tool.mkdir()
    (tool / "hello").write_text("from host")
    sb = await sandbox_factory("local", ro_binds=[str(tool)])
    assert (await sb.exec(f"cat {tool}/hello")).stdout == "from host"
    assert not (await sb.exec(f"touch {tool}/new")).ok
    assert not (tool / "new").exists()


@pytest.mark.skipif(
    not Path("/root/.pyenv").is_dir() and not shutil.which("python3"), reason="no host python"
)
async def test_host_python_via_ro_binds(sandbox_factory) -> None:
    import sys

    prefix = os.path.realpath(sys.base_prefix)
    sb = await sandbox_factory("local", ro_binds=[prefix])
    exe = os.path.realpath(sys.executable)
    r = await sb.exec([exe, "-c", "import sys; print(sys.version_info[:2])"])
    assert r.stdout.strip() == str(tuple(sys.version_info[:2])), r.stderr


async def test_sandboxes_run_concurrently_and_are_isolated_from_each_other(
    sandbox_factory,
) -> None:
    import asyncio

    boxes = await asyncio.gather(*(sandbox_factory("local") for _ in range(4)))
    args = [unique_sleep() for _ in boxes]
    await asyncio.gather(
        *(
            b.exec(f"echo {i} > /app/id; sleep {arg} > /dev/null 2>&1 &")
            for i, (b, arg) in enumerate(zip(boxes, args, strict=True))
        )
    )
    for arg in args:
        assert await wait_present(arg)
    results = await asyncio.gather(
        *(b.exec("cat /app/id; cat /proc/[0-9]*/cmdline | tr '\\0' ' '") for b in boxes)
    )
    assert [r.stdout.split()[0] for r in results] == ["0", "1", "2", "3"]
    for i, r in enumerate(results):  # each sees its own process and no other sandbox's
        seen = [arg for arg in args if arg in r.stdout]
        assert seen == [args[i]], (i, r.stdout)


async def test_closed_sandbox_refuses_commands(tmp_path: Path) -> None:
    from agentkit.sandbox import SandboxError

    sb = LocalSandbox(root=tmp_path / "r")
    async with sb:
        pass
    with pytest.raises(SandboxError, match="closed"):
        await sb.exec("true")


async def test_orchestrator_death_kills_the_sandbox(tmp_path: Path) -> None:
    import subprocess
    import sys

    arg = unique_sleep()
    script = f"""
import asyncio, os, signal
from agentkit.sandbox.local import LocalSandbox
async def main():
    sb = LocalSandbox(root={str(tmp_path / "r")!r})
    await sb.setup()
    await sb.exec("sleep {arg} > /dev/null 2>&1 &")
    from agentkit.testing.sandbox_fixtures import wait_present
    if await wait_present({arg!r}):  # it runs, so its being gone later means something
        print("started", flush=True)
    os.kill(os.getpid(), signal.SIGKILL)
asyncio.run(main())
"""
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert "started" in proc.stdout, proc.stderr
    assert await wait_gone(arg) == []


@pytest.mark.skipif(os.geteuid() != 0, reason="switching to another host user needs root")
async def test_other_host_users_cannot_run_what_the_sandbox_made_setuid() -> None:
    """Files the sandbox makes are the orchestrator's on the host: a setuid copy
    of a shell planted in /app must stay out of other local users' reach."""
    import subprocess
    import tempfile

    base = Path(tempfile.mkdtemp(prefix="agentkit-suid-"))
    try:
        os.chmod(base, 0o755)  # a run directory others can traverse, as under ./runs
        async with LocalSandbox(root=base / "rollout") as sb:
            r = await sb.exec("cp /usr/bin/id /app/id && chmod 4755 /app/id")
            assert r.ok, r.stderr
            planted = sb.host_path("/app/id")
            assert planted.stat().st_mode & 0o4000  # the bit is there on the host...
            with pytest.raises(PermissionError):  # ...but out of reach
                subprocess.run(
                    [str(planted), "-u"], user=65534, group=65534, extra_groups=[], check=False
                )
            # What reaches it (as nobody) also shows the rollout is private.
            probe = "import os, sys; print(os.access(sys.argv[1], os.X_OK))"
            run = subprocess.run(
                ["/usr/bin/python3", "-c", probe, str(planted)],
                user=65534, group=65534, extra_groups=[], capture_output=True, text=True,
            )  # fmt: skip
            assert run.stdout == "False\n", run.stderr
    finally:
        shutil.rmtree(base)


async def test_host_userland_has_the_directories_of_a_base_image_and_useradd_works(
    local_sandbox: LocalSandbox,
) -> None:
    r = await local_sandbox.exec(
        "for d in /var /var/log /var/tmp /home /opt /run /srv /mnt; do "
        "test -d $d -a -w $d || echo missing $d; done; stat -c %a /var/tmp"
    )
    assert r.stdout == "1777\n", r.stdout + r.stderr
    script = (
        "groupadd -g 2000 team && useradd -m -u 1500 -G team -s /bin/bash agent && "
        "id agent && getent group team && test -d /home/agent && "
        "grep -c '^agent:' /etc/shadow"
    )
    r = await local_sandbox.exec(script)
    assert r.ok, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith("uid=1500(agent) gid=1500(agent)") and "2000(team)" in lines[0]
    assert lines[1].startswith("team:x:2000:agent")
    assert lines[2] == "1"
