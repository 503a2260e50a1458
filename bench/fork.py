"""Cost of forking a running sandbox, beside a fresh start of the same sandbox in the same run.

Run: python bench/fork.py [-n 5] [--image debian:bookworm-slim] [--dir DIR]
     [--docker-n 3] [--no-docker] [--sizes 0,1,10,100]

For each sandbox (the local sandbox on the host's userland and on an image
root, the docker sandbox) and each size of the parent's writes (nothing;
1 MB in 100 files; 10 MB in 1,000 files; 100 MB in 10,000 files, in
``/app/data``, uploaded before the measurements):

- ``fresh start``: a new sandbox of the same kind started (``setup()``: its
  root made, bubblewrap or the container started, ready for a command);
- ``fork``: ``fork()`` of the parent, until the child is started and ready
  (the same point), and how long the parent was paused meanwhile
  (``child.fork_stats.paused_sec``: the copy, or the engine's commit);
- ``cp -a``: ``cp -a --reflink=auto`` of the same files on the same file
  system, in the same round: what making that many files costs here at all
  (the floor of any copy; on a shared machine it varies with the other
  processes' disk work, and the fork with it).

Both are followed by one ``exec(["true"])`` (checked, untimed) and a close
(untimed); the sandboxes' roots are removed only at the end (deleting files
is disk work of its own, which on a file system mounted with ``discard``
stalls the next writes for seconds), and each round starts after a ``sync``
(what earlier rounds wrote is on disk). The measurements are interleaved round
by round, so a busy machine slows them alike; medians are printed, as a
ratio to the fresh start. Target: a fork within 100 ms for 10 MB of writes in 1,000 files (a
vendor's microVM fork takes about 640 ms a child). Figures, not assertions.
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
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agentkit._sandbox import ExecutionHints, TaskImage
from agentkit.sandbox import SandboxError
from agentkit.sandbox.docker import DockerSandbox
from agentkit.sandbox.local import LocalSandbox

#: (label, megabytes, files) of the parent's writes.
SIZES = {
    0: ("no writes", 0, 0),
    1: ("1 MB in 100 files", 1, 100),
    10: ("10 MB in 1,000 files", 10, 1000),
    100: ("100 MB in 10,000 files", 100, 10_000),
}
TARGET = (10, 0.100)  # 10 MB in 1,000 files: within 100 ms

Factory = Callable[[Path, str], Any]


def _make_data(data: Path, megabytes: int, files: int) -> Path:
    """``files`` files of ``megabytes`` MB in all in ``data``, 100 to a directory."""
    data.mkdir()
    if not files:
        return data
    size = megabytes * 1_000_000 // files
    for i in range(files):
        sub = data / f"d{i // 100:03d}"
        sub.mkdir(exist_ok=True)
        (sub / f"f{i:05d}").write_bytes(os.urandom(size))
    return data


async def _started(make: Factory, base: Path, name: str) -> Any:
    sb = make(base / name, name)
    await sb.setup()
    return sb


async def _done(sb: Any) -> None:
    r = await sb.exec(["true"])
    assert r.ok, r
    await sb.close(remove=False)  # removed with the rest at the end


async def _measure(
    label: str, make: Factory, base: Path, sizes: list[int], rounds: int
) -> dict[str, list[float]]:
    series: dict[str, list[float]] = {}
    parents: dict[int, Any] = {}
    label = label.replace(",", "")
    try:
        for mb in sizes:
            _, megabytes, files = SIZES[mb]
            parent = await _started(make, base, f"{label}-parent-{mb}")
            data = base / f"{label}-data-{mb}"
            await asyncio.to_thread(_make_data, data, megabytes, files)
            await parent.upload(data, "/app/data")
            parents[mb] = parent
        for i in range(rounds):
            # Each round starts with nothing left to write back (ours: the data
            # uploaded, the last round's copies), so rounds do not slow each other.
            await asyncio.to_thread(os.sync)
            start = time.perf_counter()
            fresh = await _started(make, base, f"{label}-fresh-{i}")
            series.setdefault("fresh", []).append(time.perf_counter() - start)
            await _done(fresh)
            for mb, parent in parents.items():
                start = time.perf_counter()
                child = await parent.fork()
                series.setdefault(f"fork-{mb}", []).append(time.perf_counter() - start)
                series.setdefault(f"paused-{mb}", []).append(child.fork_stats.paused_sec)
                await _done(child)
                data, copy = base / f"{label}-data-{mb}", base / f"{label}-cp-{mb}-{i}"
                start = time.perf_counter()
                await asyncio.to_thread(subprocess.run, ["cp", "-a", "--reflink=auto", data, copy])
                series.setdefault(f"cp-{mb}", []).append(time.perf_counter() - start)
    finally:
        for parent in parents.values():
            await parent.close(remove=True)
    return series


def _report(title: str, series: dict[str, list[float]], sizes: list[int]) -> None:
    med = {k: statistics.median(v) for k, v in series.items()}
    low = {k: min(v) for k, v in series.items()}
    fresh = med["fresh"]
    print(f"{title}: median (fastest round)")
    print(f"  {'fresh start':28s} {fresh * 1000:8.1f} ms ({low['fresh'] * 1000:.1f})")
    for mb in sizes:
        fork, paused, best = med[f"fork-{mb}"], med[f"paused-{mb}"], low[f"fork-{mb}"]
        print(
            f"  {'fork, ' + SIZES[mb][0]:28s} {fork * 1000:8.1f} ms ({best * 1000:.1f})"
            f"  {fork / fresh:6.2f}x fresh   parent paused {paused * 1000:7.1f} ms"
            f"   cp -a {med[f'cp-{mb}'] * 1000:7.1f} ms"
        )
    if TARGET[0] in sizes:
        fork = med[f"fork-{TARGET[0]}"]
        verdict = "met" if fork <= TARGET[1] else "not met"
        what = SIZES[TARGET[0]][0]
        print(f"  fork of {what}: {fork * 1000:.0f} ms (target within 100 ms: {verdict})")


def _docker_answers() -> bool:
    try:
        return subprocess.run(["docker", "info"], capture_output=True).returncode == 0
    except OSError:
        return False


async def main(args: argparse.Namespace) -> None:
    sizes = [int(s) for s in args.sizes.split(",")]
    base = Path(tempfile.mkdtemp(prefix="agentkit-bench-fork-", dir=args.dir))
    cache = base / "image-roots"
    image = ExecutionHints(image=TaskImage(image=args.image))
    cases: dict[str, tuple[Factory, int]] = {
        "local, host userland": (
            lambda root, name: LocalSandbox(root=root, rollout_id=name),
            args.n,
        ),
    }
    try:
        started = time.perf_counter()
        await LocalSandbox.prepare([image], image_cache=str(cache))
        print(f"image {args.image}: root exported in {time.perf_counter() - started:.1f} s")
        cases[f"local, image root ({args.image})"] = (
            lambda root, name: LocalSandbox(
                root=root, hints=image, rollout_id=name, image_cache=str(cache)
            ),
            args.n,
        )
    except SandboxError as exc:
        print(f"local, image root: not measured ({exc})")
    if not args.no_docker and _docker_answers():
        cases[f"docker ({args.image})"] = (
            lambda root, name: DockerSandbox(root=root, hints=image, rollout_id=name),
            args.docker_n,
        )
    results: dict[str, dict[str, list[float]]] = {}
    try:
        for title, (make, rounds) in cases.items():
            # Warm: the image made, the engine's caches filled.
            warm = await _started(make, base, f"warm-{len(results)}")
            await _done(warm)
            results[title] = await _measure(f"k{len(results)}", make, base, sizes, rounds)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    print(
        f"{args.n} rounds ({args.docker_n} for docker), {os.cpu_count()} cpus, "
        f"load {os.getloadavg()[0]:.1f}, roots under {base.parent}"
    )
    for title, series in results.items():
        _report(title, series, sizes)


def _args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=5, help="rounds (local sandbox)")
    parser.add_argument("--docker-n", type=int, default=3, help="rounds (docker sandbox)")
    parser.add_argument("--image", default="debian:bookworm-slim")
    parser.add_argument("--dir", default=None, help="where the sandboxes' roots go")
    parser.add_argument("--no-docker", action="store_true")
    parser.add_argument("--sizes", default="0,1,10,100", help="of 0, 1, 10, 100 (MB)")
    return parser.parse_args(argv)


if __name__ == "__main__":
    asyncio.run(main(_args(sys.argv[1:])))
