"""How fast ``agentkit view`` opens a 10,000-rollout run and a 100,000-rollout job.

Makes a run of 10,000 rollouts from a real one (``agentkit run`` of the
JSONL arithmetic set with the chat harness against the scripted model
server, its lines copied to 1,000 tasks × 10 rollouts), starts
``agentkit view`` on it in a fresh process for every sample, and prints the
median wall time of what the pages ask for:

* **open**: the runs page's ``/api/runs`` then the run page's ``/api/run``
  and its first page of rollouts, in task order (the first request scans the
  whole file once);
* **then**: the next page, a filtered page (did not pass), a sort by reward,
  the tasks × rollouts grid, one rollout with its events;
* the same open for a run killed before its summary.json (the statistics
  are computed from the rollouts);
* with Playwright and Debian's chromium installed: the run page in the
  browser, from navigation until its 50 rows are drawn.

Then a job of 100,000 rollouts (ten cells of 10,000, made the same way) in
a fresh viewer each sample:

* **job page open**: ``/api/job`` (the cells' leaderboard with intervals
  and the tasks × cells heat map, from their summaries), and in the
  browser from navigation until the leaderboard's chart and the heat map
  are drawn; the target is under 1 s;
* **its charts**: ``/api/charts`` of the ten cells (every rollout read once,
  then kept), cold and again, and in the browser until every chart is drawn.

The baseline, measured in the same run, is the naive reader: ``json.loads``
of every line of rollouts.jsonl. The target is an open under 2 s.
Usage: ``python bench/view.py [--rollouts 10000] [--job-rollouts 100000]
[--runs 3]``. Figures only.
"""

from __future__ import annotations

import argparse
import http.client
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.parse
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).parent))

from _bigrun import make_big_job, make_big_run, make_template  # noqa: E402

TARGET_S = 2.0
#: The job page opens in under this (seconds).
JOB_TARGET_S = 1.0
CHROMIUM = "/usr/bin/chromium"


@contextmanager
def viewer(directory: Path) -> Iterator[str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "agentkit", "view", str(directory), "--no-open"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert proc.stdout is not None
        url = next(line.strip() for line in proc.stdout if line.strip().startswith("http://"))
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def get(url: str, path: str) -> Any:
    parts = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=120)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        body = resp.read()
        if resp.status != 200:
            raise RuntimeError(f"GET {path}: {resp.status} {body[:200]!r}")
        return json.loads(body)
    finally:
        conn.close()


