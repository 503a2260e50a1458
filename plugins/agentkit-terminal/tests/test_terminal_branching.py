"""A branching run on the real Harbor hello-world task (bubblewrap sandboxes on the host's
userland, the scripted model server as the policy): one episode writes a file, forks into 8
children at step 1; each child writes a file of its own (the server hands each of the 8
identical requests a different reply), lists what it sees and submits; all 8 are graded by
the Harbor verifier. The run directory holds the tree, the group of the branch point, and
an export in which each leaf says where its shared prefix ends."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from agentkit_harbor import HarborTaskset
from agentkit_terminal import TerminalHarness
from aiohttp.test_utils import TestClient, TestServer
from terminal_helpers import HARBOR, HOST, needs_bwrap, text_call

from agentkit import AgentEnv, BranchPlan
from agentkit.env import PREFIX_STATUS, RolloutRecord
from agentkit.testing.model_server import ScriptedModelServer
from agentkit.training import from_run_dir, prepare
from agentkit.view import create_app

pytestmark = [pytest.mark.anyio, needs_bwrap]

CHILDREN = 8


def sh(command: str) -> str:
    return text_call("shell", {"command": command})


def greeting(j: int) -> str:
    """Child ``j``'s greeting: the right one when ``j`` is even (reward 1), else wrong."""
    return "Hello, world!" if j % 2 == 0 else f"Hello from {j}"


def branching_script() -> dict[str, Any]:
    """Turn 0 writes the trunk's file; at turn 1 (after the fork) each of 8 rules answers
    once, so the 8 identical requests get 8 different replies; turn 2 lists the files."""
    rules: list[dict[str, Any]] = [
        {"match": {"turn": 0}, "reply": {"content": sh("echo trunk > /app/trunk.txt")}}
    ]
    for j in range(CHILDREN):
        command = f"echo {j} > /app/child-{j}.txt && printf '{greeting(j)}\\n' > /app/hello.txt"
        rules.append({"match": {"turn": 1}, "times": 1, "reply": {"content": sh(command)}})
    rules.append({"match": {"turn": 2}, "reply": {"content": sh("echo FILES: $(ls /app | sort)")}})
    return {"rules": rules, "default": {"content": text_call("submit", {})}}


def files_seen(leaf: RolloutRecord) -> set[str]:
    """The files of /app the leaf listed at turn 2 (its observation of that command)."""
    text = "\n".join(str(m.get("content")) for m in leaf.messages if m.get("role") != "assistant")
    found = re.findall(r"FILES: (.*)", text)
    assert len(found) == 1, text
    return set(found[0].split())


async def test_eight_children_of_one_episode_finish_scored_with_their_own_files(
    model_server: ScriptedModelServer, tmp_path: Path
) -> None:
    model_server.set_script(branching_script())
    env = AgentEnv(HarborTaskset(str(HARBOR)), TerminalHarness(sandbox_options=HOST))
    out = tmp_path / "run"
    results = await env.branch(
        BranchPlan(at=1, children=CHILDREN, token_ids=True),
        task_ids=["harbor:hello-world"],
        model="scripted-model",
        base_url=model_server.base_url,
        out=out,
    )
    [root] = [r for r in results.rollouts if r.status == PREFIX_STATUS]
    leaves = [r for r in results.rollouts if r.status != PREFIX_STATUS]
    assert len(leaves) == CHILDREN and root.parent_rollout_id is None
    assert sorted(root.children) == sorted(r.rollout_id for r in leaves)
    # the prefix: system, task, the trunk's reply and its observation
    assert len(root.messages) == 4 and root.reward is None
    by_file: dict[int, RolloutRecord] = {}
    for leaf in leaves:
        assert leaf.status == "completed", leaf.error
        assert leaf.parent_rollout_id == root.rollout_id and leaf.branch_step == 1
        assert leaf.messages[:4] == root.messages
        seen = files_seen(leaf)
        mine = {f for f in seen if f.startswith("child-")}
        assert len(mine) == 1, seen  # its own file, none of its siblings'
        assert "trunk.txt" in seen  # and the parent's, written before the fork
        j = int(mine.pop().removeprefix("child-").removesuffix(".txt"))
        by_file[j] = leaf
    assert sorted(by_file) == list(range(CHILDREN))  # each child wrote a different file
    for j, leaf in by_file.items():
        assert leaf.reward == (1.0 if j % 2 == 0 else 0.0), (j, leaf.rewards)
    # one GRPO group: the branch point's 8 children, advantages about their mean (0.5)
    [group] = results.groups
    assert group.branch_point == f"{root.rollout_id}@1"
    assert sorted(a for a in group.advantages if a is not None) == [-0.5] * 4 + [0.5] * 4
    assert results.summary["branching"]["leaves"] == CHILDREN

    # the run directory records the tree and the group
    lines = [json.loads(x) for x in (out / "rollouts.jsonl").read_text().splitlines()]
    stored = {x["rollout_id"]: x for x in lines}
    assert stored[root.rollout_id]["children"] == root.children
    assert {stored[r.rollout_id]["parent_rollout_id"] for r in leaves} == {root.rollout_id}
    [group_line] = [json.loads(x) for x in (out / "groups.jsonl").read_text().splitlines()]
    assert group_line["branch_point"] == f"{root.rollout_id}@1"
    assert json.loads((out / "manifest.json").read_text())["branching"]["children"] == CHILDREN

    # the export: leaves only, each saying where its shared prefix ends
    records = from_run_dir(out)
    assert len(records) == CHILDREN
    prefix_tokens = len(root.raw["completion_token_ids"])
    for record in records:
        assert record.prefix_id == root.rollout_id and record.prefix_messages == 4
        assert record.prefix_tokens == prefix_tokens > 0
        assert record.completion_token_ids is not None
        assert record.completion_token_ids[:prefix_tokens] == root.raw["completion_token_ids"]
    grouped = prepare(records, group_by="branch_point")
    assert sorted(r.advantage for r in grouped if r.advantage is not None) == [-0.5] * 4 + [0.5] * 4

    # the viewer's rollout API: the root lists its children, a leaf links its parent
    async with TestClient(TestServer(create_app(out))) as viewer:
        resp = await viewer.get(f"/api/run/run/rollout/{root.rollout_id}")
        assert (await resp.json())["branches"]["children"] == root.children
        resp = await viewer.get(f"/api/run/run/rollout/{leaves[0].rollout_id}")
        leaf_view = (await resp.json())["branches"]
    assert leaf_view["parent"] == root.rollout_id and leaf_view["branch_step"] == 1


