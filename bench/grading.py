"""What grading costs at each verifier isolation level, in the same run.

Run: python bench/grading.py [-n 5] [--image debian:bookworm-slim] [--no-image] [--docker]
[--dir DIR]

A Harbor task whose ``tests/test.sh`` writes ``1`` to ``reward.txt`` is
graded with :func:`agentkit_harbor.verify` in an agent's sandbox that holds
10 MB in 1,000 files in ``/app/data`` (uploaded once, before the rounds), on
the local sandbox on the host's userland and on an image root (and, with
``--docker``, on the docker sandbox, on the same image). Each round
grades once at each level, interleaved (a busy machine slows them alike),
after a ``sync``:

- ``shared``: every process of the agent's sandbox ended, the verifier's
  folders made new, test.sh, the rewards read (the floor of any level);
- ``fork``: the rollout's last grading (what the rubric does): the agent's
  sandbox started again on its own files (new namespaces, nothing copied);
- ``fork, a step``: a step's grading, the agent going on after it: a fork
  of the agent's sandbox (its files copied, a new sandbox started);
- ``separate``: the same in a fresh sandbox of the task, given ``/app``
  (the 10 MB carried);

(a fork's or fresh sandbox's files are kept in the agent's sandbox's
directory and removed with it, as in a run: not timed);

beside a fresh start of the same sandbox (``setup()``), ``cp -a`` of the
data (what making that many files costs here at all), and the separate
verifier's sandbox made both ways (closed, not graded): ``fresh, carrying``
(:func:`~agentkit.sandbox.fresh_sandbox_carrying`, what grading does: on an
image root the data goes from layer to layer before the sandbox starts) and
``fresh + carry`` (:func:`~agentkit.sandbox.fresh_sandbox` then
:func:`~agentkit.sandbox.carry_paths`: the data created through the running
overlay, as grading did before). Medians are printed,
and the difference of each level from ``shared``. Targets (issue #33): a
fork adds at most 50 ms over shared; separate at most a fresh start plus the
copy. Figures, not assertions.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from agentkit_harbor import load_task_dir, verify

from agentkit._sandbox import ExecutionHints, TaskImage
from agentkit.sandbox import SandboxError, carry_paths, fresh_sandbox, fresh_sandbox_carrying
from agentkit.sandbox.docker import DockerSandbox
from agentkit.sandbox.local import LocalSandbox

#: (label, level, the rollout's last grading)
LEVELS = (
    ("shared", "shared", True),
    ("fork", "fork", True),
    ("fork, a step", "fork", False),
    ("separate", "separate", True),
)
TARGET_FORK_OVER_SHARED = 0.050


def _task(base: Path) -> Path:
    task = base / "task"
    (task / "tests").mkdir(parents=True)
    (task / "task.toml").write_text('[environment]\nworkdir = "/app"\n')
    (task / "instruction.md").write_text("Nothing to do.\n")
    (task / "tests" / "test.sh").write_text("echo 1 > /logs/verifier/reward.txt\n")
    return task


def _data(base: Path) -> Path:
    data = base / "data"
    for i in range(1000):
        sub = data / f"d{i // 100:03d}"
        sub.mkdir(parents=True, exist_ok=True)
        (sub / f"f{i:05d}").write_bytes(os.urandom(10_000))
    return data


async def _measure(label: str, hints: ExecutionHints, options: dict[str, Any], base: Path,
                   rounds: int) -> dict[str, list[float]]:  # fmt: skip
    spec = load_task_dir(_task(base / label))
    series: dict[str, list[float]] = {}
    kind = DockerSandbox if label == "docker" else LocalSandbox
    agent = kind(root=base / f"{label}-agent", hints=hints, rollout_id="agent", **options)
    await agent.setup()
    try:
        await agent.upload(_data(base / label), "/app/data")
        for i in range(rounds):
            await asyncio.to_thread(os.sync)
            start = time.perf_counter()
            fresh = kind(root=base / f"{label}-fresh-{i}", hints=hints, **options)
            await fresh.setup()
            series.setdefault("fresh start", []).append(time.perf_counter() - start)
            await fresh.close(remove=True)
            for label_, level, final in LEVELS:
                start = time.perf_counter()
                outcome = await verify(agent, spec, isolation=level, final=final)
                series.setdefault(label_, []).append(time.perf_counter() - start)
                assert outcome.rewards == {"reward": 1.0}, outcome
            for name, both in (("fresh, carrying", True), ("fresh + carry", False)):
                root = base / f"{label}-sep-{i}-{len(name)}"
                start = time.perf_counter()
                if both:
                    child, _ = await fresh_sandbox_carrying(agent, ["/app"], root=root)
                else:
                    child = await fresh_sandbox(agent, root=root)
                    await carry_paths(agent, child, ["/app"])
                series.setdefault(name, []).append(time.perf_counter() - start)
                await child.close(remove=True)
            copy = base / label / f"cp-{i}"
            start = time.perf_counter()
            argv = ["cp", "-a", "--reflink=auto", str(base / label / "data"), str(copy)]
            await asyncio.to_thread(subprocess.run, argv, check=True)
            series.setdefault("cp -a", []).append(time.perf_counter() - start)
    finally:
        await agent.close(remove=True)
    return series


def _report(title: str, series: dict[str, list[float]]) -> None:
    med = {k: statistics.median(v) for k, v in series.items()}
    print(f"{title}: median of {len(series['shared'])} rounds")
    graded = [label for label, _, _ in LEVELS]
    for name in ("fresh start", "cp -a", "fresh, carrying", "fresh + carry", *graded):
        extra = ""
        if name in graded and name != "shared":
            extra = f"   {(med[name] - med['shared']) * 1000:+7.1f} ms over shared"
        print(f"  {name:14s} {med[name] * 1000:8.1f} ms{extra}")
    for name in ("fork", "fork, a step"):
        over = med[name] - med["shared"]
        verdict = "met" if over <= TARGET_FORK_OVER_SHARED else "missed"
        print(f"  {name} over shared: {over * 1000:.0f} ms (target at most 50 ms: {verdict})")
    budget = med["fresh start"] + med["cp -a"]
    sep = med["separate"] - med["shared"]
    verdict = "met" if sep <= budget else "missed"
    print(
        f"  separate over shared: {sep * 1000:.0f} ms (target at most a fresh start plus the "
        f"copy, {budget * 1000:.0f} ms: {verdict})"
    )


async def main(args: argparse.Namespace) -> None:
    base = Path(args.dir or tempfile.mkdtemp(prefix="agentkit-bench-grading-"))
    try:
        host = await _measure("host", ExecutionHints(), {"image": "host"}, base, args.n)
        _report("local, host userland", host)
        if not args.no_image:
            hints = ExecutionHints(image=TaskImage(image=args.image))
            try:
                image = await _measure("image", hints, {}, base, args.n)
            except SandboxError as exc:
                print(f"local, image root: not measured ({exc})")
            else:
                _report(f"local, image root ({args.image})", image)
        if args.docker:
            hints = ExecutionHints(image=TaskImage(image=args.image))
            _report(f"docker ({args.image})", await _measure("docker", hints, {}, base, args.n))
    finally:
        if not args.dir:
            shutil.rmtree(base, ignore_errors=True)
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")


def _args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=5, help="rounds (default 5)")
    parser.add_argument("--image", default="debian:bookworm-slim")
    parser.add_argument("--no-image", action="store_true", help="the host userland only")
    parser.add_argument("--docker", action="store_true", help="the docker sandbox too")
    parser.add_argument("--dir", help="where the sandboxes live (default: a temporary dir)")
    return parser.parse_args(argv)


if __name__ == "__main__":
    asyncio.run(main(_args(sys.argv[1:])))