def timed(fn: Callable[[], Any]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def measure_open(folder: Path, name: str, runs: int, rollouts: int) -> dict[str, float]:
    """Median seconds of each request of a cold open and of the requests after it."""
    samples: dict[str, list[float]] = {}

    def add(key: str, value: float) -> None:
        samples.setdefault(key, []).append(value)

    last = max(0, rollouts - 50)  # the last page of 50
    for _ in range(runs):
        with viewer(folder) as url:
            t_runs = timed(lambda u=url: get(u, "/api/runs"))
            t_run = timed(lambda u=url: get(u, f"/api/run/{name}"))
            t_page = timed(lambda u=url: get(u, f"/api/run/{name}/rollouts?limit=50"))
            add("runs page (/api/runs)", t_runs)
            add("run header (/api/run)", t_run)
            add("first page of 50 rollouts", t_page)
            add("OPEN: runs page + run page", t_runs + t_run + t_page)
            add("next page", timed(lambda u=url: get(u, f"/api/run/{name}/rollouts?offset=50")))
            add(
                "the last page",
                timed(lambda u=url: get(u, f"/api/run/{name}/rollouts?offset={last}")),
            )
            add(
                "filtered: did not pass",
                timed(lambda u=url: get(u, f"/api/run/{name}/rollouts?failed=1")),
            )
            add(
                "sorted by reward",
                timed(lambda u=url: get(u, f"/api/run/{name}/rollouts?sort=reward&desc=1")),
            )
            add("tasks x rollouts page", timed(lambda u=url: get(u, f"/api/run/{name}/tasks")))
            rid = get(url, f"/api/run/{name}/rollouts?offset={rollouts // 2}&limit=1")["rows"][0][
                "rollout_id"
            ]
            add(
                "one rollout with its events",
                timed(lambda u=url, r=rid: get(u, f"/api/run/{name}/rollout/{r}")),
            )
    return {k: statistics.median(v) for k, v in samples.items()}


BROWSER_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def have_browser() -> bool:
    return importlib.util.find_spec("playwright") is not None and os.access(CHROMIUM, os.X_OK)


def measure_browser(folder: Path, name: str, runs: int) -> float | None:
    """Median seconds from navigating to the run page until its 50 rows are drawn."""
    if not have_browser():
        return None
    from playwright.sync_api import sync_playwright

    samples = []
    with sync_playwright() as p:
        for _ in range(runs):
            with tempfile.TemporaryDirectory() as profile, viewer(folder) as url:
                context = p.chromium.launch_persistent_context(
                    profile, executable_path=CHROMIUM, args=BROWSER_ARGS, headless=True
                )
                page = context.new_page()
                page.goto(url + "static/favicon.svg")  # the browser is up and connected
                start = time.perf_counter()
                page.goto(url + f"run/{name}")
                page.locator("tr.rollout-row").nth(49).wait_for(timeout=120_000)
                samples.append(time.perf_counter() - start)
                context.close()
    return statistics.median(samples)


#: The job page is open: its leaderboard's chart is drawn and its heat map has rows.
JOB_OPEN = """() => {
  const canvas = document.querySelector('canvas[data-chart="leaderboard"]');
  return !!(canvas && window.Chart && Chart.getChart(canvas)
    && document.querySelector("tr.heat-row a.heat"));
}"""
#: Every chart of the job's cells is drawn.
JOB_CHARTS = """() => {
  const cards = document.querySelectorAll("#charts .chart-card canvas");
  return cards.length > 0 && [...cards].every((c) => Chart.getChart(c));
}"""


def measure_job(folder: Path, job: str, runs: int) -> dict[str, float]:
    """Median seconds of the job page's requests in a fresh viewer, cold then again."""
    samples: dict[str, list[float]] = {}

    def add(key: str, value: float) -> None:
        samples.setdefault(key, []).append(value)

    for _ in range(runs):
        with viewer(folder) as url:
            add("runs page (/api/runs)", timed(lambda u=url: get(u, "/api/runs")))
        with viewer(folder) as url:
            add("JOB PAGE OPEN: /api/job (cold)", timed(lambda u=url: get(u, f"/api/job/{job}")))
            cells = [c["run"] for c in get(url, f"/api/job/{job}")["cell_list"] if c["run"]]
            charts = f"/api/charts?runs={','.join(cells)}"
            add("/api/job again", timed(lambda u=url: get(u, f"/api/job/{job}")))
            add("charts (/api/charts, cold)", timed(lambda u=url, c=charts: get(u, c)))
            add("charts again", timed(lambda u=url, c=charts: get(u, c)))
    return {k: statistics.median(v) for k, v in samples.items()}


def measure_job_browser(folder: Path, job: str, runs: int) -> dict[str, float] | None:
    """Median seconds from navigating to the job page (a fresh viewer and browser) until
    it is open (leaderboard chart and heat map drawn), and until its charts are drawn."""
    if not have_browser():
        return None
    from playwright.sync_api import sync_playwright

    opened, charted = [], []
    with sync_playwright() as p:
        for _ in range(runs):
            with tempfile.TemporaryDirectory() as profile, viewer(folder) as url:
                context = p.chromium.launch_persistent_context(
                    profile, executable_path=CHROMIUM, args=BROWSER_ARGS, headless=True
                )
                page = context.new_page()
                page.goto(url + "static/favicon.svg")  # the browser is up and connected
                start = time.perf_counter()
                page.goto(url + f"job/{job}")
                page.wait_for_function(JOB_OPEN, timeout=120_000, polling="raf")
                opened.append(time.perf_counter() - start)
                page.wait_for_function(JOB_CHARTS, timeout=300_000, polling="raf")
                charted.append(time.perf_counter() - start)
                context.close()
    return {"open": statistics.median(opened), "charts": statistics.median(charted)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rollouts", type=int, default=10_000)
    parser.add_argument("--job-rollouts", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=3, help="fresh viewer processes per figure")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="agentkit-bench-view-") as tmp:
        measure(args, Path(tmp))  # about 600 MB of runs, removed after


def measure(args: argparse.Namespace, workdir: Path) -> None:
    """Make the runs and the job under ``workdir``, and print the figures."""
    template = make_template(workdir)
    folder = workdir / "runs"
    folder.mkdir()
    big = make_big_run(template, folder / "big", args.rollouts)
    killed = workdir / "killed"
    killed.mkdir()
    make_big_run(template, killed / "big", args.rollouts, summary=False)
    lines = (big / "rollouts.jsonl").read_bytes().splitlines()
    baseline = statistics.median(
        timed(lambda: [json.loads(line) for line in lines]) for _ in range(args.runs)
    )
    size = (big / "rollouts.jsonl").stat().st_size / 1e6
    print(f"agentkit view on a run of {args.rollouts:,} rollouts ({size:.1f} MB of rollouts.jsonl)")
    print(f"baseline: json.loads of every line  {baseline * 1000:8.1f} ms")
    figures = measure_open(folder, "big", args.runs, args.rollouts)
    print("a complete run (summary.json current):")
    for key, value in figures.items():
        print(f"  {key:<34} {value * 1000:8.1f} ms  ({value / baseline:5.2f}x baseline)")
    killed_figures = measure_open(killed, "big", args.runs, args.rollouts)
    key = "OPEN: runs page + run page"
    print("a run killed before its summary:")
    print(
        f"  {key:<34} {killed_figures[key] * 1000:8.1f} ms  "
        f"({killed_figures[key] / baseline:5.2f}x baseline)"
    )
    page = measure_browser(folder, "big", args.runs)
    if page is None:
        print("browser: skipped (needs playwright and /usr/bin/chromium)")
    else:
        print(f"browser: run page until 50 rows are drawn  {page * 1000:8.1f} ms")
    worst = max(figures[key], killed_figures[key], page or 0.0)
    verdict = "under" if worst < TARGET_S else "OVER"
    print(f"target: open under {TARGET_S:.0f} s: {verdict} ({worst:.2f} s at worst)")

    jobs = workdir / "jobs"
    make_big_job(template, jobs / "big", args.job_rollouts)
    print(f"a job of {args.job_rollouts:,} rollouts in 10 cells")
    job_figures = measure_job(jobs, "big", args.runs)
    for key, value in job_figures.items():
        print(f"  {key:<34} {value * 1000:8.1f} ms")
    in_browser = measure_job_browser(jobs, "big", args.runs)
    if in_browser is None:
        print("browser: skipped (needs playwright and /usr/bin/chromium)")
    else:
        stages = (("its leaderboard and heat map are", "open"), ("its charts are", "charts"))
        for what, key in stages:
            print(f"browser: job page until {what} drawn  {in_browser[key] * 1000:8.1f} ms")
    opened = max(job_figures["JOB PAGE OPEN: /api/job (cold)"], (in_browser or {}).get("open", 0))
    verdict = "under" if opened < JOB_TARGET_S else "OVER"
    print(f"target: the job page opens in under {JOB_TARGET_S:.0f} s: {verdict} ({opened:.2f} s)")


if __name__ == "__main__":
    main()
