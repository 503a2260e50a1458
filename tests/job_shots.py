"""The screenshots of docs/viewer.md's jobs, charts and comparison, from a real job.

Not a test: the pages of a folder that holds a job ``agentkit job run`` made
and a run beside it, served by ``agentkit view`` and captured in Debian's
chromium with the browser tests' flags (tests/test_view_browser.py). From
the repository's root::

    agentkit job run examples/jobs/arithmetic.toml --out /tmp/shots/arith
    agentkit run jsonl:examples/jsonl/arithmetic.jsonl chat \\
        --model scripted:examples/scripts/arithmetic-weak.json -n 2 --out /tmp/shots/arith-weak
    python tests/job_shots.py /tmp/shots docs/images/viewer

It waits for every chart it captures to be drawn (Chart.js holds it), and
writes runs-jobs.png, run-charts.png, job.png, job-heatmap.png,
job-charts.png and compare-runs.png (the visible part of each page, or the
part named).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Any

from _view import view_server
from test_view_browser import CHART_DATA, CHROMIUM, CHROMIUM_ARGS


def drawn(page: Any, *keys: str) -> None:
    """Wait until Chart.js has drawn the charts ``keys`` on the page."""
    for key in keys:
        page.wait_for_function(f"(key) => ({CHART_DATA})(key) !== null", arg=key)


def capture(folder: Path, out: Path) -> None:
    from playwright.sync_api import expect, sync_playwright

    out.mkdir(parents=True, exist_ok=True)
    with (
        view_server(folder) as url,
        sync_playwright() as p,
        tempfile.TemporaryDirectory() as profile,
    ):
        context = p.chromium.launch_persistent_context(
            profile,
            executable_path=CHROMIUM,
            args=CHROMIUM_ARGS,
            headless=True,
            viewport={"width": 1600, "height": 900},
        )
        page = context.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.goto(url)
        job_row = page.locator("tr.job-row").first
        expect(job_row).to_be_visible()
        expect(page.locator("tr.cell-row").first).to_be_visible()
        page.screenshot(path=str(out / "runs-jobs.png"))
        job = job_row.get_attribute("data-job")
        page.goto(url + f"job/{job}")
        drawn(page, "leaderboard", "reward", "duration_s", "tokens")
        expect(page.locator("tr.heat-row").first).to_be_visible()
        page.screenshot(path=str(out / "job.png"))
        page.locator("#heatmap").screenshot(path=str(out / "job-heatmap.png"))
        page.locator("#charts").screenshot(path=str(out / "job-charts.png"))
        cell = page.locator("tr.board-row").last.get_attribute("data-run")
        page.get_by_role("link", name="Compare the").click()
        expect(page.locator("tr.pair-row").first).to_be_visible()
        drawn(page, "leaderboard", "paired")
        page.screenshot(path=str(out / "compare-runs.png"))
        page.goto(url + f"run/{cell}?tab=charts")
        drawn(page, "reward", "duration_s", "tokens")
        page.screenshot(path=str(out / "run-charts.png"))
        context.close()
        if errors:
            sys.exit(f"the pages had errors: {errors}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path, help="a folder holding a job (and runs)")
    parser.add_argument("out", type=Path, help="where the PNGs go (docs/images/viewer)")
    args = parser.parse_args()
    capture(args.folder, args.out)


if __name__ == "__main__":
    main()
