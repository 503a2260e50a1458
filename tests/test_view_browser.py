"""``agentkit view`` in a real browser: Debian's ``chromium``, headless, driven by Playwright.

The runs are made by ``agentkit run`` (the Harbor examples with the oracle,
the JSONL arithmetic set with the chat harness against the scripted model
server) and served by ``agentkit view`` in its own process. Every page is
saved as a PNG under the test's tmp dir (``screenshots/``).
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _stats_runs import JOB_CELLS, make_example_job, make_example_runs
from _view import (
    HARBOR,
    ROOT,
    arithmetic_run_args,
    arithmetic_script,
    cli_env,
    planned_arithmetic,
    run_agentkit,
    view_server,
)

import agentkit.runs
from agentkit.testing.model_server import ScriptedModelServer
from agentkit.testing.sandbox_fixtures import requires_bwrap

CHROMIUM = os.environ.get("AGENTKIT_TEST_CHROMIUM", "/usr/bin/chromium")
#: Flags for this machine: no sandbox (root), no GPU, nothing fetched from the network.
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def _missing() -> str | None:
    if importlib.util.find_spec("playwright") is None:
        return "playwright is not installed (it is in agentkit's test extra)"
    if not os.access(CHROMIUM, os.X_OK):
        return f"no Chromium at {CHROMIUM} (apt-get install chromium; nox -s tests does it as root)"
    return None


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A Chromium context with a new empty profile; fails under CI=true when missing."""
    missing = _missing()
    if missing:
        if os.environ.get("CI") == "true":
            pytest.fail(f"browser tests need a browser: {missing}")
        pytest.skip(missing)
    from playwright.sync_api import expect, sync_playwright

    expect.set_options(timeout=30_000)
    with sync_playwright() as p:
        context = p.chromium.launch_persistent_context(
            str(tmp_path_factory.mktemp("chromium-profile")),
            executable_path=CHROMIUM,
            args=CHROMIUM_ARGS,
            headless=True,
            viewport={"width": 1400, "height": 900},
        )
        context.set_default_timeout(30_000)
        try:
            yield context
        finally:
            context.close()


class Tab:
    """A browser page that records JavaScript errors (uncaught, and those logged to the
    console) and saves screenshots. ``http_errors``: the test opens pages that answer
    with an error status on purpose (the console says so)."""

    def __init__(self, context: Any, shots: Path, *, http_errors: bool = False) -> None:
        self.page = context.new_page()
        self.shots = shots
        self.errors: list[str] = []
        self.page.on("pageerror", lambda exc: self.errors.append(str(exc)))
        self.page.on("console", self._console)
        self.http_errors = http_errors
        #: Every URL the page requested.
        self.requested: list[str] = []
        #: Requests that left this machine (the page ships whole: there must be none).
        self.remote: list[str] = []
        self.page.on("request", self._request)

    def _console(self, message: Any) -> None:
        if message.type != "error":
            return
        if self.http_errors and message.text.startswith("Failed to load resource"):
            return
        where = (message.location or {}).get("url", "")
        if message.text.startswith("Failed to load resource") and where.endswith("/stream"):
            return  # a live stream, cut when the test stops the viewer
        self.errors.append(f"console: {message.text}")

    def _request(self, request: Any) -> None:
        self.requested.append(request.url)
        host = urllib.parse.urlsplit(request.url).hostname
        if request.url.startswith(("http:", "https:", "ws:", "wss:")) and host not in (
            "127.0.0.1",
            "localhost",
        ):
            self.remote.append(request.url)

    def shot(self, name: str, *, docs: bool = False) -> None:
        """Save the whole page under the test's tmp dir; ``docs``: also the visible part
        under $AGENTKIT_VIEW_DOCS_SHOTS (how docs/images/viewer/ is made; the pictures of
        jobs, charts and comparisons come from a real job, by tests/job_shots.py)."""
        self.shots.mkdir(exist_ok=True)
        self.page.screenshot(path=str(self.shots / f"{name}.png"), full_page=True)
        target = os.environ.get("AGENTKIT_VIEW_DOCS_SHOTS")
        if docs and target:
            Path(target).mkdir(parents=True, exist_ok=True)
            self.page.screenshot(path=str(Path(target) / f"{name}.png"))

    def keep(self) -> None:
        """Mark the loaded document; :meth:`kept` is true while it was not reloaded."""
        self.page.evaluate("window.__agentkitTestKept = true")

    def kept(self) -> bool:
        return bool(self.page.evaluate("window.__agentkitTestKept === true"))

    def close(self) -> None:
        self.page.close()
        assert self.errors == []
        assert self.remote == []


