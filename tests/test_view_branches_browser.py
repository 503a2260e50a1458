"""The rollout page of a branching run in a real browser (Debian's ``chromium`` driven by
Playwright): a child links the rollout it was forked from, and that one its branches.

The run is ``examples/branching/branch_run.py`` (the terminal harness on the Harbor
hello-world task, bubblewrap on the host's userland, the scripted model server), served
by ``agentkit view`` in its own process."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from _view import ROOT, cli_env, view_server
from test_view_browser import browser, tab  # noqa: F401  (the browser fixtures)

from agentkit.testing.sandbox_fixtures import requires_bwrap


@requires_bwrap
def test_a_child_links_its_parent_and_the_parent_its_branches(tmp_path: Path, tab: Any) -> None:  # noqa: F811
    from playwright.sync_api import expect

    run = tmp_path / "branching"
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "branching" / "branch_run.py"), str(run)],
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    tree = json.loads(done.stdout.splitlines()[-1])["tree"]
    [root] = [k for k, v in tree.items() if v["parent"] is None]
    children = sorted(k for k, v in tree.items() if v["parent"] == root)
    with view_server(run) as url:
        t = tab()
        page = t.page
        page.goto(url + f"run/branching/rollout/{children[1]}")
        branches = page.locator(".run-head .branches")
        expect(branches).to_contain_text("Forked at step 1 from")
        branches.locator("a", has_text=root).click()
        expect(page.locator(".run-head h1")).to_have_text(root)
        links = page.locator(".run-head .branches a")
        expect(links).to_have_count(len(children))
        assert sorted(links.all_inner_texts()) == children
        t.shot("rollout-branches")
