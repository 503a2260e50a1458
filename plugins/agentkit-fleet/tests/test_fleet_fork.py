"""Forking a Fleet episode on the real bundled bookings app (an MCP server over stdio on
SQLite): each child continues on copies of the app's databases with its own server, so
the children's changes (and the parent's) stay apart; each child is verified on its own.
Environments whose state agentkit cannot copy refuse with a clear error."""

from __future__ import annotations

import asyncio
import copy
import json
import re
import shutil
import sqlite3
import tempfile
from pathlib import Path
from typing import Any

import pytest
from agentkit_fleet.environments import (
    EnvironmentForkError,
    LocalBookingsEnvironment,
    McpEnvironment,
    PlatformEnvironment,
    bookings_command,
)
from agentkit_fleet.episode import FleetToolCallEpisode
from agentkit_fleet.harness import FleetToolCallHarness
from agentkit_fleet.localenv.bookings import copy_database, prepare_databases
from agentkit_fleet.records import record_of
from agentkit_fleet.taskset import fleet_taskset
from fleet_helpers import TASKS_JSON

from agentkit import AgentEnv, BranchPlan, EpisodeForkError, Event, RunContext, fork_episode
from agentkit.testing.model_server import ScriptedModelServer

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap"),
]

TASKS = fleet_taskset(str(TASKS_JSON))
KEY = "register-and-book-katherine"
CHILDREN = 4


def call(tool: str, **arguments: Any) -> str:
    body = json.dumps({"name": tool, "arguments": arguments})
    return f"<tool_call>{body}</tool_call>"


def emails(db: Path) -> set[str]:
    con = sqlite3.connect(db)
    try:
        return {row[0] for row in con.execute("SELECT email FROM guests")}
    finally:
        con.close()


def episode_of(events: list[Event]) -> FleetToolCallEpisode:
    harness = FleetToolCallHarness(provider="local")
    episode = harness.episode(
        TASKS.get_task(f"fleet:{KEY}"), RunContext(rollout_id="trunk"), events.append
    )
    assert isinstance(episode, FleetToolCallEpisode)
    return episode


async def child_run(child: FleetToolCallEpisode, i: int) -> float:
    """Child ``i``: a guest of its own, then the booking (a single room when ``i`` is even,
    a double when odd: the verifier's 1 or 0), then done."""
    await child.step(call("create_guest", name=f"Child {i}", email=f"child{i}@example.com"))
    room = 1 if i % 2 == 0 else 3
    await child.step(
        call(
            "create_booking",
            guest_id=5,
            room_id=room,
            check_in="2026-05-05",
            check_out="2026-05-07",
        )
    )
    out = await child.step("Done. <done>")
    assert out.done
    return out.reward


async def test_children_continue_on_their_own_copies_of_the_apps_databases() -> None:
    events: list[Event] = []
    episode = episode_of(events)
    await episode.init()
    try:
        await episode.step(
            call("create_guest", name="Katherine Johnson", email="katherine@example.com")
        )
        children = await fork_episode(episode, CHILDREN)
        prefix = copy.deepcopy(episode.chat_history)
        # the parent goes on after the fork: no child sees its guest
        await episode.step(call("create_guest", name="Parent", email="parent@example.com"))
        parent_db = episode.environment.current_db
        assert isinstance(parent_db, Path)
        assert len(episode.chat_history) > len(prefix)
    finally:
        await episode.close()  # the children keep their own servers
    try:
        for i, child in enumerate(children):
            assert isinstance(child, FleetToolCallEpisode)
            assert child.recorder.rollout_id == f"trunk.b{i}"
            assert child.chat_history == prefix and child.turns == 1 and child.tool_calls == 1
        rewards = await asyncio.gather(*(child_run(c, i) for i, c in enumerate(children)))
        dbs = []
        for child in children:
            db = child.environment.current_db  # type: ignore[attr-defined]
            assert isinstance(db, Path)
            dbs.append(db)
        for i, db in enumerate(dbs):
            mine = emails(db)
            assert "katherine@example.com" in mine and f"child{i}@example.com" in mine
            assert "parent@example.com" not in mine
            assert not {f"child{j}@example.com" for j in range(CHILDREN) if j != i} & mine
            assert db.parent != parent_db.parent
    finally:
        for child in children:
            await child.close()
    assert rewards == [1.0, 0.0, 1.0, 0.0]
    for db in dbs:
        assert not db.parent.exists()  # each child's directory went with it
    kinds = [e.type for e in events if e.rollout_id == "trunk"]
    assert "fleet.fork" in kinds
    assert sum(1 for e in events if e.type == "fleet.forked") == CHILDREN


