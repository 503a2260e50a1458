"""Cost of a docker-sandbox rollout against a bare ``docker run``, and of the image cache.

Run: python bench/docker.py [-n 10] [--image debian:bookworm-slim]

- ``docker run``: ``docker run --rm --network none IMAGE true`` (the baseline)
- ``sandbox``: a docker sandbox's fixed cost per rollout: create, the first
  ``exec(["true"])``, close and remove (the model relay included when
  ``--endpoint`` is given)
- ``exec``: ``exec(["true"])`` in a running sandbox
- ``image build`` vs ``cache hit``: resolving a small Dockerfile the first
  time (a build) and again in a later run (the tag exists: no build)

The two lifecycles alternate, so both see the same machine load. Target: the
sandbox within 1.5x of ``docker run``; builds once per image, never per rollout.
Figures only, no assertions.
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
import uuid
from pathlib import Path

from agentkit._sandbox import ExecutionHints, TaskImage
from agentkit.images import clear_cache, resolve_image
from agentkit.sandbox.docker import DockerSandbox


def bare_run(image: str) -> float:
    start = time.perf_counter()
    subprocess.run(
        ["docker", "run", "--rm", "--network", "none", image, "true"],
        check=True,
        capture_output=True,
    )
    return time.perf_counter() - start


async def sandbox_run(base: Path, image: str, i: int, endpoint: str | None) -> float:
    start = time.perf_counter()
    sb = DockerSandbox(
        root=base / f"r{i}",
        hints=ExecutionHints(image=TaskImage(image=image)),
        rollout_id=f"bench-{i}",
        model_endpoint=endpoint,
    )
    await sb.setup()
    r = await sb.exec(["true"])
    assert r.ok, r
    await sb.close(remove=True)
    return time.perf_counter() - start


async def warm_exec(base: Path, image: str, n: int) -> float:
    hints = ExecutionHints(image=TaskImage(image=image))
    async with DockerSandbox(root=base / "warm", hints=hints) as sb:
        await sb.exec(["true"])
        start = time.perf_counter()
        for _ in range(n):
            assert (await sb.exec(["true"])).ok
        return (time.perf_counter() - start) / n


async def cache(base: Path, image: str) -> tuple[float, float, str]:
    env = base / "context"
    env.mkdir()
    (env / "Dockerfile").write_text(f"FROM {image}\nRUN echo {uuid.uuid4().hex} > /marker\n")
    task = TaskImage(dockerfile=str(env / "Dockerfile"), context=str(env))
    start = time.perf_counter()
    ref = await resolve_image(task, log_dir=base / "logs")
    built = time.perf_counter() - start
    clear_cache()  # as a later run would
    start = time.perf_counter()
    again = await resolve_image(task, log_dir=base / "logs")
    hit = time.perf_counter() - start
    assert (ref.source, again.source) == ("built", "cached"), (ref, again)
    return built, hit, ref.reference


async def lifecycles(
    base: Path, image: str, n: int, endpoint: str | None
) -> tuple[list[float], list[float]]:
    bare: list[float] = []
    ours: list[float] = []
    await sandbox_run(base, image, -1, endpoint)  # warm-up
    for i in range(n):
        bare.append(await asyncio.to_thread(bare_run, image))
        ours.append(await sandbox_run(base, image, i, endpoint))
    return bare, ours


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("-n", type=int, default=10, help="lifecycles of each kind")
    parser.add_argument("--image", default="debian:bookworm-slim")
    parser.add_argument("--endpoint", default=None, help="a model endpoint URL to relay")
    args = parser.parse_args()
    if shutil.which("docker") is None:
        sys.exit("docker is not installed")
    base = Path(tempfile.mkdtemp(prefix="agentkit-bench-docker-"))
    reference = None
    try:
        bare, ours = asyncio.run(lifecycles(base, args.image, args.n, args.endpoint))
        warm = asyncio.run(warm_exec(base, args.image, args.n * 5))
        built, hit, reference = asyncio.run(cache(base, args.image))
    finally:
        shutil.rmtree(base, ignore_errors=True)
        if reference:
            subprocess.run(["docker", "rmi", "-f", reference], capture_output=True, check=False)
    b, o = statistics.median(bare), statistics.median(ours)
    print(
        f"docker sandbox vs docker run ({args.n} each, alternating; image {args.image}; "
        f"{os.cpu_count()} cpus, load {os.getloadavg()[0]:.1f})"
    )
    print(f"  docker run --rm IMAGE true        {b * 1000:8.1f} ms (median)")
    print(f"  sandbox create+exec+close         {o * 1000:8.1f} ms (median)  ratio {o / b:.2f}x")
    print(f"  exec(['true']) in a running one   {warm * 1000:8.1f} ms")
    print(f"  image build (small Dockerfile)    {built * 1000:8.1f} ms")
    print(f"  image cache hit (a later run)     {hit * 1000:8.1f} ms  ratio {hit / built:.3f}x")


if __name__ == "__main__":
    main()
