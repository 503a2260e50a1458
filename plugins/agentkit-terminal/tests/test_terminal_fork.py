"""Forking a terminal episode mid-way: 8 children continue from the parent's chat history,
counters and files, each in its own fork of a real sandbox (bubblewrap on the host's
userland and on the task's image root, a Docker container), write different files,
read back only their own, and are all graded by the Harbor verifier."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from agentkit_terminal import TerminalEpisode, TerminalHarness
from terminal_helpers import HOST, harbor_task, harbor_taskset, needs_bwrap, text_call

import agentkit
from agentkit import EpisodeForkError, Event, ForkableEpisode, fork_episode
from agentkit.testing.sandbox_fixtures import requires_docker, requires_image_tool

pytestmark = [pytest.mark.anyio, needs_bwrap]

CHILDREN = 8


def sh(command: str) -> str:
    return text_call("shell", {"command": command})


def output_of(out: Any) -> str:
    """The command output in a text-format observation."""
    text: str = out.observations[0]["content"]
    return text.split("Output:\n", 1)[1].rsplit("\n</tool_response>", 1)[0]


def open_episode(events: list[Event] | None = None, **options: Any) -> TerminalEpisode:
    harness = TerminalHarness(**{"sandbox_options": HOST, **options})
    episode = agentkit.open_episode(
        harness,
        harbor_task("hello-world"),
        agentkit.RunContext(rollout_id="trunk"),
        None if events is None else events.append,
        taskset=harbor_taskset(),
    )
    assert isinstance(episode, TerminalEpisode)
    return episode


async def continue_child(child: TerminalEpisode, i: int) -> tuple[str, float]:
    """Child ``i`` writes its own file (and the right greeting when ``i`` is even),
    reads back what it sees, and submits; what it saw and its reward."""
    greeting = "Hello, world!" if i % 2 == 0 else f"Hello from {i}"
    await child.step(sh(f"echo child-{i} > /app/child.txt && printf '{greeting}\\n' > hello.txt"))
    seen = output_of(
        await child.step(sh("cat /app/child.txt /app/trunk.txt; ls /app | tr '\\n' ' '"))
    )
    last = await child.step(text_call("submit", {}))
    assert last.done
    return seen, last.reward


async def fork_mid_episode(episode: TerminalEpisode) -> None:
    """Two trunk steps, an 8-way fork, the parent closed first, the children on their own."""
    await episode.init()
    try:
        await episode.step(sh("echo trunk > /app/trunk.txt"))
        await episode.step("no call in this reply")  # a parse error, carried over
        assert isinstance(episode, ForkableEpisode)
        children = await fork_episode(episode, CHILDREN)
        assert len(children) == CHILDREN
        # the parent goes on, and its later files reach no child
        parent_ls = output_of(await episode.step(sh("echo parent > /app/parent.txt; ls /app")))
        assert "parent.txt" in parent_ls and "child.txt" not in parent_ls
        prefix = [dict(m) for m in episode.chat_history[:6]]
    finally:
        await episode.close()  # closing the parent leaves the children running
    try:
        for i, child in enumerate(children):
            assert isinstance(child, TerminalEpisode)
            assert child.context.rollout_id == f"trunk.b{i}"
            assert child.chat_history == prefix[:6]  # system, task, 2 replies, 2 observations
            assert (child.turns, child.tool_calls, child.parse_errors) == (2, 1, 1)
            assert child.sandbox is not None and child.owns_sandbox
        results = await asyncio.gather(*(continue_child(c, i) for i, c in enumerate(children)))
    finally:
        for child in children:
            await child.close()
    for i, (seen, reward) in enumerate(results):
        lines = seen.splitlines()
        assert lines[:2] == [f"child-{i}", "trunk"], seen
        assert sorted(lines[2].split()) == ["child.txt", "hello.txt", "trunk.txt"], seen
        assert reward == (1.0 if i % 2 == 0 else 0.0), (i, seen)
    for child in children:
        assert child.done_reason == "submitted" and child.turns == 5


async def test_an_8_way_fork_on_the_host_userland() -> None:
    events: list[Event] = []
    await fork_mid_episode(open_episode(events))
    forks = [e for e in events if e.type == "terminal.fork"]
    assert [e.data["children"] for e in forks] == [[f"trunk.b{i}" for i in range(CHILDREN)]]
    forked = [e for e in events if e.type == "terminal.forked"]
    assert sorted(e.rollout_id for e in forked) == sorted(f"trunk.b{i}" for i in range(CHILDREN))


@requires_image_tool
async def test_an_8_way_fork_on_the_tasks_image_root(image_cache: Path) -> None:
    await fork_mid_episode(open_episode(sandbox_options={"image_cache": str(image_cache)}))


@requires_docker
async def test_an_8_way_fork_in_docker() -> None:
    await fork_mid_episode(open_episode(sandbox="docker", sandbox_options={}))


async def test_a_child_forks_again_and_ids_number_on() -> None:
    episode = open_episode()
    await episode.init()
    try:
        await episode.step(sh("echo 1 > /app/level.txt"))
        (a,) = await fork_episode(episode, 1)
        (b,) = await fork_episode(episode, 1)
        assert [a.context.rollout_id, b.context.rollout_id] == ["trunk.b0", "trunk.b1"]
        assert isinstance(a, TerminalEpisode)
        await a.step(sh("echo 2 > /app/level.txt"))
        (grandchild,) = await fork_episode(a, 1)
        assert isinstance(grandchild, TerminalEpisode)
        await a.close()
        assert output_of(await grandchild.step(sh("cat /app/level.txt"))) == "2"
        assert output_of(await episode.step(sh("cat /app/level.txt"))) == "1"
        await grandchild.close()
        await b.close()
    finally:
        await episode.close()


async def test_what_a_fork_refuses() -> None:
    episode = open_episode()
    with pytest.raises(EpisodeForkError, match=r"terminal episode \(trunk\) cannot fork: .*init"):
        await fork_episode(episode, 2)
    await episode.init()
    try:
        with pytest.raises(EpisodeForkError, match="positive integer"):
            await fork_episode(episode, 0)
        await episode.step(text_call("submit", {}))
        with pytest.raises(EpisodeForkError, match=r"it is over \(submitted\)"):
            await fork_episode(episode, 2)
    finally:
        await episode.close()
    with pytest.raises(EpisodeForkError, match="it is closed"):
        await episode.fork(2)
    # the host sandbox cannot copy its state: the sandbox's own reason, named
    host = open_episode(sandbox="host", sandbox_options={})
    await host.init()
    try:
        with pytest.raises(EpisodeForkError, match=r"sandbox 'host' .* cannot fork"):
            await fork_episode(host, 2)
    finally:
        await host.close()


async def test_an_episode_without_fork_is_refused_by_name() -> None:
    class Plain:
        harness_name = "plain"

        async def init(self) -> Any: ...

    with pytest.raises(EpisodeForkError, match="episode of 'plain' cannot fork: Plain has no fork"):
        await fork_episode(Plain(), 2)
