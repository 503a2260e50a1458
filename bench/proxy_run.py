"""What the model proxy costs a whole run: ``agentkit run`` with it and with ``--no-model-proxy``.

The scripted model server (its own process, answering at once) serves 200
one-call rollouts of the chat harness on a JSONL taskset, 64 at a time. The
same ``agentkit run`` command runs ``--repeat`` times each way, the two ways
interleaved (so load from other processes on the machine hits both alike):
with the model proxy (the default: every call recorded in ``calls/``) and
with ``--no-model-proxy``. Printed: every run's wall time (the command's,
start to exit, as a user sees it), the medians of wall and CPU time (user +
system: on a machine shared with other work, the steadier of the two), and how
much more the proxy costs (target: at most 5% of the run's wall time, issue
#32); then the same in-process (``AgentEnv.run``, no interpreter start-up in
the figure). Figures only, never asserted.

    python bench/proxy_run.py [--tasks 200] [--concurrency 64] [--repeat 5] [--profile]

``--profile`` prints a cProfile of one in-process run with the proxy, cut to
the proxy's own functions (what it adds per rollout).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))
from _server import ServerProcess  # noqa: E402

SCRIPT = {"default": {"content": "42"}}


def cli_run(
    tasks: Path, base_url: str, out: Path, concurrency: int, proxy: bool
) -> tuple[float, float]:
    """One ``agentkit run`` command; its wall time and CPU time (user + system) in seconds."""
    argv = [
        sys.executable, "-m", "agentkit", "run", f"jsonl:{tasks}", "chat",
        "--model", "scripted-model", "--base-url", base_url,
        "-c", str(concurrency), "--out", str(out),
    ]  # fmt: skip
    if not proxy:
        argv.append("--no-model-proxy")
    env = {**os.environ, "OPENAI_API_KEY": "bench"}
    before = _cpu(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, env=env)
    return time.perf_counter() - started, _cpu(resource.RUSAGE_CHILDREN) - before


def _cpu(who: int) -> float:
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


def env_run(
    tasks: Path, base_url: str, out: Path, concurrency: int, proxy: bool
) -> tuple[float, float]:
    """The same run in this process (``AgentEnv.run``); its wall and CPU time in seconds."""
    from agentkit.env import AgentEnv

    env = AgentEnv.from_names(f"jsonl:{tasks}", "chat")
    before = _cpu(resource.RUSAGE_SELF)
    started = time.perf_counter()
    results = env.run(
        concurrency=concurrency,
        model="scripted-model",
        base_url=base_url,
        out=out,
        model_proxy=proxy,
    )
    wall = time.perf_counter() - started
    cpu = _cpu(resource.RUSAGE_SELF) - before
    assert results.summary["mean_reward"] == 1.0, results.summary
    return wall, cpu


def profile(tasks: Path, base_url: str, out: Path, concurrency: int) -> None:
    import cProfile
    import pstats

    profiler = cProfile.Profile()
    profiler.runcall(env_run, tasks, base_url, out, concurrency, True)
    stats = pstats.Stats(profiler)
    stats.sort_stats("cumulative").print_stats(r"agentkit/proxy|_calls", 25)
    stats.sort_stats("tottime").print_stats(25)


def report(label: str, series: dict[str, list[tuple[float, float]]]) -> None:
    print(f"{label}:")
    for way, runs in series.items():
        print(f"  {way:9} " + ", ".join(f"{w:.3f}" for w, _ in runs) + " s wall")
    medians = {
        way: (statistics.median(w for w, _ in runs), statistics.median(c for _, c in runs))
        for way, runs in series.items()
    }
    (wall, cpu), (base_wall, base_cpu) = medians["proxy"], medians["no-proxy"]
    print(
        f"  median wall: proxy {wall:.3f} s, --no-model-proxy {base_wall:.3f} s: "
        f"{(wall / base_wall - 1) * 100:+.1f}% (target <= +5%)"
    )
    print(
        f"  median CPU:  proxy {cpu:.3f} s, --no-model-proxy {base_cpu:.3f} s: "
        f"{(cpu / base_cpu - 1) * 100:+.1f}%"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    with (
        tempfile.TemporaryDirectory(prefix="agentkit-bench-") as tmp,
        ServerProcess(SCRIPT) as server,
    ):
        tasks = Path(tmp) / "tasks.jsonl"
        rows = [
            {"id": str(i), "input": f"6 times 7? ({i})", "target": "42"} for i in range(args.tasks)
        ]
        tasks.write_text("".join(json.dumps(r) + "\n" for r in rows))
        runs = iter(range(10**6))
        if args.profile:
            profile(tasks, server.base_url, Path(tmp) / "profiled", args.concurrency)
            return
        load = os.getloadavg()
        cli: dict[str, list[tuple[float, float]]] = {"proxy": [], "no-proxy": []}
        inproc: dict[str, list[tuple[float, float]]] = {"proxy": [], "no-proxy": []}
        env_run(tasks, server.base_url, Path(tmp) / "warm", args.concurrency, True)  # warm up
        for _ in range(args.repeat):
            for way, proxy in (("proxy", True), ("no-proxy", False)):
                out = Path(tmp) / f"run{next(runs)}"
                cli[way].append(cli_run(tasks, server.base_url, out, args.concurrency, proxy))
            for way, proxy in (("proxy", True), ("no-proxy", False)):
                out = Path(tmp) / f"run{next(runs)}"
                inproc[way].append(env_run(tasks, server.base_url, out, args.concurrency, proxy))
        load_after = os.getloadavg()
    print(
        f"{args.tasks} one-call rollouts of the chat harness, concurrency {args.concurrency}, "
        f"scripted server in its own process; {args.repeat} runs each way, interleaved"
    )
    print(f"load average {load[0]:.1f} before, {load_after[0]:.1f} after; {os.cpu_count()} CPUs")
    report("agentkit run (the command, start to exit)", cli)
    report("AgentEnv.run in-process (no interpreter start-up)", inproc)


if __name__ == "__main__":
    main()
