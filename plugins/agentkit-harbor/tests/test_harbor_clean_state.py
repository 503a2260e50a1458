"""Harbor's grading and the sandbox's clean state, on real sandboxes: a separate
verifier on docker asks the engine for the agent's changes once, and a verifier's
sandbox closed without grading waiting for it still ends before the agent's own close.

Each runs on the local sandbox on the host's userland and on an image root, and on
the docker sandbox (the first on docker only), with a real Harbor example task's
image (moved here from the core's tests/test_sandbox_clean_state.py: the core's
tests do not import the plugins).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from agentkit_harbor import load_task_dir, verify

from agentkit._sandbox import ExecResult, ExecutionHints, TaskImage
from agentkit.testing.sandbox_fixtures import host_pids_with_arg, requires_bwrap, unique_sleep_arg

pytestmark = [pytest.mark.anyio, requires_bwrap]

Make = Callable[[], Awaitable[Any]]

ROOT = Path(__file__).resolve().parents[3]
SERVICE_ENV = ROOT / "examples" / "harbor-docker" / "service-at-start" / "environment"
SERVICE = TaskImage(dockerfile=str(SERVICE_ENV / "Dockerfile"), context=str(SERVICE_ENV))


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


@pytest.mark.parametrize("kind", ["docker"], indirect=True)
async def test_a_separate_verifier_on_docker_lists_the_changes_once(
    box: Make, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Harbor's separate grading on docker asks the engine for the container's changes
    (``docker diff``) once: the carry's listing, taken while the container was paused,
    also names what the verifier was not given (a tool planted outside ``/app``)."""
    agent = await box()
    ok(
        await agent.exec(
            "mkdir -p /app && echo done > /app/out && printf '#!/bin/sh\\n' > /usr/local/bin/frob"
        )
    )
    task = tmp_path / "task"
    (task / "tests").mkdir(parents=True)
    (task / "task.toml").write_text('[environment]\nworkdir = "/app"\n')
    (task / "instruction.md").write_text("Write /app/out.\n")
    (task / "tests" / "test.sh").write_text(
        "test -f /app/out && echo 1 > /logs/verifier/reward.txt || echo 0 > "
        "/logs/verifier/reward.txt\n"
    )
    client = type(agent._client)
    asked: list[str] = []
    real = client._query_json

    async def counting(self: Any, path: str, *args: Any, **kwargs: Any) -> Any:
        if path.endswith("/changes"):
            asked.append(path)
        return await real(self, path, *args, **kwargs)

    monkeypatch.setattr(client, "_query_json", counting)
    outcome = await verify(agent, load_task_dir(task), isolation="separate", final=True)
    assert outcome.rewards == {"reward": 1.0}, outcome
    assert len(asked) == 1, asked
    assert any("/usr/local/bin/frob" in note for note in outcome.notes), outcome.notes


async def test_a_verifier_sandbox_closed_without_waiting_is_closed_before_the_agent(
    box: Make, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A separate verifier's sandbox is closed without grading waiting for it
    (``close_with``), but nothing of it outlives the agent's sandbox: what its test.sh
    left running has ended by the time the agent's own close begins, and after it."""
    agent = await box()
    arg = unique_sleep_arg()
    task = tmp_path / "task"
    (task / "tests").mkdir(parents=True)
    (task / "task.toml").write_text('[environment]\nworkdir = "/app"\n')
    (task / "instruction.md").write_text("Nothing to do.\n")
    (task / "tests" / "test.sh").write_text(
        f"setsid sleep {arg} >/dev/null 2>&1 &\n"
        # until it is sleep (before its exec its command line is not)
        "until grep -qx sleep /proc/$!/comm; do :; done\n"
        "echo 1 > /logs/verifier/reward.txt\n"
    )
    outcome = await verify(agent, load_task_dir(task), isolation="separate", final=True)
    assert outcome.rewards == {"reward": 1.0}, outcome
    assert outcome.isolation == "separate"
    # still running: nothing waited for the verifier's sandbox to close (no await since)
    assert host_pids_with_arg(arg)
    left: list[list[int]] = []
    take_down = agent._take_down

    async def watched() -> None:
        left.append(host_pids_with_arg(arg))  # the verifier's, as the agent's own end begins
        await take_down()

    monkeypatch.setattr(agent, "_take_down", watched)
    await agent.close()
    assert left == [[]], f"the verifier's sleep {arg} ran on into the agent's close"
    assert host_pids_with_arg(arg) == []
