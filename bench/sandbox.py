"""Cost of a local (bubblewrap) sandbox per rollout, beside same-run baselines.

Run: python bench/sandbox.py [-n 30] [--image debian:bookworm-slim] [--dir /dev/shm]

Per rollout (create the sandbox, run ``true`` in it, close it; removing its
root is reported apart, as disk work):

- ``local, host userland`` against a bare ``bwrap --ro-bind / / true``
  (target: within 1.5x), beside ``bwrap`` running ``true`` with only the
  namespaces, a root, ``/usr``, ``/proc`` and ``/dev`` (what any isolating
  sandbox needs at the least) and with the sandbox's whole mount table;
- ``local, image root`` (the image exported once beforehand, as a run's
  prepare step does) against ``docker run --rm IMAGE true``
  (target: under a tenth);
- ``exec(["true"])`` in a running sandbox against ``subprocess.run(["true"])``.

The measurements are interleaved (one of each per round), so a busy machine
slows them alike; medians are printed. Figures, not assertions.
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
from collections.abc import Awaitable, Callable
from pathlib import Path

from agentkit._sandbox import ExecutionHints, TaskImage
from agentkit.sandbox import SandboxError
from agentkit.sandbox.local import LocalSandbox
from agentkit.sandbox.local._bwrap import find_tools, holder_argv, host_usr_args


def _timed_run(argv: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


async def _rollout(base: Path, name: str, hints: ExecutionHints, **options: object) -> float:
    """create + exec(true) + close, seconds (the root is removed after, untimed)."""
    start = time.perf_counter()
    sb = LocalSandbox(root=base / name, hints=hints, rollout_id=name, **options)  # type: ignore[arg-type]
    await sb.setup()
    r = await sb.exec(["true"])
    assert r.ok, r
    await sb.close(remove=False)
    elapsed = time.perf_counter() - start
    await sb.close(remove=True)
    return elapsed


async def main(args: argparse.Namespace) -> None:
    base = Path(tempfile.mkdtemp(prefix="agentkit-bench-", dir=args.dir))
    cache = base / "image-roots"
    host = ExecutionHints()
    image_hints = ExecutionHints(image=TaskImage(image=args.image))
    series: dict[str, list[float]] = {}
    cases: dict[str, Callable[[int], Awaitable[float]]] = {}

    async def bare(_: int) -> float:
        return await asyncio.to_thread(_timed_run, ["bwrap", "--ro-bind", "/", "/", "true"])

    async def local_host(i: int) -> float:
        return await _rollout(base, f"h{i}", host)

    async def bwrap_floor(i: int) -> float:
        root = base / f"f{i}"
        (root / "fs").mkdir(parents=True)
        tools = find_tools()
        argv = holder_argv(
            tools, fs_root=root / "fs", network=False, ro_binds=[], info_fd=2, holder=["true"]
        )
        return await asyncio.to_thread(_timed_run, argv)

    async def isolation_floor(i: int) -> float:
        # What any isolating sandbox needs at the least: its own namespaces, a
        # root of its own, the host's /usr, /proc and /dev (no /etc, no hardening).
        root = base / f"m{i}"
        root.mkdir()
        argv = ["bwrap", "--unshare-all", "--unshare-user", "--uid", "0", "--gid", "0"]
        argv += ["--bind", str(root), "/", *host_usr_args(), "--proc", "/proc", "--dev", "/dev"]
        return await asyncio.to_thread(_timed_run, [*argv, "true"])

    cases["bare bwrap --ro-bind / / true"] = bare
    cases["bwrap, namespaces+/proc+/dev"] = isolation_floor
    cases["bwrap, the sandbox's mounts, true"] = bwrap_floor
    cases["local, host userland"] = local_host
    why_no_image = None
    try:
        # What a run's prepare step does: make the image and export its root, once.
        started = time.perf_counter()
        await LocalSandbox.prepare([image_hints], image_cache=str(cache))
        await _rollout(base, "warm", image_hints, image_cache=str(cache))
        print(f"image {args.image}: made and exported in {time.perf_counter() - started:.1f} s")
    except SandboxError as exc:
        why_no_image = str(exc)
    if why_no_image is None:

        async def local_image(i: int) -> float:
            return await _rollout(base, f"i{i}", image_hints, image_cache=str(cache))

        cases["local, image root"] = local_image
        if _docker_answers():

            async def docker_run(_: int) -> float:
                argv = ["docker", "run", "--rm", args.image, "true"]
                return await asyncio.to_thread(_timed_run, argv)

            cases["docker run --rm IMAGE true"] = docker_run
    try:
        for i in range(args.n):
            for label, case in cases.items():
                if label.startswith("docker") and i >= args.docker_n:
                    continue
                series.setdefault(label, []).append(await case(i))
        warm = await _exec_series(base, args.n)
    finally:
        shutil.rmtree(base, ignore_errors=True)

    med = {k: statistics.median(v) for k, v in series.items()}
    print(
        f"{args.n} rounds, {os.cpu_count()} cpus, load {os.getloadavg()[0]:.1f}, "
        f"roots under {base.parent}"
    )
    for label, value in med.items():
        print(f"  {label:32s} {value * 1000:8.2f} ms")
    plain, in_sandbox = warm
    print(f"  {'subprocess.run([true])':32s} {plain * 1000:8.2f} ms")
    times = f"{in_sandbox * 1000:8.2f} ms  ({in_sandbox / plain:.1f}x)"
    print(f"  {'sandbox.exec([true])':32s} {times}")
    bare = med["bare bwrap --ro-bind / / true"]
    ratio = med["local, host userland"] / bare
    print(f"local (host userland) / bare bwrap: {ratio:.2f}x (target: within 1.5x)")
    floor = med["bwrap, namespaces+/proc+/dev"] / bare
    print(f"  bwrap with only namespaces, /proc and /dev / bare bwrap: {floor:.2f}x")
    if why_no_image is not None:
        print(f"image root: not measured ({why_no_image})")
    elif "docker run --rm IMAGE true" in med:
        ratio = med["local, image root"] / med["docker run --rm IMAGE true"]
        print(f"local (image root) / docker run: {ratio:.3f} (target: under 0.1)")


def _docker_answers() -> bool:
    """True when a docker CLI is installed and its engine answers."""
    if shutil.which("docker") is None:
        return False
    probe = subprocess.run(["docker", "info"], capture_output=True, check=False)
    if probe.returncode != 0:
        print("docker run: not measured (the docker engine does not answer)")
    return probe.returncode == 0


async def _exec_series(base: Path, n: int) -> tuple[float, float]:
    plain = [_timed_run(["true"]) for _ in range(n)]
    async with LocalSandbox(root=base / "warm-exec", hints=ExecutionHints()) as sb:
        await sb.exec(["true"])
        times = []
        for _ in range(n):
            start = time.perf_counter()
            await sb.exec(["true"])
            times.append(time.perf_counter() - start)
    return statistics.median(plain), statistics.median(times)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("-n", type=int, default=30, help="rounds")
    parser.add_argument("--docker-n", type=int, default=10, help="rounds with a docker run")
    parser.add_argument("--image", default="debian:bookworm-slim", help="image to run")
    parser.add_argument("--dir", default=None, help="where sandbox roots go (default: $TMPDIR)")
    if shutil.which("bwrap") is None:
        sys.exit("bubblewrap is not installed: apt-get install bubblewrap")
    asyncio.run(main(parser.parse_args()))
