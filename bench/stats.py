"""How fast the leaderboard of 100,000 rollouts prints (``agentkit runs --compare``).

Makes a run of 100,000 rollouts from a real one (``agentkit run`` of the
JSONL arithmetic set with the chat harness against the scripted model
server, its lines copied to 10,000 tasks x 10 rollouts by bench/_bigrun.py),
the same run killed before its summary.json, and a folder of ten runs of
10,000 rollouts (the cells of a 100,000-rollout job). Then prints the median
of ``--runs`` samples of:

* **baseline**: reading every rollout through ``agentkit.runs``
  (``open`` then ``iter_rollouts``), in this process;
* the leaderboard row (``agentkit.stats.run_stats``) and its table, in this
  process, of the complete run (from its summary) and of the killed run (from
  its rollouts);
* ``agentkit runs --compare`` as a user runs it (a fresh process: the
  interpreter, imports and scipy included) on the complete run, on the killed
  run and on the ten-run folder, and ``agentkit compare`` of two 100,000-rollout
  runs.

The target: the leaderboard of a 100,000-rollout run or job prints in under
2 s (the fresh-process figures of the complete run and of the folder).
Usage: ``python bench/stats.py [--rollouts 100000] [--runs 3]``. Figures only.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).parent))

from _bigrun import make_big_run, make_template  # noqa: E402

import agentkit.runs  # noqa: E402
import agentkit.stats  # noqa: E402

TARGET_S = 2.0


def _cpu() -> float:
    """CPU seconds of this process and of its finished children."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def timed(fn: Callable[[], Any]) -> tuple[float, float]:
    """Wall and CPU seconds of ``fn()``."""
    wall, cpu = time.perf_counter(), _cpu()
    fn()
    return time.perf_counter() - wall, _cpu() - cpu


def median(fn: Callable[[], Any], runs: int) -> tuple[float, float]:
    """Median wall and CPU seconds of ``runs`` calls (CPU is what load on the machine
    from other processes changes least)."""
    samples = [timed(fn) for _ in range(runs)]
    return statistics.median(w for w, _ in samples), statistics.median(c for _, c in samples)


def cli(*args: str) -> Callable[[], None]:
    def run() -> None:
        subprocess.run(
            [sys.executable, "-m", "agentkit", *args], check=True, stdout=subprocess.DEVNULL
        )

    return run


def read_all(path: Path) -> None:
    for _ in agentkit.runs.open(path).iter_rollouts():
        pass


def leaderboard(path: Path) -> None:
    agentkit.stats.format_leaderboard([agentkit.stats.run_stats(path)])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rollouts", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=3, help="samples per figure (the median)")
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="agentkit-bench-stats-"))
    try:
        template = make_template(workdir)
        big = make_big_run(template, workdir / "big", args.rollouts)
        twin = workdir / "twin"
        shutil.copytree(big, twin, ignore=shutil.ignore_patterns("events"))
        killed = workdir / "killed"
        shutil.copytree(big, killed, ignore=shutil.ignore_patterns("events", "summary.json"))
        job = workdir / "job"
        job.mkdir()
        cells = 10
        for i in range(cells):
            make_big_run(template, job / f"cell{i}", args.rollouts // cells)
        agentkit.stats.run_stats(big)  # scipy imported once, as in a process that has used it

        size = (big / "rollouts.jsonl").stat().st_size / 1e6
        print(
            f"leaderboard of a run of {args.rollouts:,} rollouts ({size:.1f} MB of "
            f"rollouts.jsonl), median of {args.runs}"
        )
        print(f"load average at the start: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
        baseline, baseline_cpu = median(lambda: read_all(big), args.runs)
        print(
            f"baseline: every rollout read through agentkit.runs  {baseline * 1000:9.1f} ms "
            f"wall  {baseline_cpu * 1000:9.1f} ms CPU"
        )
        rows = [
            ("in process: complete run (its summary)", lambda: leaderboard(big)),
            ("in process: killed run (its rollouts)", lambda: leaderboard(killed)),
            ("agentkit runs --compare RUN", cli("runs", "--compare", str(big))),
            ("agentkit runs --compare KILLED_RUN", cli("runs", "--compare", str(killed))),
            (
                f"agentkit runs --compare JOB ({cells} runs)",
                cli("runs", "--compare", str(job)),
            ),
            ("agentkit compare RUN TWIN", cli("compare", str(big), str(twin))),
        ]
        figures = {}
        for label, fn in rows:
            wall, cpu = figures[label] = median(fn, args.runs)
            print(
                f"  {label:<44} {wall * 1000:9.1f} ms wall ({wall / baseline:5.2f}x)  "
                f"{cpu * 1000:9.1f} ms CPU ({cpu / baseline_cpu:5.2f}x)"
            )
        keys = ["agentkit runs --compare RUN", f"agentkit runs --compare JOB ({cells} runs)"]
        worst = max(figures[k][0] for k in keys)
        worst_cpu = max(figures[k][1] for k in keys)
        verdict = "under" if worst < TARGET_S else "OVER"
        print(
            f"target: the leaderboard of {args.rollouts:,} rollouts prints in under "
            f"{TARGET_S:.0f} s: {verdict} ({worst:.2f} s wall, {worst_cpu:.2f} s CPU at worst; "
            f"a run killed before its summary: "
            f"{figures['agentkit runs --compare KILLED_RUN'][0]:.2f} s); load average at the "
            f"end {os.getloadavg()[0]:.1f}"
        )
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
