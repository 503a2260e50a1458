"""The rollout service against a simulated trainer: asynchronous (max_staleness=2) vs
synchronous (max_staleness=0) on the same work.

A trainer whose step takes a fixed ``T`` seconds consumes ``--batch`` groups
per step (a task x ``--group-size`` rollouts) from :class:`agentkit.service.RolloutService`
over the chat harness and a JSONL taskset; the scripted model server (its own
process) answers after ``--latency`` seconds, and 1% of the tasks (one task in
every hundred, at the same places in both runs) after ten times that: a long
tail. The service keeps ``--concurrency`` rollouts in flight (the same in
both runs); every call passes the model proxy with token ids, every group is
written to a run directory and handed over as SkyRL's ``GeneratorOutput``.

- synchronous (``max_staleness=0``): ask for a step's groups, wait for all of
  them, train, announce the new policy; nothing runs while it trains.
- asynchronous (``max_staleness=2``): two steps' groups are asked for ahead;
  each step takes the first ``--batch`` groups that finish, asks for as many
  more, trains while they run, announces the new policy. Groups past the bound
  are dropped (``on_stale="drop"``: the slow task's group, 10 s, is always past
  it; run again it would be past it again, holding 4 of the 16 slots each time).

Printed per mode: groups consumed per minute, groups delivered beyond the
bound (counted by the trainer from the delivered calls' own ``policy_version``,
not from the service's word: must be 0), groups found stale and dropped, the
CPU seconds of this process (the service, the harness, the proxy; the server
runs apart), and the service's own overhead per delivered group (its bookkeeping, staleness
checks, training records and format, outside the rollouts: target under 2 ms).
Then the ratio async / sync (target at least 1.8).

    python bench/service.py [--steps 25] [--batch 4] [--group-size 4] [--concurrency 16]
                            [--latency 1.0] [--train 1.0]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any, NamedTuple

import anyio

from agentkit.env import AgentEnv, RunOptions
from agentkit.service import RolloutService

try:
    from _server import ServerProcess
except ImportError:  # run as a module
    from bench._server import ServerProcess

TASKS = 100  # one of them slow: 1%
SLOW_TASK = 7


class Result(NamedTuple):
    groups: int
    wall: float
    beyond_bound: int
    dropped: int
    overhead_s: float
    cpu: float
    max_staleness_seen: int
    stopped_early: int  # of the dropped: groups the bound doomed before they finished


def _tasks(path: Path) -> Path:
    rows = [
        {
            "id": f"t{i:03d}",
            "input": ("slow " if i == SLOW_TASK else "") + f"task {i}",
            "target": "ok",
        }
        for i in range(TASKS)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


async def trainer(
    base_url: str, tasks: Path, out: Path, args: argparse.Namespace, k: int
) -> Result:
    env = AgentEnv.from_names(f"jsonl:{tasks}", "chat")
    options = RunOptions(
        model="scripted-model",
        base_url=base_url,
        concurrency=args.concurrency,
        token_ids=True,
        out=out,
        preflight=False,
    )
    beyond = 0
    worst = 0
    consumed = 0
    async with RolloutService(
        env, options, group_size=args.group_size, max_staleness=k, on_stale="drop"
    ) as service:
        began = time.perf_counter()
        cpu = time.process_time()
        service.request(args.batch * (1 if k == 0 else 2))
        for version in range(args.steps):  # the policy served during this step
            for _ in range(args.batch):
                group = await service.next_group()
                consumed += 1
                versions = [c.policy_version for r in group.rollouts for c in r.model_calls]
                oldest = min(v for v in versions if v is not None)
                worst = max(worst, version - oldest)
                if version - oldest > k or None in versions:
                    beyond += 1
            if k > 0:
                service.request(args.batch)  # keep the next steps' groups running
            await anyio.sleep(args.train)  # the trainer's step
            await service.set_policy(version + 1)
            if k == 0:
                service.request(args.batch)
        wall = time.perf_counter() - began
        cpu = time.process_time() - cpu
        report = service.report()
    return Result(
        consumed,
        wall,
        beyond,
        report.dropped_stale,
        report.overhead_s / report.delivered,
        cpu,
        worst,
        report.doomed_groups,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=25)
    parser.add_argument("--batch", type=int, default=4, help="groups per trainer step")
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--latency", type=float, default=1.0, help="seconds per rollout")
    parser.add_argument("--train", type=float, default=1.0, help="seconds per trainer step")
    args = parser.parse_args()
    script: dict[str, Any] = {
        "rules": [
            {
                "match": {"last_user_contains": "slow"},
                "reply": {"content": "ok", "latency": 10 * args.latency},
            }
        ],
        "default": {"content": "ok", "latency": args.latency},
    }
    results: dict[int, Result] = {}
    with ServerProcess(script) as server, tempfile.TemporaryDirectory() as tmp:
        tasks = _tasks(Path(tmp) / "bench.jsonl")
        for k in (0, 2):
            results[k] = anyio.run(
                trainer, server.base_url, tasks, Path(tmp) / f"run-k{k}", args, k
            )
    print(
        f"rollout service: {args.steps} trainer steps x {args.batch} groups x "
        f"{args.group_size} rollouts, concurrency {args.concurrency}, rollouts "
        f"{args.latency:g} s (1% {10 * args.latency:g} s), trainer step {args.train:g} s"
    )
    for k, r in results.items():
        mode = "synchronous  (max_staleness=0)" if k == 0 else "asynchronous (max_staleness=2)"
        print(
            f"  {mode}: {r.groups / r.wall * 60:6.1f} groups/min ({r.groups} in {r.wall:.1f} s); "
            f"beyond the bound: {r.beyond_bound}; most stale delivered: {r.max_staleness_seen}; "
            f"dropped stale: {r.dropped} ({r.stopped_early} stopped early); CPU {r.cpu:.1f} s; "
            f"overhead {r.overhead_s * 1000:.2f} ms/group"
        )
    ratio = (results[2].groups / results[2].wall) / (results[0].groups / results[0].wall)
    print(f"  async / sync: {ratio:.2f}x (target >= 1.8x)")


if __name__ == "__main__":
    main()
