"""A job of 4 cells × 2,000 one-call rollouts against one run of the same 8,000 rollouts.

The chat harness on JSONL tasks, against the scripted model server in its own
process answering at once (no latency). The job (``agentkit job run``: four
cells, one per model label, each 2,000 tasks × 1 rollout) and the baseline
(``agentkit run``: one run of the same tasks four times over, 8,000 × 1) run
with the same total concurrency, each as its own ``agentkit`` process with
the same flags (``--json``, no progress display), interleaved ``--repeat``
times so that load from other processes affects both alike. Prints every
wall time, the best of each, their ratio and whether the job is within 10%
of the run.

    python bench/job.py [--tasks 2000] [--cells 4] [--concurrency 64] [--repeat 3]

Target: the job's best wall time within 10% of the run's (ratio <= 1.10).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

try:
    from _server import ServerProcess
except ImportError:  # run as a module
    from bench._server import ServerProcess

SCRIPT = {"default": {"content": "42"}}


def write_tasks(path: Path, n: int, copies: int) -> None:
    rows = [
        {"id": f"c{c}-{i}", "input": f"What is 6 times 7? ({i})", "target": "42"}
        for c in range(copies)
        for i in range(n)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def write_job(path: Path, tasks: Path, cells: int, concurrency: int, base_url: str) -> None:
    models = "".join(
        f'[[models]]\nname = "scripted-model"\nlabel = "m{i}"\nbase_url = "{base_url}"\n\n'
        for i in range(cells)
    )
    path.write_text(
        f'[job]\nname = "bench"\nconcurrency = {concurrency}\n\n'
        f'[[tasksets]]\nspec = "jsonl:{tasks}"\n\n[[harnesses]]\nname = "chat"\n\n{models}'
    )


def timed(args: list[str]) -> tuple[float, dict[str, object]]:
    """Wall seconds of one ``agentkit`` process, and the JSON it printed."""
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "agentkit", *args], capture_output=True, text=True, check=False
    )
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"agentkit {' '.join(args[:2])} failed:\n{proc.stderr}")
    report: dict[str, object] = json.loads(proc.stdout)
    return wall, report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=2000, help="tasks (rollouts) per cell")
    parser.add_argument("--cells", type=int, default=4)
    parser.add_argument("--concurrency", type=int, default=64, help="the total, in both")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each, interleaved")
    args = parser.parse_args()
    total = args.tasks * args.cells

    with (
        tempfile.TemporaryDirectory(prefix="agentkit-bench-job-") as tmp,
        ServerProcess(SCRIPT) as server,
    ):
        root = Path(tmp)
        cell_tasks = root / "tasks.jsonl"
        write_tasks(cell_tasks, args.tasks, 1)
        run_tasks = root / "all-tasks.jsonl"
        write_tasks(run_tasks, args.tasks, args.cells)
        job_file = root / "job.toml"
        write_job(job_file, cell_tasks, args.cells, args.concurrency, server.base_url)
        common = ["--json", "--no-progress"]

        def job(i: int) -> float:
            wall, report = timed(
                ["job", "run", str(job_file), "--out", str(root / f"job{i}"), *common]
            )
            cells = report["cells"]
            assert isinstance(cells, list) and len(cells) == args.cells
            assert sum(c["summary"]["finished"] for c in cells) == total, report
            assert report["complete"] is True
            return wall

        def run(i: int) -> float:
            wall, summary = timed(
                [
                    "run", f"jsonl:{run_tasks}", "chat",
                    "--model", "scripted-model", "--base-url", server.base_url,
                    "-c", str(args.concurrency), "--out", str(root / f"run{i}"), *common,
                ]
            )  # fmt: skip
            assert summary["finished"] == total and summary["mean_reward"] == 1.0, summary
            return wall

        # warm up: imports, page cache, the server's first connections
        timed(["run", f"jsonl:{cell_tasks}", "chat", "--model", "scripted-model",
               "--base-url", server.base_url, "--limit", "50", "--out", str(root / "warm"),
               *common])  # fmt: skip
        job_walls: list[float] = []
        run_walls: list[float] = []
        for i in range(args.repeat):
            run_walls.append(run(i))
            job_walls.append(job(i))

    best_job, best_run = min(job_walls), min(run_walls)
    ratio = best_job / best_run
    print(
        f"workload: {args.cells} cells × {args.tasks} one-call rollouts (chat harness, scripted "
        f"server answering at once, separate process) against one run of {total}; total "
        f"concurrency {args.concurrency} in both; each an agentkit process"
    )
    print("  run  walls: " + ", ".join(f"{w:.2f} s" for w in run_walls))
    print("  job  walls: " + ", ".join(f"{w:.2f} s" for w in job_walls))
    print(
        f"one run: best {best_run:.2f} s ({total / best_run:,.0f} rollouts/s), "
        f"median {statistics.median(run_walls):.2f} s"
    )
    print(
        f"job:     best {best_job:.2f} s ({total / best_job:,.0f} rollouts/s), "
        f"median {statistics.median(job_walls):.2f} s"
    )
    verdict = "within 10%" if ratio <= 1.10 else "NOT within 10%"
    print(f"ratio job/run (best walls): {ratio:.3f}  -> {verdict} (target <= 1.10)")


if __name__ == "__main__":
    main()
