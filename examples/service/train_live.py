"""Train live: a trainer loop against agentkit's rollout service, on the arithmetic tasks.

The chat harness answers the JSONL arithmetic tasks through the scripted model
server, which plays a policy that improves: ``policy-0`` answers "I do not
know" to everything, every later policy answers right. The "trainer" takes 2
groups (a task x 4 rollouts) per step in SkyRL's format, would train on them,
then announces the next policy (``set_policy``: same endpoint, a new model
name); the service keeps 8 rollouts in flight meanwhile, and never hands over a
group whose oldest call is more than one version behind (``max_staleness=1``).
Each step prints one JSON line; the last line is the service's report:

    python examples/service/train_live.py [RUN_DIR]

With a real model, drop the scripted server, pass your endpoint's ``model=`` and
``base_url=``, train on ``group.data`` and serve the new weights before
``set_policy``.
"""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from agentkit.env import AgentEnv, RunOptions
from agentkit.service import RolloutService
from agentkit.testing.model_server import ScriptedModelServer

EXAMPLES = Path(__file__).resolve().parents[1]
TASKS = EXAMPLES / "jsonl" / "arithmetic.jsonl"
STEPS = 4
GROUPS_PER_STEP = 2


def script() -> dict[str, Any]:
    """The arithmetic script, with policy-0 answering nothing right."""
    data: dict[str, Any] = json.loads((EXAMPLES / "scripts" / "arithmetic.json").read_text())
    data["models"] = [f"policy-{v}" for v in range(STEPS + 1)]
    no_idea = {"match": {"model": "policy-0"}, "reply": {"content": "I do not know"}}
    data["rules"] = [no_idea, *data["rules"]]
    return data


async def train(base_url: str, run_dir: Path) -> None:
    env = AgentEnv.from_names(f"jsonl:{TASKS}", "chat")
    options = RunOptions(
        model="policy-0", base_url=base_url, concurrency=8, token_ids=True, out=run_dir
    )
    async with RolloutService(
        env, options, group_size=4, max_staleness=1, format="skyrl"
    ) as service:
        service.request(2 * GROUPS_PER_STEP)  # this step's groups and the next one's
        for step in range(STEPS):
            batch = [await service.next_group() for _ in range(GROUPS_PER_STEP)]
            service.request(GROUPS_PER_STEP)  # runs while this step trains
            rewards = [r for group in batch for r in group.rewards if r is not None]
            print(
                json.dumps(
                    {
                        "step": step,
                        "policy": service.policy.version,
                        "tasks": [group.task_id for group in batch],
                        "staleness": [group.staleness for group in batch],
                        "sequences": sum(len(g.data["response_ids"]) for g in batch),
                        "mean_reward": sum(rewards) / len(rewards),
                    }
                )
            )
            # a trainer steps on each group.data (SkyRL's GeneratorOutput) here, then
            # serves the new weights and says so:
            await service.set_policy(step + 1, model=f"policy-{step + 1}")
        print(json.dumps({"report": service.report().to_json()}))


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp, ScriptedModelServer(script()) as server:
        run_dir = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tmp) / "run"
        asyncio.run(train(server.base_url, run_dir))


if __name__ == "__main__":
    main()