async def test_the_backup_copy_is_consistent_and_leaves_the_source_unchanged() -> None:
    folder = Path(tempfile.mkdtemp())
    try:
        _seed, current = prepare_databases(folder)
        before = current.read_bytes()
        copy = copy_database(current, folder / "copy.sqlite")
        assert emails(copy) == emails(current) and current.read_bytes() == before
    finally:
        shutil.rmtree(folder)


async def test_environments_that_cannot_copy_their_state_refuse() -> None:
    record = record_of(TASKS.get_task(f"fleet:{KEY}"))
    platform = PlatformEnvironment(record, api_key="not-a-real-key-0123456789")
    with pytest.raises(EnvironmentForkError, match=r"Fleet platform environment .* cannot fork"):
        await platform.fork()
    local = LocalBookingsEnvironment()
    try:
        with pytest.raises(EnvironmentForkError, match="not started"):
            await local.fork()
    finally:
        await local.close()
    # an MCP server given by command (here the bookings app itself) keeps its own state
    folder = Path(tempfile.mkdtemp())
    seed, current = prepare_databases(folder)
    env = McpEnvironment(command=bookings_command(seed, current), seed_db=seed, current_db=current)
    episode = FleetToolCallEpisode(record, env, recorder=None)
    try:
        with pytest.raises(EpisodeForkError, match="not started"):
            await fork_episode(episode, 2)
        await episode.init()
        with pytest.raises(
            EpisodeForkError, match=r"cannot fork: the 'mcp' environment .* keeps its state"
        ):
            await fork_episode(episode, 2)
        await episode.step("Done. <done>")
        with pytest.raises(EpisodeForkError, match="it is over"):
            await fork_episode(episode, 2)
    finally:
        await episode.close()
        shutil.rmtree(folder)


async def test_a_branching_run_on_the_local_app_scores_each_childs_own_booking(
    model_server: ScriptedModelServer, tmp_path: Path
) -> None:
    """AgentEnv.branch with the Fleet harness: the trunk registers the guest, then 2
    children (each of the 2 identical requests gets its own reply) book different rooms
    in their own copies of the app's databases; the verifier scores each copy."""
    guest = call("create_guest", name="Katherine Johnson", email="katherine@example.com")
    rules: list[dict[str, Any]] = [{"match": {"turn": 0}, "reply": {"content": guest}}]
    for room in (1, 3):  # a single room (the task's answer: 1) and a double (0)
        booking = call(
            "create_booking",
            guest_id=5,
            room_id=room,
            check_in="2026-05-05",
            check_out="2026-05-07",
        )
        rules.append({"match": {"turn": 1}, "times": 1, "reply": {"content": booking}})
    model_server.set_script({"rules": rules, "default": {"content": "Done. <done>"}})
    env = AgentEnv(TASKS, FleetToolCallHarness(provider="local"))
    results = await env.branch(
        BranchPlan(at=1, children=2),
        task_ids=[f"fleet:{KEY}"],
        model="scripted-model",
        base_url=model_server.base_url,
        out=tmp_path / "run",
    )
    [root] = [r for r in results.rollouts if r.children]
    leaves = [r for r in results.rollouts if r.parent_rollout_id == root.rollout_id]
    assert len(leaves) == 2 and all(r.status == "completed" for r in leaves), leaves
    # each child's own reply after the fork (message 4) says which room it booked
    rooms = {re.findall(r'"room_id": (\d+)', r.messages[4]["content"])[0]: r.reward for r in leaves}
    assert rooms == {"1": 1.0, "3": 0.0}
    [group] = results.groups
    assert group.branch_point == f"{root.rollout_id}@1" and sorted(group.rewards) == [0.0, 1.0]
