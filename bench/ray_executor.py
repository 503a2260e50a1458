"""The Ray executor against the local one, and how it grows with nodes.

Three figures, each against a baseline measured in the same run:

1. per-rollout overhead: rollouts of a harness that returns at once, one at
   a time (concurrency 1), with the local executor and with the Ray
   executor on a one-node cluster; the difference per rollout is what Ray
   adds (scheduling, the streamed events, the result's trip back);
2. throughput of the same rollouts at concurrency 8, Ray against local;
3. scaling: rollouts that sleep (model-bound: a model reply takes a while),
   on a cluster of 1, 2, 3 and 4 worker nodes of 2 logical CPUs each
   (Ray's own ``ray.cluster_utils.Cluster``: each node its own raylet and
   worker processes on this machine), throughput against 1 node times the
   node count (ideal: 1.0).

Throughput is measured over the rollouts (the first one's start to the last
one's end); what a run adds once (joining the cluster, the preflight as a
Ray task on a node) is printed on its own.

    python bench/ray_executor.py [--rollouts 200] [--sleep 0.5] [--waves 4]

Targets: under 10 ms of overhead per rollout; at 4 nodes, at least 0.8 of
ideal growth.
"""

from __future__ import annotations

import argparse
import logging
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio

from agentkit import HarnessResult, ListTaskset, Rubric, Task
from agentkit.env import AgentEnv

CPUS_PER_NODE = 2


class InstantHarness:
    """Returns a completed result immediately."""

    async def run(self, task: Task, context: Any = None, on_event: Any = None) -> HarnessResult:
        return HarnessResult(status="completed", output=str(task.target))


class SleepingHarness:
    """Waits ``seconds`` (a model thinking), then answers."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    async def run(self, task: Task, context: Any = None, on_event: Any = None) -> HarnessResult:
        await anyio.sleep(self.seconds)
        return HarnessResult(status="completed", output=str(task.target))


def exact(output: str | None, target: Any) -> float:
    return 1.0 if output == target else 0.0


def make_taskset(n: int) -> ListTaskset:
    return ListTaskset(
        "bench",
        [Task(task_id=f"bench:{i}", input=f"q{i}", target=str(i)) for i in range(n)],
        default_grading_spec=Rubric([exact]),
    )


def timed(env: AgentEnv, out: Path, **options: Any) -> tuple[float, float]:
    """``(whole run, rollouts)`` seconds: the run from the call to its return, and the
    span from the first rollout's start to the last one's end (without the run's
    fixed start and end: joining the cluster, the preflight, the summary)."""
    started = time.perf_counter()
    results = env.run(out=out, progress=False, **options)
    elapsed = time.perf_counter() - started
    assert results.summary["complete"] and results.mean_reward == 1.0, results.summary
    first = min(r.timings["started_at"] for r in results.rollouts)
    last = max(r.timings["finished_at"] for r in results.rollouts)
    return elapsed, last - first


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rollouts", type=int, default=200)
    parser.add_argument("--sleep", type=float, default=0.5, help="seconds a rollout sleeps")
    parser.add_argument("--waves", type=int, default=4, help="rollouts per slot in the scaling")
    args = parser.parse_args()

    import ray
    from ray.cluster_utils import Cluster

    from agentkit.executors import RayExecutor

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0})
    nodes = [cluster.add_node(num_cpus=CPUS_PER_NODE)]
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, logging_level=logging.WARNING, log_to_driver=False)
    try:
        with tempfile.TemporaryDirectory(prefix="agentkit-bench-ray-") as tmp:
            root = Path(tmp)
            runs = iter(range(1_000_000))

            def out() -> Path:
                return root / f"run{next(runs)}"

            def executor() -> Any:
                return RayExecutor(node_dir=root / "nodes")

            n = args.rollouts
            env = AgentEnv(make_taskset(n), InstantHarness(), contributors=())
            timed(env, out(), concurrency=CPUS_PER_NODE, executor=executor())  # warm workers
            local_run, local_1 = timed(env, out(), concurrency=1)
            ray_run, ray_1 = timed(env, out(), concurrency=1, executor=executor())
            print(f"per-rollout overhead (concurrency 1, {n} rollouts):")
            print(f"  local {local_1 / n * 1000:.2f} ms, ray {ray_1 / n * 1000:.2f} ms per rollout")
            added_ms = (ray_1 - local_1) / n * 1000
            print(f"  added by ray: {added_ms:.2f} ms per rollout (target < 10 ms)")
            fixed = (ray_run - ray_1) - (local_run - local_1)
            print(f"  added by ray once per run (cluster, preflight on a node): {fixed:.2f} s")
            _, local_8 = timed(env, out(), concurrency=8)
            _, ray_8 = timed(env, out(), concurrency=8, executor=executor())
            print(f"throughput (concurrency 8, {n} rollouts, 1 node of {CPUS_PER_NODE} CPUs):")
            print(f"  local {n / local_8:.0f}/s, ray {n / ray_8:.0f}/s")
            print(f"  ray / local: {local_8 / ray_8:.3f}")

            print(
                f"scaling (rollouts sleeping {args.sleep:g} s, {CPUS_PER_NODE} CPUs per node, "
                f"{args.waves} waves):"
            )
            base = None
            for count in range(1, 5):
                while len(nodes) < count:
                    nodes.append(cluster.add_node(num_cpus=CPUS_PER_NODE))
                cluster.wait_for_nodes()
                slots = CPUS_PER_NODE * count
                total = slots * args.waves
                env = AgentEnv(make_taskset(total), SleepingHarness(args.sleep), contributors=())
                # warm: every node's worker processes started before the timed run
                timed(env, out(), concurrency=slots, executor=executor())
                _, elapsed = timed(env, out(), concurrency=slots, executor=executor())
                rate = total / elapsed
                base = rate if base is None else base
                ideal = rate / (base * count)
                print(f"  {count} node(s): {rate:.2f} rollouts/s, {ideal:.3f} of ideal")
    finally:
        ray.shutdown()
        cluster.shutdown()


if __name__ == "__main__":
    main()