@pytest.fixture
def tab(browser: Any, tmp_path: Path) -> Iterator[Any]:
    opened: list[Tab] = []

    def new(*, http_errors: bool = False) -> Tab:
        opened.append(Tab(browser, tmp_path / "screenshots", http_errors=http_errors))
        return opened[-1]

    yield new
    for t in opened:
        t.close()


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The Harbor examples with the oracle, and three arithmetic runs: all right, one
    answer wrong, and one whose model server fails a call (that rollout could not run)."""
    folder = tmp_path_factory.mktemp("runs")
    if shutil.which("bwrap"):
        done = run_agentkit(
            "run",
            f"harbor:{HARBOR.relative_to(ROOT)}",
            "oracle",
            "-S",
            "image=host",  # on the host's /usr: no image to build
            "--out",
            str(folder / "harbor"),
        )
        assert done.returncode == 0, done.stderr
    with ScriptedModelServer(arithmetic_script()) as good:
        done = run_agentkit(*arithmetic_run_args(folder / "arith-good", good.base_url))
        assert done.returncode == 0, done.stderr
    with ScriptedModelServer(arithmetic_script(wrong="6 * 7")) as bad:
        done = run_agentkit(*arithmetic_run_args(folder / "arith", bad.base_url))
        assert done.returncode == 0, done.stderr
    down = arithmetic_script(wrong="6 * 7")
    down["rules"].insert(
        0, {"match": {"last_user_contains": "10 - 4"}, "reply": {"fail": "server_error"}}
    )
    with ScriptedModelServer(down) as flaky:
        args = arithmetic_run_args(folder / "arith-down", flaky.base_url, "--max-retries", "0")
        done = run_agentkit(*args)
        assert done.returncode == 0, done.stderr
    return folder


@requires_bwrap
def test_harbor_runs_tasks_and_rollouts(runs: Path, tab: Any) -> None:
    from playwright.sync_api import expect

    with view_server(runs) as url:
        t = tab()
        page = t.page
        page.goto(url)
        expect(page.locator("tr.run-row")).to_have_count(4)
        expect(page.locator("tr.run-row[data-run=harbor]")).to_contain_text("oracle")
        expect(page.locator("tr.run-row[data-run=harbor]")).to_contain_text("5/5")
        t.shot("runs", docs=True)
        # sortable: by mean reward, lowest first, then highest first
        page.locator("th.sortable", has_text="Mean reward").click()
        expect(page.locator("tr.run-row").first).to_have_attribute("data-run", "harbor")
        page.locator("th.sortable", has_text="Mean reward").click()
        expect(page.locator("tr.run-row").first).to_have_attribute("data-run", "arith-good")
        assert "sort=mean_reward" in page.url and "desc=1" in page.url
        page.locator("tr.run-row[data-run=harbor] a").click()
        expect(page.locator("h1")).to_have_text("harbor")
        expect(page.locator("tr.rollout-row")).to_have_count(5)
        expect(page.locator(".banner.ok")).to_contain_text("complete")
        t.shot("run", docs=True)
        page.locator("tr.rollout-row a", has_text="harbor:build-a-tool").click()
        expect(page.locator("#steps")).to_contain_text("implement")
        expect(page.locator("#verifier")).to_contain_text("PASS: greet.sh prints hello")
        expect(page.locator("#reward")).to_contain_text("core.reward")
        expect(page.locator("#timeline")).to_contain_text("harbor.step")
        expect(page.locator("#files")).to_contain_text("README.md")
        assert "/run/harbor/rollout/build-a-tool-" in page.url
        t.shot("rollout-multi-step", docs=True)
        # files open in the page; events have deep links
        page.locator("#files button", has_text="app/README.md").first.click()
        expect(page.locator(".file-view")).to_contain_text("greet.sh")
        readme = page.locator("#files li", has_text="app/README.md").first
        with page.expect_download() as download:
            readme.get_by_text("download").click()
        assert download.value.suggested_filename == "README.md"
        assert "greet.sh" in Path(download.value.path()).read_text()
        rollout_url = page.url
        page.goto(rollout_url + "#event-9")
        expect(page.locator("#event-9")).to_have_class("event exec target")
        expect(page.locator("#event-9 + tr.detail")).to_be_visible()
        expect(page.locator("#event-9 + tr.detail")).to_contain_text("verifier.test")
        # a failed rollout says why
        page.locator("#crumbs a").nth(1).click()  # Runs › harbor
        page.locator("tr.rollout-row a", has_text="harbor:too-slow").click()
        expect(page.locator(".why")).to_contain_text("agent_timeout")
        expect(page.locator(".why")).to_contain_text("ran past the agent timeout")
        expect(page.locator("#verifier")).to_contain_text("no /app/done.txt")
        t.shot("rollout-failed", docs=True)
        page.go_back()
        expect(page.locator("tr.rollout-row")).to_have_count(5)
        page.get_by_text("did not pass").click()
        expect(page.locator("tr.rollout-row")).to_have_count(2)
        assert "failed=1" in page.url


def test_chat_transcript_filters_tasks_rubric_options_compare(runs: Path, tab: Any) -> None:
    from playwright.sync_api import expect

    with view_server(runs) as url:
        t = tab()
        page = t.page
        page.goto(url + "run/arith")
        expect(page.locator("tr.rollout-row")).to_have_count(planned_arithmetic())
        page.locator("tr.rollout-row a", has_text="arithmetic:add-1").click()
        expect(page.locator("#transcript .msg.user")).to_contain_text("What is 2 + 3?")
        expect(page.locator("#transcript .msg.assistant")).to_contain_text("5")
        expect(page.locator("#reward")).to_contain_text("core.correct")
        expect(page.locator("#timeline")).to_contain_text("model.response")
        t.shot("rollout-chat", docs=True)
        page.goto(url + "run/arith?failed=1")
        expect(page.locator("tr.rollout-row")).to_have_count(1)
        page.locator("tr.rollout-row a").click()
        expect(page.locator(".why")).to_contain_text("scored 0")
        expect(page.locator("#transcript .msg.assistant")).to_contain_text("41")
        expect(page.locator(".big-reward").first).to_contain_text("0")
        t.shot("rollout-wrong-answer")
        page.goto(url + "run/arith?tab=tasks")
        expect(page.locator("tr.task-row")).to_have_count(planned_arithmetic())
        expect(page.locator("tr.task-row[data-task='arithmetic:mul-1'] .cell.bad")).to_have_count(1)
        t.shot("run-tasks", docs=True)
        page.locator("tr.task-row[data-task='arithmetic:mul-1'] td a").first.click()
        expect(page.locator("tr.rollout-row")).to_have_count(1)
        page.goto(url + "run/arith?tab=rubric")
        expect(page.locator(".tab-body")).to_contain_text("core.correct")
        t.shot("run-rubric")
        page.goto(url + "run/arith?tab=options")
        expect(page.locator(".tab-body")).to_contain_text("scripted")
        t.shot("run-options")
        page.goto(url)
        page.locator("tr.run-row[data-run=arith-good] input").check()
        page.locator("tr.run-row[data-run=arith] input").check()
        page.get_by_role("button", name="Compare 2 runs").click()
        expect(page.locator("h1")).to_have_text("Compare two runs")
        expect(page.locator("button.toggle", has_text="only A passes: 1")).to_be_visible()
        page.locator("button.toggle", has_text="only A passes").click()
        expect(page.locator("tr.cmp")).to_have_count(1)
        expect(page.locator("tr.cmp")).to_contain_text("arithmetic:mul-1")
        t.shot("compare", docs=True)


def test_a_rollouts_model_calls_are_listed(runs: Path, tab: Any) -> None:
    """The rollout page lists the calls the model proxy recorded; a row opens its JSON,
    and the card says which calls carry no token ids and why."""
    from playwright.sync_api import expect

    with view_server(runs) as url:
        t = tab()
        page = t.page
        page.goto(url + "run/arith")
        page.locator("tr.rollout-row a", has_text="arithmetic:add-1").click()
        calls = page.locator("#calls")
        expect(calls.locator("tr.call")).to_have_count(1)
        expect(calls.locator("tr.call")).to_contain_text("chat")
        expect(calls.locator("tr.call")).to_contain_text("200 stop")
        expect(calls.locator(".tokens-gap")).to_contain_text("Token ids incomplete: 1 of 1")
        expect(calls.locator(".tokens-gap")).to_contain_text("were not asked for")
        calls.locator("tr.call").click()
        expect(calls.locator("tr.detail")).to_be_visible()
        expect(calls.locator("tr.detail")).to_contain_text("What is 2 + 3?")
        expect(calls.locator("tr.detail")).to_contain_text('"session_id"')
        calls.scroll_into_view_if_needed()
        t.shot("rollout-calls", docs=True)


#: OpenCode on the Harbor hello-world task: a bash tool call whose long output the
#: transcript folds, then the answer.
OPENCODE_SCRIPT: dict[str, Any] = {
    "rules": [
        {
            "match": {"after_tool": False, "last_user_contains": "hello.txt"},
            "reply": {
                "content": "I will create the file, then count to 60.",
                "reasoning": "The task wants /app/hello.txt with a greeting.",
                "tool_calls": [
                    {
                        "name": "bash",
                        "arguments": {
                            "command": "printf 'Hello, world!\\n' > /app/hello.txt && seq 1 60",
                            "description": "Write the greeting",
                        },
                    }
                ],
                "usage": {"prompt_tokens": 900, "completion_tokens": 25},
            },
        },
        {
            "match": {"after_tool": True},
            "reply": {
                "content": "Created /app/hello.txt.",
                "usage": {"prompt_tokens": 950, "completion_tokens": 8},
            },
        },
    ]
}


def _opencode_env() -> dict[str, str]:
    """The environment that finds the opencode CLI (nox sets AGENTKIT_OPENCODE_BIN)."""
    finder = pytest.importorskip("agentkit_opencode", reason="the OpenCode plugin is not installed")
    from agentkit import HarnessError

    try:
        found = finder.find_opencode(cwd=ROOT)
    except HarnessError as exc:
        pytest.skip(f"the opencode CLI is not installed (nox -s tests installs it): {exc}")
    return {**cli_env(), finder.BINARY_ENV: str(found.path)}


@requires_bwrap
def test_tool_calls_and_their_results_in_the_transcript(tmp_path: Path, tab: Any) -> None:
    """A real agent's transcript: OpenCode runs bash in the sandbox on a Harbor task."""
    from playwright.sync_api import expect

    env = _opencode_env()
    folder = tmp_path / "runs"
    with ScriptedModelServer(OPENCODE_SCRIPT) as server:
        args = [
            *("run", f"harbor:{HARBOR.relative_to(ROOT)}", "opencode"),
            *("--task", "harbor:hello-world", "-S", "image=host"),
            *("--model", "scripted-model", "--base-url", server.base_url),
            *("--out", str(folder / "opencode"), "--no-progress"),
        ]
        done = subprocess.run(
            [sys.executable, "-m", "agentkit", *args],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
    assert done.returncode == 0, done.stdout + done.stderr
    (line,) = (folder / "opencode" / "rollouts.jsonl").read_text().splitlines()
    rid = json.loads(line)["rollout_id"]
    with view_server(folder) as url:
        t = tab()
        page = t.page
        page.goto(url + f"run/opencode/rollout/{rid}")
        transcript = page.locator("#transcript")
        expect(transcript.locator(".msg.user")).to_contain_text("hello.txt")
        call = transcript.locator(".msg.assistant .tool-call")
        expect(call.locator("code")).to_have_text("bash")
        expect(call).to_contain_text('"description": "Write the greeting"')  # arguments, pretty
        expect(transcript.locator(".msg.assistant details summary").first).to_have_text("Reasoning")
        result = transcript.locator(".msg.tool")
        expect(result.locator(".msg-head")).to_contain_text("result of bash")
        # 60 lines of output: folded, with a button to show them all
        expect(result.locator("pre.text.folded")).to_have_count(1)
        expect(
            result.get_by_role("button", name=re.compile(r"Show all \(6\d lines\)"))
        ).to_be_visible()
        t.shot("rollout-tool-calls", docs=True)
        result.get_by_role("button", name=re.compile("Show all")).click()
        expect(result.locator("pre.text.folded")).to_have_count(0)
        expect(result.locator("pre.text")).to_contain_text("60")
        expect(transcript.locator(".msg.assistant").last).to_contain_text("Created /app/hello.txt.")
        expect(page.locator("#timeline")).to_contain_text("tool.call")
        expect(page.locator("#timeline")).to_contain_text("tool.result")
        expect(page.locator("#reward")).to_contain_text("harness.tool_calls")
        expect(page.locator("#verifier")).to_be_visible()
        expect(page.locator(".run-head .big-reward")).to_have_text("reward 1")


def test_a_rollout_that_could_not_run_is_no_answer(runs: Path, tab: Any) -> None:
    """The model server failed sub-1's only call: "could not run", no reward, in no mean."""
    from playwright.sync_api import expect

    with view_server(runs) as url:
        t = tab()
        page = t.page
        page.goto(url)
        row = page.locator("tr.run-row[data-run=arith-down]")
        expect(row).to_contain_text("incomplete")
        expect(row).to_contain_text("1 could not run")
        page.goto(url + "run/arith-down")
        expect(page.locator(".banner.warn")).to_contain_text("1 could not run")
        expect(page.locator(".banner.warn")).to_contain_text("agentkit run --resume")
        # the one wrong answer of the others: the mean is over the rollouts that ran
        expect(page.locator(".stat", has_text="Mean reward")).to_contain_text(
            f"{(planned_arithmetic() - 2) / (planned_arithmetic() - 1):.3f}"
        )
        down = page.locator("tr.rollout-row", has_text="arithmetic:sub-1")
        expect(down.locator(".badge")).to_have_text("could not run")
        expect(down.locator("td.reward")).to_have_text("–")
        expect(down).to_contain_text("model_server_error")
        t.shot("run-could-not-run", docs=True)
        page.locator("label.check", has_text="did not pass").click()
        expect(page.locator("tr.rollout-row")).to_have_count(1)
        expect(page.locator("tr.rollout-row")).to_contain_text("arithmetic:mul-1")
        page.locator("label.check", has_text="did not pass").click()
        page.locator("label.check", has_text="could not run").click()
        expect(page.locator("tr.rollout-row")).to_have_count(1)
        assert "could_not_run=1" in page.url
        page.locator("tr.rollout-row a").click()
        expect(page.locator(".why h2")).to_have_text("Why it could not run")
        expect(page.locator(".why")).to_contain_text("model_server_error")
        expect(page.locator(".run-head .big-reward")).to_have_text("reward –")
        expect(page.locator(".run-head .badge")).to_have_text("could not run")
        t.shot("rollout-could-not-run", docs=True)
        page.goto(url + "run/arith-down?tab=tasks")
        cell = page.locator("tr.task-row[data-task='arithmetic:sub-1'] .cell")
        expect(cell).to_have_class("cell infra")
        expect(cell).to_have_attribute("title", re.compile("could not run"))


def _start_hanging_run(folder: Path, server: ScriptedModelServer) -> subprocess.Popen[str]:
    args = arithmetic_run_args(folder / "live", server.base_url, "--max-retries", "0")
    return subprocess.Popen(
        [sys.executable, "-m", "agentkit", *args],
        cwd=ROOT,
        env=cli_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _wait_until_only_the_hung_rollout_runs(
    run_dir: Path, proc: subprocess.Popen[str], planned: int | None = None
) -> str:
    """Poll the run directory until every rollout but the hung one finished; its id."""
    planned = planned or planned_arithmetic()
    while True:
        if proc.poll() is not None:
            raise AssertionError(f"agentkit run ended early: {proc.communicate()}")
        if (run_dir / "manifest.json").exists():
            run = agentkit.runs.open(run_dir)
            live = run.live_rollouts()
            if len(run) == planned - 1 and live and live[0].events >= 2:
                return live[0].rollout_id
        time.sleep(0.05)


def test_a_run_in_progress_updates_without_reload(tmp_path: Path, tab: Any) -> None:
    from playwright.sync_api import expect

    folder = tmp_path / "runs"
    folder.mkdir()
    planned = planned_arithmetic()
    server = ScriptedModelServer(arithmetic_script(hang="apples")).start()
    proc: subprocess.Popen[str] | None = None
    try:
        with view_server(folder) as url:
            runs_tab = tab()
            runs_tab.page.goto(url)
            expect(runs_tab.page.locator("table.runs")).to_contain_text("No runs here yet")
            runs_tab.keep()
            proc = _start_hanging_run(folder, server)
            expect(runs_tab.page.locator("tr.run-row[data-run=live]")).to_contain_text("running")
            rid = _wait_until_only_the_hung_rollout_runs(folder / "live", proc)
            run_tab = tab()
            run_tab.page.goto(url + "run/live")
            expect(run_tab.page.locator("tr.rollout-row.running")).to_have_count(1)
            expect(run_tab.page.locator("tr.rollout-row:not(.running)")).to_have_count(planned - 1)
            expect(run_tab.page.locator(".banner.live")).to_be_visible()
            run_tab.keep()
            run_tab.shot("live-run", docs=True)
            live_tab = tab()
            live_tab.page.goto(url + f"run/live/rollout/{rid}")
            expect(live_tab.page.locator(".badge.live")).to_contain_text("in progress")
            expect(live_tab.page.locator("#timeline")).to_contain_text("model.request")
            expect(live_tab.page.locator("#timeline")).not_to_contain_text("harness.end")
            live_tab.keep()
            live_tab.shot("live-rollout", docs=True)
            server.stop()  # the hung request fails: the rollout ends, and with it the run
            expect(live_tab.page.locator("#timeline")).to_contain_text("harness.end")
            expect(live_tab.page.locator(".why")).to_contain_text("model_connection")
            expect(live_tab.page.locator(".why h2")).to_have_text("Why it could not run")
            expect(live_tab.page.locator(".banner.ok")).to_contain_text("just finished")
            live_tab.shot("live-rollout-finished")
            expect(run_tab.page.locator("tr.rollout-row")).to_have_count(planned)
            # that rollout could not run (the server went away): the run ended incomplete
            expect(run_tab.page.locator(".banner.warn")).to_contain_text("1 could not run")
            expect(runs_tab.page.locator("tr.run-row[data-run=live]")).to_contain_text("incomplete")
            run_tab.shot("live-run-finished")
            assert runs_tab.kept() and run_tab.kept() and live_tab.kept()
            assert proc.wait(timeout=120) == 0
    finally:
        server.stop()
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.communicate()


TWO_TURNS = [
    {"id": "quick", "input": "What is 2 + 3? Answer with the number only.", "target": "5"},
    {
        "id": "two-turns",
        "input": [
            {"role": "user", "content": "First: what is 10 - 4?"},
            {"role": "user", "content": "Then: what is 6 * 7?"},
        ],
        "target": "42",
    },
]


def test_an_open_rollout_gains_events_then_its_run_is_interrupted(tmp_path: Path, tab: Any) -> None:
    """A rollout's page follows its events while it runs; a stopped run says so.

    The second task's first call hangs. The model server is then stopped (the
    call fails: the rollout retries) and started again on the same port
    answering that call and hanging on the next one, so the open page must
    show the retry and the new calls while the rollout still runs. Then the
    run gets SIGTERM.
    """
    from playwright.sync_api import expect

    folder = tmp_path / "runs"
    folder.mkdir()
    tasks = tmp_path / "two-turns.jsonl"
    tasks.write_text("".join(json.dumps(t) + "\n" for t in TWO_TURNS))
    first = {
        "rules": [{"match": {"last_user_contains": "10 - 4"}, "reply": {"fail": "hang"}}],
        "default": {"content": "5"},
    }
    second = {
        "rules": [
            {"match": {"last_user_contains": "6 * 7"}, "reply": {"fail": "hang"}},
            {"match": {"last_user_contains": "10 - 4"}, "reply": {"content": "6"}},
        ]
    }
    server = ScriptedModelServer(first).start()
    servers = [server]
    run_dir = folder / "live"
    args = arithmetic_run_args(run_dir, server.base_url, "--max-retries", "8")
    args[1] = f"jsonl:{tasks}"
    proc = subprocess.Popen(
        [sys.executable, "-m", "agentkit", *args],
        cwd=ROOT,
        env=cli_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        with view_server(folder) as url:
            rid = _wait_until_only_the_hung_rollout_runs(run_dir, proc, planned=2)
            run_tab = tab()
            run_tab.page.goto(url + "run/live")
            expect(run_tab.page.locator(".banner.live")).to_be_visible()
            expect(run_tab.page.locator("tr.rollout-row.running")).to_have_count(1)
            run_tab.keep()
            live_tab = tab()
            live_tab.page.goto(url + f"run/live/rollout/{rid}")
            expect(live_tab.page.locator(".badge.live")).to_be_visible()
            expect(live_tab.page.locator("#timeline tr.event")).to_have_count(3)
            live_tab.keep()
            server.stop()  # the hung call fails; the rollout backs off and retries
            servers.append(ScriptedModelServer(second, port=server.port).start())
            timeline = live_tab.page.locator("#timeline")
            expect(timeline).to_contain_text("rollout.retry")
            expect(timeline).to_contain_text("model_connection")
            expect(timeline.locator("tr.event", has_text="model.response")).to_have_count(1)
            expect(timeline.locator("tr.event", has_text="model.request")).to_have_count(3)
            # still running, on a later attempt
            expect(live_tab.page.locator("#progress-badge")).to_have_text(
                re.compile(r"attempt [2-9]")
            )
            live_tab.shot("live-rollout-retried", docs=True)
            proc.send_signal(signal.SIGTERM)
            proc.communicate(timeout=120)
            expect(run_tab.page.locator(".banner.warn")).to_contain_text("interrupted")
            expect(run_tab.page.locator(".banner.warn")).to_contain_text("agentkit run --resume")
            expect(run_tab.page.locator("tr.rollout-row.interrupted")).to_have_count(1)
            expect(live_tab.page.locator(".banner.warn")).to_contain_text("no longer running")
            assert run_tab.kept() and live_tab.kept()
            run_tab.shot("interrupted-run")
            live_tab.shot("interrupted-rollout")
    finally:
        for s in servers:
            s.stop()
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def test_a_crafted_path_is_refused_in_the_browser(runs: Path, tab: Any) -> None:
    with view_server(runs) as url:
        t = tab(http_errors=True)
        for path in (
            "files/arith/..%2F..%2F..%2Fetc%2Fpasswd",
            "files/arith/%2Fetc%2Fpasswd",
            "files/..%2Farith/manifest.json",
        ):
            response = t.page.goto(url + path)
            assert response is not None and response.status in (403, 404), path
            assert "root:" not in t.page.content()
        response = t.page.goto(url + "files/arith/manifest.json")
        assert response is not None and response.status == 200
        assert response.headers["content-type"].startswith("text/plain")
        assert "sandbox" in response.headers["content-security-policy"]


def test_a_run_with_a_corrupt_line_is_named_and_the_others_shown(
    runs: Path, tab: Any, tmp_path: Path
) -> None:
    """One run's rollouts.jsonl has a line that is not JSON: the runs page still lists
    the other runs, and names the broken one with its file and line, linked to its page,
    which says the same."""
    from playwright.sync_api import expect

    folder = tmp_path / "runs"
    folder.mkdir()
    for name in ("arith-good", "arith"):
        shutil.copytree(runs / name, folder / name)
    shutil.copytree(runs / "arith-good", folder / "damaged")
    rollouts = folder / "damaged" / "rollouts.jsonl"
    lines = rollouts.read_text().split("\n")
    lines[2] = '{"not json'
    rollouts.write_text("\n".join(lines))
    error = f"{rollouts}: line 3 is not valid JSON"
    with view_server(folder) as url:
        t = tab(http_errors=True)  # the damaged run's page answers 422 on purpose
        page = t.page
        page.goto(url)
        expect(page.locator("tr.run-row")).to_have_count(2)
        expect(page.locator("tr.run-row[data-run=arith-good]")).to_be_visible()
        broken = page.locator("p.broken[data-name=damaged]")
        expect(broken).to_contain_text(f"damaged: {error}")
        t.shot("runs-with-a-broken-run")
        broken.locator("a").click()
        expect(page.locator(".error-card")).to_contain_text("Cannot show this")
        expect(page.locator(".error-card")).to_contain_text(error)
        t.shot("broken-run-page")


# -- statistics, charts and jobs ----------------------------------------------------

#: The chart on a canvas as Chart.js holds it: labels and each dataset's type, label, data.
CHART_DATA = """(key) => {
  const canvas = document.querySelector(`canvas[data-chart="${key}"]`);
  const chart = canvas && window.Chart && Chart.getChart(canvas);
  if (!chart) return null;
  return {
    labels: chart.data.labels,
    datasets: chart.data.datasets.map(
      (d) => ({ type: d.type || chart.config.type, label: d.label, data: d.data })
    ),
  };
}"""
#: How many pixels of a canvas are painted (a chart that was drawn has many).
PAINTED = """(key) => {
  const canvas = document.querySelector(`canvas[data-chart="${key}"]`);
  const pixels = canvas.getContext("2d").getImageData(0, 0, canvas.width, canvas.height).data;
  let painted = 0;
  for (let i = 3; i < pixels.length; i += 4) if (pixels[i]) painted++;
  return painted;
}"""


def chart(page: Any, key: str) -> Any:
    """The chart drawn on ``canvas[data-chart=KEY]`` once Chart.js has made it."""
    page.wait_for_function(f"(key) => ({CHART_DATA})(key) !== null", arg=key)
    data = page.evaluate(CHART_DATA, key)
    assert page.evaluate(PAINTED, key) > 500, f"the {key} chart is blank"
    return data


@pytest.fixture(scope="module")
def example(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """docs/statistics.md's runs A, B, C, and a job of models a, b, c (and d, not
    started) on the same tasks, in one folder (tests/_stats_runs.py)."""
    folder = tmp_path_factory.mktemp("example")
    make_example_runs(folder)
    job = make_example_job(folder)
    for name in ("A", "B", "C"):
        (folder / "runs" / name).rename(job.parent / name)
    return job.parent


def test_compare_runs_draws_intervals_and_the_paired_statistics(example: Path, tab: Any) -> None:
    """The worked example of docs/statistics.md, drawn: A, B and C against B."""
    from playwright.sync_api import expect

    with view_server(example) as url:
        t = tab()
        page = t.page
        page.goto(url)
        for name in ("A", "B", "C"):
            page.locator(f"tr.run-row[data-run={name}] input").check()
        page.get_by_role("button", name="Compare 3 runs").click()
        expect(page.locator("h1")).to_have_text("Compare 3 runs")
        assert page.url.endswith("/compare/A/B/C")
        expect(page.locator(".banner.warn")).to_contain_text("different tasksets")
        board = chart(page, "leaderboard")
        assert board["labels"] == ["A", "B", "C"]  # by mean reward
        interval, means = board["datasets"]
        assert interval["type"] == "bar" and means["type"] == "scatter"
        assert [round(x, 3) for x in interval["data"][0]] == [-0.137, 1.387]
        assert [round(x, 3) for x in interval["data"][1]] == [-0.055, 1.166]
        assert [round(m["x"], 4) for m in means["data"]] == [0.625, 0.5556, 0.5]
        expect(page.locator("tr.board-row[data-run=B] td.ci")).to_have_text("[-0.055, 1.166]")
        page.locator("label.baseline select").select_option("B")
        a_row = page.locator("tr.pair-row[data-run=A]")
        expect(a_row).to_be_visible()  # the page against B
        expect(page.locator("label.baseline select")).to_have_value("B")
        assert "baseline=B" in page.url
        paired = chart(page, "paired")
        assert paired["labels"] == ["A − B", "C − B"]
        assert [round(x, 3) for x in paired["datasets"][0]["data"][0]] == [-0.209, 0.709]
        assert paired["datasets"][0]["data"][1] is None  # C shares no task with B
        expect(a_row.locator("td.p-value")).to_have_text("0.18")
        expect(a_row.locator("td.wtl")).to_have_text("2 / 2 / 0")
        expect(a_row).to_contain_text("+0.250")
        a_row.locator("summary").click()
        expect(a_row.locator("tr.top-task")).to_have_count(2)
        # the heat map: every task of every run, a cell linking to its rollouts
        expect(page.locator("tr.heat-row")).to_have_count(7)
        cell = page.locator("tr.heat-row[data-task='example:t3'] a.heat[data-run=B]")
        expect(cell).to_have_text("0.00")
        reward = chart(page, "reward")
        assert reward["labels"] == ["0", "1"]
        assert [d["label"] for d in reward["datasets"]] == ["A", "B", "C"]
        assert [round(x, 1) for x in reward["datasets"][1]["data"]] == [44.4, 55.6]  # 4 and 5 of 9
        duration = chart(page, "duration_s")
        assert duration["labels"] == ["A", "B", "C"]  # box plots, a row per run
        whiskers, box, medians, _ = duration["datasets"]
        assert (box["label"], medians["label"]) == ("25th–75th percentile", "median")
        for (p5, p95), (q1, q3), m in zip(
            whiskers["data"], box["data"], medians["data"], strict=True
        ):
            assert p5 <= q1 <= m["x"] <= q3 <= p95
        page.locator(".chart-card[data-metric=duration_s] button").click()
        expect(page.locator("canvas[data-chart=duration_s]")).to_have_attribute(
            "data-kind", "histogram"
        )
        assert len(chart(page, "duration_s")["datasets"]) == 3
        cell.click()
        expect(page.locator("tr.rollout-row")).to_have_count(2)
        assert page.url.endswith("/run/B?task=example%3At3")
        # which of t3's two rollouts met the server's one failure is a race: both orders
        badges = page.locator("tr.rollout-row .badge")
        expect(badges).to_have_count(2)
        assert sorted(badges.all_inner_texts()) == ["could not run", "not passed"]
        assert any(u.endswith("/static/vendor/chart.umd.min.js") for u in t.requested)


def test_a_run_draws_its_distributions(example: Path, tab: Any) -> None:
    from playwright.sync_api import expect

    with view_server(example) as url:
        t = tab()
        page = t.page
        page.goto(url + "run/B")
        page.locator(".tabs a", has_text="Charts").click()
        assert page.url.endswith("/run/B?tab=charts")
        reward = chart(page, "reward")
        assert reward["labels"] == ["0", "1"] and len(reward["datasets"]) == 1
        assert [round(x, 1) for x in reward["datasets"][0]["data"]] == [44.4, 55.6]
        tokens = chart(page, "tokens")
        assert tokens["labels"][0] == "0" and sum(tokens["datasets"][0]["data"]) == 100
        chart(page, "duration_s")
        expect(page.locator(".chart-card[data-metric=reward]")).to_contain_text("9 scored rollouts")
        expect(page.locator(".chart-card[data-metric=cost]")).to_contain_text(
            "No rollout has a price"
        )
        t.shot("run-charts")


def test_a_job_page_ranks_its_cells_and_links_to_their_rollouts(example: Path, tab: Any) -> None:
    from playwright.sync_api import expect

    with view_server(example) as url:
        t = tab()
        page = t.page
        page.goto(url)
        job_row = page.locator("tr.job-row[data-job=sweep]")
        expect(job_row).to_contain_text("3 of 4 cells")
        expect(job_row).to_contain_text("best: example.chat.b")
        expect(job_row).to_contain_text("30/30")
        cells = page.locator("tr.cell-row[data-job=sweep]")
        expect(cells).to_have_count(3)  # the only job: its cells are shown
        expect(page.locator("tr.run-row:not(.cell-row)")).to_have_count(3)
        t.shot("runs-jobs")
        job_row.locator("button.fold").click()
        expect(cells).to_have_count(0)
        job_row.locator("button.fold").click()
        expect(cells).to_have_count(3)
        job_row.get_by_role("link", name="sweep").click()
        expect(page.locator("h1")).to_have_text("sweep")
        assert page.url.endswith("/job/sweep")
        board = chart(page, "leaderboard")
        assert board["labels"] == ["example.chat.b", "example.chat.a", "example.chat.c"]
        assert [round(m["x"], 4) for m in board["datasets"][1]["data"]] == [0.5556, 0.5, 0.2]
        expect(page.locator("tr.board-row").first.locator("td").nth(2)).to_have_text("b")
        expect(page.locator("tr.job-cell[data-cell='example.chat.d']")).to_contain_text(
            "not started"
        )
        heat = page.locator("tr.heat-row a.heat")
        expect(heat).to_have_count(15)  # 5 tasks × 3 cells
        expect(page.locator("tr.heat-row[data-task='example:t5'] a.heat")).to_have_text(
            ["0.00", "1.00", "0.00"]
        )
        reward = chart(page, "reward")
        assert [d["label"] for d in reward["datasets"]] == list(JOB_CELLS)
        assert [round(x) for x in reward["datasets"][2]["data"]] == [80, 20]  # c: t1 right
        chart(page, "tokens")
        t.shot("job")
        page.locator("select[name=order]").select_option("spread")
        # t4 and t5 differ by 1 between cells, t1 and t2 by 0.5, t3 not at all
        order = [f"example:t{i}" for i in (4, 5, 1, 2, 3)]
        for i, task in enumerate(order):
            expect(page.locator("tr.heat-row").nth(i)).to_have_attribute("data-task", task)
        assert "order=spread" in page.url
        # a cell of the heat map: that task's rollouts in that cell's run
        page.locator(
            "tr.heat-row[data-task='example:t3'] a.heat[data-run='sweep~example.chat.b']"
        ).click()
        expect(page.locator("tr.rollout-row")).to_have_count(2)
        assert page.url.endswith("/run/sweep~example.chat.b?task=example%3At3")
        expect(page.locator("#crumbs")).to_contain_text("sweep")
        expect(page.locator("#crumbs")).to_contain_text("example.chat.b")
        expect(page.locator("h1")).to_have_text("example.chat.b")
        page.locator("tr.rollout-row:not(.infra) a").first.click()
        expect(page.locator("#transcript .msg.user")).to_contain_text("This is task 3.")
        page.go_back()
        expect(page.locator("tr.rollout-row")).to_have_count(2)
        page.go_back()
        expect(page.locator("h1")).to_have_text("sweep")
        page.get_by_role("link", name="Compare the 3 cells, each against the best").click()
        expect(page.locator("h1")).to_have_text("Compare 3 runs")
        expect(page.locator("label.baseline select")).to_have_value("sweep~example.chat.b")
        expect(page.locator("tr.pair-row")).to_have_count(2)
        expect(page.locator("#crumbs")).to_contain_text("sweep")  # the cells of one job...
        paired = chart(page, "paired")  # ... are called by their names
        assert paired["labels"] == [
            "example.chat.a − example.chat.b",
            "example.chat.c − example.chat.b",
        ]
        t.shot("compare-runs")
