"""Cost of forking an episode into N children, beside N fresh episodes, in the same run.

Run: python bench/branch.py [-n 5] [--children 8] [--megabytes 10] [--files 1000]

Two step-capable harnesses, each round measuring (interleaved, so a busy
machine slows them alike):

- ``terminal`` on the Harbor ``hello-world`` task (the local sandbox on the
  host's userland): a parent episode started, with ``--megabytes`` MB in
  ``--files`` files written into its sandbox beforehand; then
  ``agentkit.fork_episode(parent, N)`` until the N children are started
  (the local sandbox pauses and copies the parent once for all N:
  ``fork_many``), beside ``init()`` of N fresh episodes of the same task (N
  sandboxes started, concurrently);
- ``fleet-tool-call`` on the bundled local bookings app: ``fork_episode``
  (N copies of the app's databases, N app servers) beside N fresh episodes'
  ``init()`` (N app servers on new databases).

Medians are printed, with the fork's ratio to the fresh episodes. Needs
agentkit-terminal, agentkit-harbor, agentkit-fleet and bubblewrap. Figures,
not assertions.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import agentkit
from agentkit import RunContext
from agentkit.registry import resolve_harness, resolve_taskset

ROOT = Path(__file__).resolve().parents[1]
HARBOR = f"harbor:{ROOT / 'examples' / 'harbor'}"
FLEET = f"fleet:{ROOT / 'examples' / 'fleet' / 'tasks.json'}"


def _make_data(data: Path, megabytes: int, files: int) -> Path:
    data.mkdir()
    size = megabytes * 1_000_000 // max(files, 1)
    for i in range(files):
        sub = data / f"d{i // 100:03d}"
        sub.mkdir(exist_ok=True)
        (sub / f"f{i:05d}").write_bytes(os.urandom(size))
    return data


async def _close_all(episodes: list[Any]) -> None:
    for episode in episodes:
        await episode.close()


async def _terminal(args: argparse.Namespace, base: Path) -> dict[str, list[float]]:
    taskset = resolve_taskset(HARBOR)
    harness = resolve_harness("terminal", sandbox_options={"image": "host"})
    task = taskset.get_task("harbor:hello-world")

    def episode(name: str) -> Any:
        return agentkit.open_episode(harness, task, RunContext(rollout_id=name), taskset=taskset)

    parent = episode("parent")
    await parent.init()
    data = await asyncio.to_thread(_make_data, base / "data", args.megabytes, args.files)
    await parent.sandbox.upload(data, "/app/data")
    series: dict[str, list[float]] = {}
    try:
        for i in range(args.rounds):
            await asyncio.to_thread(os.sync)
            fresh = [episode(f"fresh-{i}-{j}") for j in range(args.children)]
            start = time.perf_counter()
            await asyncio.gather(*(e.init() for e in fresh))
            series.setdefault("fresh", []).append(time.perf_counter() - start)
            await _close_all(fresh)
            await asyncio.to_thread(os.sync)
            start = time.perf_counter()
            children = await agentkit.fork_episode(parent, args.children)
            series.setdefault("fork", []).append(time.perf_counter() - start)
            await _close_all(children)
    finally:
        await parent.close()
    return series


async def _fleet(args: argparse.Namespace) -> dict[str, list[float]]:
    taskset = resolve_taskset(FLEET)
    harness = resolve_harness("fleet-tool-call", provider="local")
    task = next(iter(taskset))

    def episode(name: str) -> Any:
        return agentkit.open_episode(harness, task, RunContext(rollout_id=name))

    parent = episode("parent")
    await parent.init()
    series: dict[str, list[float]] = {}
    try:
        for i in range(args.rounds):
            fresh = [episode(f"fresh-{i}-{j}") for j in range(args.children)]
            start = time.perf_counter()
            await asyncio.gather(*(e.init() for e in fresh))
            series.setdefault("fresh", []).append(time.perf_counter() - start)
            await _close_all(fresh)
            start = time.perf_counter()
            children = await agentkit.fork_episode(parent, args.children)
            series.setdefault("fork", []).append(time.perf_counter() - start)
            await _close_all(children)
    finally:
        await parent.close()
    return series


def _report(title: str, series: dict[str, list[float]], children: int) -> None:
    fresh = statistics.median(series["fresh"])
    fork = statistics.median(series["fork"])
    print(
        f"{title:<44} {children} fresh episodes {fresh * 1000:7.0f} ms   "
        f"fork into {children} {fork * 1000:7.0f} ms ({fork / fresh:.2f}x)"
    )


async def main(args: argparse.Namespace) -> None:
    base = Path(tempfile.mkdtemp(prefix="bench-branch-"))
    try:
        print(f"{args.rounds} rounds, load {os.getloadavg()[0]:.1f}; medians")
        writes = f"{args.megabytes} MB in {args.files} files"
        _report(f"terminal, host userland, {writes}", await _terminal(args, base), args.children)
        _report("fleet-tool-call, local bookings app", await _fleet(args), args.children)
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", "--rounds", type=int, default=5)
    parser.add_argument("--children", type=int, default=8)
    parser.add_argument("--megabytes", type=int, default=10)
    parser.add_argument("--files", type=int, default=1000)
    return parser.parse_args(argv)


if __name__ == "__main__":
    asyncio.run(main(_args(sys.argv[1:])))
