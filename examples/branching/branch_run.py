"""A branching run on a Harbor task: run to a branch step, fork, continue, score every leaf.

One episode of ``harbor:hello-world`` (the terminal harness, its sandbox the local
one on the host's userland) takes one reply, then forks into 4 children at that
step; each child continues with a reply of its own (the scripted model server
hands each of the 4 identical requests a different one: two write the right
greeting, two a wrong one), submits, and is graded by Harbor's verifier in its
own copy of the sandbox. The run directory records the tree; the export gives
each leaf its shared prefix's id and GRPO advantages per branch point:

    python examples/branching/branch_run.py [RUN_DIR]

(it needs agentkit-terminal, agentkit-harbor and bubblewrap).

With a real model, drop the scripted server and pass ``model=`` and
``base_url=`` of your endpoint. The last line printed is a JSON summary.
"""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from agentkit import AgentEnv, BranchPlan, training
from agentkit.registry import resolve_harness, resolve_taskset
from agentkit.testing.model_server import ScriptedModelServer

HERE = Path(__file__).resolve().parent
TASKSET = f"harbor:{HERE.parent / 'harbor'}"
CHILDREN = 4


def call(name: str, arguments: dict[str, Any]) -> str:
    """A reply in the terminal harness's text format: one tool call."""
    return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"


def script() -> dict[str, Any]:
    """Reply 0 (before the fork): look around. Reply 1: one of 4 greetings, each
    given once (``times``), so every child writes its own. Then submit."""
    rules: list[dict[str, Any]] = [
        {"match": {"turn": 0}, "reply": {"content": call("shell", {"command": "ls -la /app"})}}
    ]
    for j in range(CHILDREN):
        greeting = "Hello, world!" if j % 2 == 0 else f"Hello number {j}"
        command = f"printf '{greeting}\\n' > /app/hello.txt"
        rules.append(
            {
                "match": {"turn": 1},
                "times": 1,
                "reply": {"content": call("shell", {"command": command})},
            }
        )
    return {"rules": rules, "default": {"content": call("submit", {})}}


async def main(run_dir: Path) -> dict[str, Any]:
    env = AgentEnv(
        resolve_taskset(TASKSET),
        resolve_harness("terminal", sandbox_options={"image": "host"}),
    )
    with ScriptedModelServer(script()) as server:
        results = await env.branch(
            BranchPlan(at=1, children=CHILDREN, token_ids=True),
            task_ids=["harbor:hello-world"],
            model="scripted-model",
            base_url=server.base_url,
            out=run_dir,
        )
    records = training.prepare(training.from_run_dir(run_dir), group_by="branch_point")
    return {
        "run_dir": str(run_dir),
        "tree": {
            r.rollout_id: {"status": r.status, "parent": r.parent_rollout_id, "reward": r.reward}
            for r in results.rollouts
        },
        "groups": [{"branch_point": g.branch_point, "rewards": g.rewards} for g in results.groups],
        "export": [
            {
                "rollout_id": r.rollout_id,
                "prefix_id": r.prefix_id,
                "prefix_tokens": r.prefix_tokens,
                "advantage": r.advantage,
            }
            for r in records
        ],
    }


if __name__ == "__main__":
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp()) / "branch-run"
    print(json.dumps(asyncio.run(main(out))))
