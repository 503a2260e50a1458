"""The explicit, unisolated host mode."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from agentkit import registry
from agentkit._sandbox import ExecutionHints
from agentkit.sandbox import open_sandbox
from agentkit.sandbox.host import HostSandbox
from agentkit.testing.sandbox_fixtures import unique_sleep_arg as unique_sleep
from agentkit.testing.sandbox_fixtures import wait_gone, wait_present

pytestmark = pytest.mark.anyio


async def test_paths_are_translated_under_root(host_sandbox: HostSandbox, tmp_path: Path) -> None:
    fs = host_sandbox.fs_root
    r = await host_sandbox.exec("pwd; echo hi > /logs/verifier/reward.txt; echo $AGENTKIT_ROOT")
    assert r.ok, r.stderr
    assert r.stdout.splitlines() == [str(fs / "app"), str(fs)]
    assert (fs / "logs/verifier/reward.txt").read_text() == "hi\n"
    script = tmp_path / "test.sh"
    script.write_text('echo "$AGENTKIT_ROOT" > "$AGENTKIT_ROOT/logs/verifier/out"\n')
    await host_sandbox.upload(script, "/tests/test.sh")
    assert (await host_sandbox.exec(["bash", "/tests/test.sh"])).ok
    await host_sandbox.download("/logs/verifier/out", tmp_path / "out")
    assert (tmp_path / "out").read_text() == f"{fs}\n"
    assert host_sandbox.translate("cat /application /app/x") == f"cat /application {fs}/app/x"


async def test_environment_is_cleared(sandbox_factory, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    secret = f"sk-host-{random.randint(0, 10**9)}"
    monkeypatch.setenv("OPENAI_API_KEY", secret)
    sb = await sandbox_factory("host", hints=ExecutionHints(env={"TASK": "1"}))
    r = await sb.exec("env")
    assert secret not in r.stdout and "TASK=1" in r.stdout


async def test_processes_killed_on_timeout_and_close(sandbox_factory) -> None:
    sb = await sandbox_factory("host")
    a, b, c = unique_sleep(), unique_sleep(), unique_sleep()
    r = await sb.exec(
        f"sleep {a} & echo $! >> started; sleep {b} & echo $! >> started; wait", timeout=0.5
    )
    assert r.timed_out
    # both had started (their pids were written) before the timeout killed them
    assert len(sb.host_path(f"{sb.workdir}/started").read_text().split()) == 2
    assert await wait_gone(a) == [] and await wait_gone(b) == []
    assert (await sb.exec(f"setsid sleep {c} > /dev/null 2>&1 &")).ok
    assert await wait_present(c)
    await sb.close()
    assert await wait_gone(c) == []


async def test_warning_and_registration(tmp_path: Path) -> None:
    factory = registry.resolve_sandbox("host")
    sb = factory(root=tmp_path, hints=ExecutionHints(), rollout_id="r")
    assert isinstance(sb, HostSandbox)
    assert sb.warning and "without isolation" in sb.warning
    assert HostSandbox.warning == sb.warning
    async with open_sandbox("host") as s:
        assert (await s.exec("echo ok")).stdout == "ok\n"