def test_the_branching_example_runs_and_scores_every_leaf(tmp_path: Path) -> None:
    """examples/branching/branch_run.py, run as a user runs it (a subprocess)."""
    example = HARBOR.parent / "branching" / "branch_run.py"
    done = subprocess.run(
        [sys.executable, str(example), str(tmp_path / "run")],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    shown = json.loads(done.stdout.splitlines()[-1])
    leaves = {k: v for k, v in shown["tree"].items() if v["parent"] is not None}
    assert sorted(v["reward"] for v in leaves.values()) == [0.0, 0.0, 1.0, 1.0]
    [group] = shown["groups"]
    assert sorted(a["advantage"] for a in shown["export"]) == [-0.5, -0.5, 0.5, 0.5]
    assert {a["prefix_id"] for a in shown["export"]} == {group["branch_point"].split("@")[0]}
    assert (tmp_path / "run" / "rollouts.jsonl").is_file()


async def test_a_root_that_ends_early_is_a_leaf_and_a_failed_child_fails_alone(
    model_server: ScriptedModelServer, tmp_path: Path
) -> None:
    """Two roots: at the first model call one submits at once (before the branch point:
    a scored leaf, no fork), the other looks around; of the second's 2 children, the
    model server fails one's call (that child fails with the error, unscored) and the
    other submits."""
    write = {"content": sh("printf 'Hello, world!\\n' > /app/hello.txt")}
    model_server.set_script(
        {
            "rules": [
                {"match": {"turn": 0}, "times": 1, "reply": {"content": text_call("submit", {})}},
                {"match": {"turn": 0}, "reply": {"content": sh("ls /app")}},
                {"match": {"turn": 1}, "times": 1, "reply": {"fail": "server_error"}},
                {"match": {"turn": 1}, "reply": write},
            ],
            "default": {"content": text_call("submit", {})},
        }
    )
    env = AgentEnv(HarborTaskset(str(HARBOR)), TerminalHarness(sandbox_options=HOST))
    results = await env.branch(
        BranchPlan(at=1, children=2),
        task_ids=["harbor:hello-world"],
        model="scripted-model",
        base_url=model_server.base_url,
        rollouts_per_task=2,
        concurrency=1,  # the roots one after the other: the first takes the submit
        out=tmp_path / "run",
    )
    by_id = {r.rollout_id: r for r in results.rollouts}
    early = [r for r in results.rollouts if r.parent_rollout_id is None and not r.children]
    [early_root] = early
    assert early_root.status == "completed" and early_root.reward == 0.0  # no hello.txt
    [root] = [r for r in results.rollouts if r.children]
    kids = [by_id[c] for c in root.children]
    failed = [k for k in kids if k.status == "failed"]
    [ok] = [k for k in kids if k.status == "completed"]
    assert len(failed) == 1 and failed[0].reward is None
    assert failed[0].error_kind == "model_server_error", failed[0].error
    assert ok.reward == 1.0 and ok.advantage == 0.0  # alone among the scored of its group
    [group] = results.groups
    assert group.branch_point == f"{root.rollout_id}@1"
    assert results.summary["branching"] == {
        "at": 1,
        "children": 2,
        "token_ids": False,
        "prefixes": 1,
        "leaves": 3,
        "groups": 1,
    }
