"""``agentkit view`` over HTTP: the JSON API on real runs, what it refuses, what it never does."""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from _stats_runs import JOB_CELLS, make_example_job, make_example_runs
from _view import (
    ROOT,
    arithmetic_run_args,
    arithmetic_script,
    cli_env,
    get_json,
    planned_arithmetic,
    raw_get,
    run_agentkit,
    tree_state,
    view_server,
)

import agentkit.runs
from agentkit.testing.model_server import ScriptedModelServer

_spec = importlib.util.spec_from_file_location("bigrun", ROOT / "bench" / "_bigrun.py")
assert _spec is not None and _spec.loader is not None
bigrun = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bigrun)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two real runs of the arithmetic set (one answer wrong in the second), in one folder."""
    folder = tmp_path_factory.mktemp("runs")
    with ScriptedModelServer(arithmetic_script()) as good:
        done = run_agentkit(*arithmetic_run_args(folder / "good", good.base_url))
        assert done.returncode == 0, done.stderr
    with ScriptedModelServer(arithmetic_script(wrong="6 * 7")) as bad:
        done = run_agentkit(*arithmetic_run_args(folder / "bad", bad.base_url, "-n", "2"))
        assert done.returncode == 0, done.stderr
    return folder


def test_the_api_serves_runs_rollouts_and_a_comparison(runs: Path) -> None:
    planned = planned_arithmetic()
    with view_server(runs) as url:
        listing = get_json(url, "/api/runs")
        by_name = {r["name"]: r for r in listing["runs"]}
        assert set(by_name) == {"good", "bad"}
        assert by_name["good"]["state"] == "complete"
        assert by_name["good"]["finished"] == by_name["good"]["planned"] == planned
        assert by_name["good"]["mean_reward"] == 1.0 and by_name["good"]["pass_at_k"] == {"1": 1.0}
        assert by_name["bad"]["planned"] == 2 * planned and by_name["bad"]["pass_at_k"]["2"] < 1
        run = get_json(url, "/api/run/bad")
        assert run["harness"] == "chat" and run["rollouts_per_task"] == 2
        assert [m["name"] for m in run["metrics"]] == ["core.correct"]
        assert run["rubric"]["metrics"][0]["name"] == "core.correct"
        assert run["options"]["context"]["model"] == "scripted"
        page = get_json(url, "/api/run/bad/rollouts?limit=5")
        assert page["total"] == 2 * planned and len(page["rows"]) == 5
        assert [r["task_id"] for r in page["rows"]][:2] == ["arithmetic:add-1"] * 2
        failed = get_json(url, "/api/run/bad/rollouts?failed=1")
        assert {r["task_id"] for r in failed["rows"]} == {"arithmetic:mul-1"}
        assert failed["rows"][0]["reason"] == "scored 0"
        low = get_json(url, "/api/run/bad/rollouts?metric=core.correct&op=lt&value=1")
        assert low["total"] == 2
        worst = get_json(url, "/api/run/bad/rollouts?sort=reward&limit=1")
        assert worst["rows"][0]["task_id"] == "arithmetic:mul-1"
        best = get_json(url, "/api/run/bad/rollouts?sort=reward&desc=1&limit=1")
        assert best["rows"][0]["reward"] == 1.0
        tasks = get_json(url, "/api/run/bad/tasks?task=mul-1")
        (mul,) = tasks["tasks"]
        assert [c["passed"] for c in mul["cells"]] == [False, False]
        rid = failed["rows"][0]["rollout_id"]
        rollout = get_json(url, f"/api/run/bad/rollout/{rid}")
        assert rollout["record"]["messages"][-1] == {"role": "assistant", "content": "41"}
        assert rollout["task"]["target"] == "42"
        assert [e["type"] for e in rollout["events"]][:2] == ["harness.start", "model.request"]
        assert rollout["ok"] is True and rollout["reason"] == "scored 0"
        compare = get_json(url, "/api/compare/good/bad")
        assert compare["same_taskset"] is True
        assert compare["counts"]["a_only"] == 1
        (only_good,) = [t for t in compare["tasks"] if t["verdict"] == "a_only"]
        assert only_good["task_id"] == "arithmetic:mul-1"
        status, body = raw_get(url, "/api/run/nope")
        assert status == 404 and b"no run" in body
        status, _ = raw_get(url, f"/api/run/bad/rollout/{rid[:5]}")
        assert status == 404  # a prefix is not a deep link
        status, page_html = raw_get(url, f"/run/bad/rollout/{rid}")
        assert status == 200 and b"/static/app.js" in page_html  # deep links load the page


def test_paths_leading_outside_are_refused(runs: Path, tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    secret = tmp_path / "secret.txt"
    secret.write_text("TOP-SECRET-CONTENT")
    run = root / "r"
    subprocess.run(["cp", "-a", str(runs / "bad"), str(run)], check=True)
    rid = json.loads((run / "rollouts.jsonl").read_text().splitlines()[0])["rollout_id"]
    kept = run / "artifacts" / rid
    kept.mkdir(parents=True)
    (kept / "notes.txt").write_text("kept file")
    (kept / "escape").symlink_to(secret)
    (kept / "up").symlink_to(tmp_path)
    (root / "elsewhere").symlink_to(runs / "good", target_is_directory=True)
    with view_server(root) as url:
        assert [r["name"] for r in get_json(url, "/api/runs")["runs"]] == ["r"]
        ok, body = raw_get(url, f"/files/r/artifacts/{rid}/notes.txt")
        assert (ok, body) == (200, b"kept file")
        for path in (
            "/files/r/../../secret.txt",
            "/files/r/%2e%2e/%2e%2e/secret.txt",
            f"/files/r/artifacts/{rid}/escape",
            f"/files/r/artifacts/{rid}/up/secret.txt",
            f"/files/r/artifacts/{rid}/..%2f..%2f..%2fmanifest.json",
            "/files/r//etc/passwd",
            "/files/r/%2fetc%2fpasswd",
            "/files/elsewhere/manifest.json",
            "/files/../secret.txt",
            "/api/run/..%2fr",
            "/api/run/elsewhere",
            "/api/run/r/rollout/..%2f..%2fmanifest",
        ):
            status, body = raw_get(url, path)
            assert status in (400, 403, 404), (path, status, body[:200])
            assert b"TOP-SECRET" not in body and b"root:" not in body, path
        status, _ = raw_get(url, "/files/r/manifest.json", {"Host": "attacker.example:80"})
        assert status == 421  # another name for this address (DNS rebinding) is refused
        files = get_json(url, f"/api/run/r/rollout/{rid}")["files"]
        links = {f["path"]: f["symlink"] for f in files}
        assert (
            links[f"artifacts/{rid}/escape"] is True
            and links[f"artifacts/{rid}/notes.txt"] is False
        )


def test_it_never_writes_into_a_run(runs: Path) -> None:
    before = {name: tree_state(runs / name) for name in ("good", "bad")}
    with view_server(runs) as url:
        for name in ("good", "bad"):
            get_json(url, f"/api/run/{name}")
            for row in get_json(url, f"/api/run/{name}/rollouts?limit=500")["rows"]:
                get_json(url, f"/api/run/{name}/rollout/{row['rollout_id']}")
            get_json(url, f"/api/run/{name}/tasks")
        get_json(url, "/api/compare/good/bad")
    assert {name: tree_state(runs / name) for name in ("good", "bad")} == before


def test_a_large_run_reads_a_page_at_a_time(runs: Path, tmp_path: Path) -> None:
    big = bigrun.make_big_run(runs / "bad", tmp_path / "big", 10_000)
    with view_server(big) as url:
        (listing,) = get_json(url, "/api/runs")["runs"]
        assert (listing["finished"], listing["planned"], listing["state"]) == (
            10_000,
            10_000,
            "complete",
        )
        last = get_json(url, f"/api/run/{listing['name']}/rollouts?offset=9990&limit=50")
        assert last["total"] == 10_000 and len(last["rows"]) == 10
        assert (
            last["rows"][-1]["task_id"] == "big:t00999" and last["rows"][-1]["rollout_index"] == 9
        )
        failed = get_json(url, f"/api/run/{listing['name']}/rollouts?failed=1&limit=10")
        # bench/_bigrun.py scores 0 where (task * 7 + index) % 3 == 0: 3334 of the 10 000,
        # the first ten these.
        assert failed["total"] == 3334
        assert [(r["task_id"], r["rollout_index"]) for r in failed["rows"]] == [
            ("big:t00000", 0), ("big:t00000", 3), ("big:t00000", 6), ("big:t00000", 9),
            ("big:t00001", 2), ("big:t00001", 5), ("big:t00001", 8),
            ("big:t00002", 1), ("big:t00002", 4), ("big:t00002", 7),
        ]  # fmt: skip
        tasks = get_json(url, f"/api/run/{listing['name']}/tasks?offset=990")
        assert tasks["total"] == 1000 and len(tasks["tasks"]) == 10


def test_without_the_web_stack_it_says_what_to_install(runs: Path, tmp_path: Path) -> None:
    blocker = tmp_path / "block" / "aiohttp"
    blocker.mkdir(parents=True)
    (blocker / "__init__.py").write_text("raise ImportError('No module named aiohttp')\n")
    env = cli_env()
    env["PYTHONPATH"] = os.pathsep.join([str(blocker.parent), env.get("PYTHONPATH", "")])
    done = subprocess.run(
        [sys.executable, "-m", "agentkit", "view", str(runs), "--no-open"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "pip install 'agentkit[view]'" in done.stderr and "Traceback" not in done.stderr


def test_import_agentkit_and_help_do_not_load_the_web_stack() -> None:
    probe = (
        "import sys, agentkit, agentkit.runs\n"
        "from agentkit.cli import main\n"
        "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
        "print([m for m in ('aiohttp', 'agentkit.view._server') if m in sys.modules])"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], env=cli_env(), capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert "view" in done.stdout  # the command is listed
    assert done.stdout.strip().splitlines()[-1] == "[]"


def test_cli_says_what_is_wrong(runs: Path, tmp_path: Path) -> None:
    missing = run_agentkit("view", str(tmp_path / "nope"), "--no-open", timeout=60)
    assert missing.returncode == 2 and "no such directory" in missing.stderr
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        taken = run_agentkit("view", str(runs), "--no-open", "--port", str(port), timeout=60)
    assert taken.returncode == 2 and f"cannot listen on 127.0.0.1:{port}" in taken.stderr
    assert "Traceback" not in taken.stderr
    with view_server(runs, "--host", "0.0.0.0") as url:
        assert url.startswith("http://0.0.0.0:")
        port = int(url.rsplit(":", 1)[1].strip("/"))
        status, _ = raw_get(f"http://127.0.0.1:{port}/", "/api/runs")
        assert status == 200  # no Host check off loopback: the user chose to share


def test_streams_say_what_changed(runs: Path) -> None:
    with view_server(runs) as url:
        import http.client
        import urllib.parse

        parts = urllib.parse.urlsplit(url)
        conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=60)
        conn.request("GET", "/api/run/good/stream")
        resp = conn.getresponse()
        assert resp.status == 200 and resp.getheader("Content-Type") == "text/event-stream"
        first = _event(resp)
        assert first[0] == "run" and first[1]["state"] == "complete" and first[1]["live"] == []
        conn.close()
        rid = get_json(url, "/api/run/good/rollouts?limit=1")["rows"][0]["rollout_id"]
        conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=60)
        conn.request("GET", f"/api/run/good/rollout/{rid}/stream")
        resp = conn.getresponse()
        assert _event(resp) == ("finished", {"state": "complete"})
        conn.close()


def test_a_run_stream_says_gone_when_the_run_goes(runs: Path, tmp_path: Path) -> None:
    """The run page's stream sends the run, then 'gone' (naming the run) once its directory
    is removed."""
    import http.client
    import shutil
    import urllib.parse

    served = tmp_path / "served"
    shutil.copytree(runs / "good", served / "good")
    with view_server(served) as url:
        parts = urllib.parse.urlsplit(url)
        conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=60)
        conn.request("GET", "/api/run/good/stream")
        resp = conn.getresponse()
        assert _event(resp)[0] == "run"
        shutil.rmtree(served / "good")
        name, data = _event(resp)
        assert name == "gone" and "good" in data["error"], (name, data)
        conn.close()


def test_a_quiet_stream_sends_a_heartbeat_and_never_the_same_state_twice(runs: Path) -> None:
    """Once a run's state is sent, a stream that sees no change sends nothing but its
    heartbeat (a comment, after 15 s): never the same state again, which a page would
    redraw every half second."""
    import http.client
    import urllib.parse

    with view_server(runs) as url:
        parts = urllib.parse.urlsplit(url)
        conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=60)
        conn.request("GET", "/api/run/good/stream")
        resp = conn.getresponse()
        assert _event(resp)[0] == "run"
        line = resp.readline().decode()
        while line == "\n":
            line = resp.readline().decode()
        assert line == ": ping\n", line
        conn.close()


def _event(resp: Any) -> tuple[str, Any]:
    name, data = None, None
    while True:
        line = resp.readline().decode().rstrip("\n")
        if line.startswith("event: "):
            name = line[len("event: ") :]
        elif line.startswith("data: "):
            data = json.loads(line[len("data: ") :])
        elif line == "" and name is not None:
            return name, data


def test_it_opens_the_browser_on_its_url_unless_told_not_to(runs: Path, tmp_path: Path) -> None:
    """The browser Python's webbrowser finds ($BROWSER here: a script noting the URL)."""
    opened = tmp_path / "opened.txt"
    browser = tmp_path / "browser.sh"
    browser.write_text(f'#!/bin/sh\nprintf "%s\\n" "$1" >> {opened}\n')
    browser.chmod(0o755)
    env = {**cli_env(), "BROWSER": str(browser)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "agentkit", "view", str(runs / "good")],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        lines = [proc.stdout.readline().strip() for _ in range(3)]
        assert lines[0] == "agentkit view: run good"
        url, run_url = lines[1], lines[2]
        assert url.startswith("http://127.0.0.1:") and run_url == url + "run/good"
        while not opened.exists() or not opened.read_text().endswith("\n"):
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.05)
        assert opened.read_text().splitlines() == [url]
        assert get_json(url, "/api/runs")["single"] is True
    finally:
        proc.terminate()
        proc.communicate(timeout=30)


@pytest.fixture(scope="module")
def example(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Runs A, B and C of docs/statistics.md's worked example (tests/_stats_runs.py)."""
    folder = tmp_path_factory.mktemp("example")
    make_example_runs(folder)
    return folder / "runs"


def test_compare_n_runs_gives_the_leaderboard_and_each_against_a_baseline(example: Path) -> None:
    """The numbers of docs/statistics.md's worked example, through the viewer's API."""
    with view_server(example) as url:
        doc = get_json(url, "/api/compare/A/B/C?baseline=B")
        assert [r["name"] for r in doc["runs"]] == ["A", "B", "C"]
        assert doc["baseline"] == "B" and doc["same_taskset"] is False
        board = {r["run"]: r for r in doc["leaderboard"]}
        assert [r["run"] for r in doc["leaderboard"]] == ["A", "B", "C"]  # by mean reward
        assert [r["rank"] for r in doc["leaderboard"]] == [1, 2, 3]
        assert board["A"]["mean_reward"] == pytest.approx(0.625)
        assert (board["A"]["ci_low"], board["A"]["ci_high"]) == (
            pytest.approx(-0.137, abs=5e-4),
            pytest.approx(1.387, abs=5e-4),
        )
        assert board["B"]["mean_reward"] == pytest.approx(5 / 9)
        assert (board["B"]["ci_low"], board["B"]["ci_high"]) == (
            pytest.approx(-0.055, abs=5e-4),
            pytest.approx(1.166, abs=5e-4),
        )
        assert (board["B"]["scored"], board["B"]["could_not_run"]) == (9, 1)
        assert board["A"]["pass@2"] == pytest.approx(0.75) and board["B"]["pass@2"] is None
        a_vs_b, c_vs_b = doc["against"]
        assert (a_vs_b["run"], a_vs_b["baseline"]) == ("A", "B")
        d = a_vs_b["difference"]
        assert d["mean"] == pytest.approx(0.25) and d["p_value"] == pytest.approx(0.1817, abs=1e-4)
        assert (d["ci_low"], d["ci_high"]) == (
            pytest.approx(-0.209, abs=5e-4),
            pytest.approx(0.709, abs=5e-4),
        )
        assert (a_vs_b["wins_a"], a_vs_b["ties"], a_vs_b["wins_b"]) == (2, 2, 0)
        assert a_vs_b["shared_tasks"] == 4 and a_vs_b["only_b"] == ["example:t5"]
        assert [t["task_id"] for t in a_vs_b["top"]] == ["example:t1", "example:t2"]
        assert c_vs_b["shared_tasks"] == 0 and c_vs_b["difference"]["mean"] is None
        hm = doc["heatmap"]
        assert hm["runs"] == ["A", "B", "C"]
        assert hm["tasks"][:5] == [f"example:t{i}" for i in range(1, 6)]
        assert hm["tasks"][5:] == ["other:t1", "other:t2"]
        assert hm["mean"][0] == [1.0, 0.5, None] and hm["mean"][4] == [None, 1.0, None]
        assert hm["mean"][2] == [0.0, 0.0, None]
        assert hm["scored"][2] == [2, 1, 0] and hm["rollouts"][2] == [2, 2, 0]  # one could not run
        assert "counts" not in doc  # the per-task verdicts are for two runs
        two = get_json(url, "/api/compare/A/B")
        assert two["baseline"] == "A" and two["against"][0]["difference"]["mean"] == -0.25
        assert two["counts"]["a_only"] == 1 and two["a"]["name"] == "A"
        for bad in ("/api/compare/A", "/api/compare/A/nope", "/api/compare/A/B?baseline=C"):
            status, _ = raw_get(url, bad)
            assert status == 404, bad


def test_charts_bin_the_distributions_of_each_run(example: Path) -> None:
    with view_server(example) as url:
        doc = get_json(url, "/api/charts?runs=A,B")
        assert doc["runs"] == ["A", "B"]
        charts = {c["key"]: c for c in doc["charts"]}
        assert list(charts) == ["reward", "duration_s", "tokens", "cost"]
        reward = charts["reward"]
        assert reward["kind"] == "discrete" and reward["values"] == [0.0, 1.0]
        # A: 5 of 8 right; B: 5 of the 9 that ran (the rollout that could not run has none)
        assert [(s["run"], s["n"], s["counts"]) for s in reward["series"]] == [
            ("A", 8, [3, 5]),
            ("B", 9, [4, 5]),
        ]
        assert reward["series"][1]["summary"]["mean"] == pytest.approx(5 / 9)
        tokens = charts["tokens"]
        assert tokens["kind"] == "bins" and [s["n"] for s in tokens["series"]] == [8, 10]
        for chart in (tokens, charts["duration_s"]):
            edges = chart["edges"]
            assert len(edges) - 1 == len(chart["series"][0]["counts"]) <= 21
            for s in chart["series"]:
                assert sum(s["counts"]) == s["n"]
                q = s["summary"]
                assert edges[0] <= q["min"] <= q["p5"] <= q["q1"] <= q["median"] <= q["q3"]
                assert q["q3"] <= q["p95"] <= q["max"] <= edges[-1]
        # every rollout of A asked the model once: 15 tokens each (11 in; 4 out: the
        # answer's 2 and the 2 of the scripted template's end-of-turn marker)
        a_tokens = tokens["series"][0]
        assert a_tokens["summary"]["min"] == a_tokens["summary"]["max"] == 15.0
        assert a_tokens["counts"][tokens["edges"].index(15.0)] == 8
        assert charts["cost"]["kind"] == "empty"  # the scripted model has no price
        one = get_json(url, "/api/charts?runs=B")
        assert one["charts"][0]["series"][0]["counts"] == [4, 5]
        for bad in ("/api/charts", "/api/charts?runs=nope", "/api/charts?runs=..%2fA"):
            status, _ = raw_get(url, bad)
            assert status == 404, bad


@pytest.fixture(scope="module")
def jobs(tmp_path_factory: pytest.TempPathFactory, runs: Path) -> Path:
    """A folder with a job (tests/_stats_runs.py's: cells of models a, b and c, and one
    not started) beside an ordinary run."""
    folder = tmp_path_factory.mktemp("jobs")
    job = make_example_job(folder)
    subprocess.run(["cp", "-a", str(runs / "good"), str(job.parent / "good")], check=True)
    return job.parent


def test_a_job_has_its_cells_leaderboard_and_heat_map(jobs: Path) -> None:
    with view_server(jobs) as url:
        listing = get_json(url, "/api/runs")
        by_name = {r["name"]: r for r in listing["runs"]}
        assert set(by_name) == {"good"} | {f"sweep~{c}" for c in JOB_CELLS}
        cell_b = by_name["sweep~example.chat.b"]
        assert (cell_b["job"], cell_b["cell"]) == ("sweep", "example.chat.b")
        assert by_name["good"]["job"] is None
        (job,) = listing["jobs"]
        assert (job["name"], job["cells"], job["started"], job["state"]) == (
            "sweep",
            4,
            3,
            "incomplete",
        )
        assert (job["planned"], job["finished"], job["infra_errors"]) == (30, 30, 1)
        assert job["best"] == {
            "run": "sweep~example.chat.b",
            "cell": "example.chat.b",
            "mean_reward": pytest.approx(5 / 9),
        }
        doc = get_json(url, "/api/job/sweep")
        assert [(c["name"], c["run"], c["state"]) for c in doc["cell_list"]] == [
            ("example.chat.a", "sweep~example.chat.a", "complete"),
            ("example.chat.b", "sweep~example.chat.b", "incomplete"),
            ("example.chat.c", "sweep~example.chat.c", "complete"),
            ("example.chat.d", None, "not started"),
        ]
        assert doc["axes"]["model"] == ["a", "b", "c", "d"]
        # the job page reads its settled cells' summaries only: the same as their run pages
        shown = ("state", "finished", "planned", "errors", "infra_errors", "mean_reward")
        shown += ("pass_at_k", "cost", "tokens", "running", "job", "cell")
        for c in doc["cell_list"][:3]:
            run = get_json(url, f"/api/run/{c['run']}")
            assert {k: c["listing"][k] for k in shown} == {k: run[k] for k in shown}
        board = doc["leaderboard"]
        assert [(r["label"], r["rank"]) for r in board] == [
            ("example.chat.b", 1),
            ("example.chat.a", 2),
            ("example.chat.c", 3),
        ]
        assert board[0]["axes"] == {"taskset": "example", "harness": "chat", "model": "b"}
        # cell b is run B of docs/statistics.md: the same rollouts, the same interval
        assert (board[0]["ci_low"], board[0]["ci_high"]) == (
            pytest.approx(-0.055, abs=5e-4),
            pytest.approx(1.166, abs=5e-4),
        )
        hm = doc["heatmap"]
        assert hm["runs"] == [f"sweep~{c}" for c in JOB_CELLS]
        assert hm["tasks"] == [f"example:t{i}" for i in range(1, 6)]
        assert hm["mean"] == [
            [1.0, 0.5, 1.0],
            [0.5, 0.0, 0.0],
            [0.0, 0.0, 0.0],
            [1.0, 1.0, 0.0],
            [0.0, 1.0, 0.0],
        ]
        assert doc["labels"]["sweep~example.chat.c"] == "example.chat.c"
        cells = get_json(url, "/api/compare/sweep~example.chat.a/sweep~example.chat.b")
        assert cells["labels"] == {f"sweep~{c}": c for c in list(JOB_CELLS)[:2]}
        assert [r["label"] for r in cells["leaderboard"]] == ["example.chat.b", "example.chat.a"]
        mixed = get_json(url, "/api/compare/good/sweep~example.chat.a")
        assert mixed["labels"] == {"good": "good", "sweep~example.chat.a": "sweep › example.chat.a"}
        # a cell is a run like any other: its page, rollouts, files and charts
        run = get_json(url, "/api/run/sweep~example.chat.b")
        assert (run["job"], run["cell"], run["infra_errors"]) == ("sweep", "example.chat.b", 1)
        page = get_json(url, "/api/run/sweep~example.chat.b/rollouts?task=example:t3")
        # which of t3's two rollouts met the server's one failure is a race: either
        assert sorted(r["infrastructure"] for r in page["rows"]) == [False, True]
        rid = page["rows"][1]["rollout_id"]
        assert get_json(url, f"/api/run/sweep~example.chat.b/rollout/{rid}")["task_id"] == (
            "example:t3"
        )
        status, _ = raw_get(url, "/files/sweep~example.chat.b/manifest.json")
        assert status == 200
        charts = get_json(url, "/api/charts?runs=sweep~example.chat.a,sweep~example.chat.b")
        assert [s["counts"] for s in charts["charts"][0]["series"]] == [[5, 5], [4, 5]]
        for bad in (
            "/api/job/nope",
            "/api/job/good",
            "/api/run/sweep~example.chat.d",
            "/api/run/sweep~nope",
            "/api/run/good~x",
            "/api/run/sweep~example.chat.a~x",
        ):
            status, _ = raw_get(url, bad)
            assert status == 404, bad


def test_a_job_directory_served_alone(jobs: Path, tmp_path: Path) -> None:
    """``agentkit view JOBDIR``: the cells are its runs (by their names), and it says so."""
    job = tmp_path / "sweep"
    subprocess.run(["cp", "-a", str(jobs / "sweep"), str(job)], check=True)
    (job / "cells" / "example.chat.c" / "summary.json").unlink()  # killed before its end
    proc = subprocess.Popen(
        [sys.executable, "-m", "agentkit", "view", str(job), "--no-open"],
        env=cli_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        lines = [proc.stdout.readline().strip() for _ in range(3)]
        assert lines[0] == "agentkit view: job sweep (3 cells started)"
        url, job_url = lines[1], lines[2]
        assert job_url == url + "job/sweep"
        # the job's page first, as its printed URL opens it: a cell without its summary
        # is read from its rollouts (no other page has read them yet), the same numbers
        doc = get_json(url, "/api/job/sweep")
        assert [c["run"] for c in doc["cell_list"]] == [*JOB_CELLS, None]
        assert doc["cell_list"][3]["state"] == "not started"
        listing_c = doc["cell_list"][2]["listing"]
        assert (listing_c["state"], listing_c["finished"]) == ("complete", 10)
        assert listing_c["mean_reward"] == pytest.approx(0.2)
        (board_c,) = [r for r in doc["leaderboard"] if r["label"] == "example.chat.c"]
        assert (board_c["mean_reward"], board_c["scored"]) == (pytest.approx(0.2), 10)
        listing = get_json(url, "/api/runs")
        assert listing["single_job"] is True
        assert sorted(r["name"] for r in listing["runs"]) == sorted(JOB_CELLS)
        assert get_json(url, "/api/run/example.chat.a")["cell"] == "example.chat.a"
    finally:
        proc.terminate()
        proc.communicate(timeout=30)


def test_a_job_whose_cell_leads_outside_is_refused(jobs: Path, tmp_path: Path) -> None:
    """A job one of whose cells' run directories leads outside the served directory is
    refused whole, as agentkit.jobs refuses a run_dir outside the job directory: a cell
    linked to a run elsewhere (the viewer's check), a run_dir of ``..`` (agentkit.jobs');
    each is listed as broken, naming the file, the cell's field and what was expected,
    and none of its cells is served, alone or in a folder."""
    folder = tmp_path / "jobs"
    folder.mkdir()
    elsewhere = tmp_path / "elsewhere"
    subprocess.run(["cp", "-a", str(jobs / "good"), str(elsewhere)], check=True)
    for name in ("sweep", "linked", "climbs"):
        subprocess.run(["cp", "-a", str(jobs / "sweep"), str(folder / name)], check=True)
    (folder / "linked" / "cells" / "example.chat.d").symlink_to(elsewhere)
    document = json.loads((jobs / "sweep" / "job.json").read_text())
    document["cells"][3]["run_dir"] = "../../elsewhere"
    (folder / "climbs" / "job.json").write_text(json.dumps(document))
    with view_server(folder) as url:
        listing = get_json(url, "/api/runs")
        assert [j["name"] for j in listing["jobs"]] == ["sweep"]
        assert {r["name"] for r in listing["runs"]} == {f"sweep~{c}" for c in JOB_CELLS}
        errors = {b["name"]: b["error"] for b in listing["broken"]}
        assert errors == {
            "linked": f"{folder / 'linked' / 'job.json'}: cells[3].run_dir: expected a "
            "directory inside the served directory, got 'cells/example.chat.d', which leads "
            "outside it",
            "climbs": f"{folder / 'climbs' / 'job.json'}: cells[3].run_dir: expected a "
            "directory inside the job directory, got '../../elsewhere'",
        }
        for name in ("linked", "climbs"):
            status, body = raw_get(url, f"/api/job/{name}")
            assert status == 404 and b"cells[3].run_dir" in body, name
            for path in (
                f"/api/run/{name}~example.chat.a",
                f"/api/run/{name}~example.chat.d",
                f"/files/{name}~example.chat.d/manifest.json",
            ):
                status, body = raw_get(url, path)
                assert status == 404 and str(elsewhere).encode() not in body, path
    with view_server(folder / "linked") as url:
        listing = get_json(url, "/api/runs")
        assert (listing["single_job"], listing["runs"]) == (True, [])
        assert [b["name"] for b in listing["broken"]] == ["linked"]
        for refused in ("/api/run/example.chat.d", "/files/example.chat.d/manifest.json"):
            status, body = raw_get(url, refused)
            assert status == 404 and str(elsewhere).encode() not in body, refused


def test_a_job_file_it_cannot_read_is_named_with_what_was_expected(
    jobs: Path, tmp_path: Path
) -> None:
    """A job.json that is not JSON, not a job's, or of a format_version this agentkit does
    not read is listed as broken (its file and what was expected), and no cell of it is
    served; the folder's other runs and jobs are."""
    folder = tmp_path / "jobs"
    folder.mkdir()
    subprocess.run(["cp", "-a", str(jobs / "sweep"), str(folder / "sweep")], check=True)
    subprocess.run(["cp", "-a", str(jobs / "good"), str(folder / "good")], check=True)
    document = json.loads((jobs / "sweep" / "job.json").read_text())
    damaged = {
        "newer": json.dumps({**document, "format_version": 2}),
        "other": json.dumps({**document, "kind": "something.else"}),
        "torn": json.dumps(document)[:100],
    }
    for name, text in damaged.items():
        subprocess.run(["cp", "-a", str(jobs / "sweep"), str(folder / name)], check=True)
        (folder / name / "job.json").write_text(text)
    with view_server(folder) as url:
        listing = get_json(url, "/api/runs")
        assert [j["name"] for j in listing["jobs"]] == ["sweep"]
        assert {r["name"] for r in listing["runs"]} == {"good", *(f"sweep~{c}" for c in JOB_CELLS)}
        errors = {b["name"]: b["error"] for b in listing["broken"]}
        assert errors == {
            "newer": f"{folder / 'newer' / 'job.json'}: format_version 2; this agentkit reads 1"
            " (a newer agentkit wrote it?)",
            "other": f"{folder / 'other' / 'job.json'}: not an agentkit job file"
            " (kind is not 'agentkit.job')",
            "torn": errors["torn"],
        }
        assert errors["torn"].startswith(f"{folder / 'torn' / 'job.json'}: cannot read it: ")
        for name in damaged:
            status, body = raw_get(url, f"/api/job/{name}")
            assert status == 404 and b"job.json" in body, name
            status, _ = raw_get(url, f"/api/run/{name}~example.chat.a")
            assert status == 404, name


def test_a_running_cell_is_read_as_its_lines_are_appended(tmp_path: Path) -> None:
    """While a cell runs, the job page counts the rollouts it has finished each time it
    is asked (the lines appended since the last time are read), then, once the cell has
    ended, takes the cell's summary: the same numbers as the cell's run page."""
    job = tmp_path / "jobs" / "live"
    run_dir = job / "cells" / "arith"
    cell = {"taskset": "arithmetic", "harness": "chat", "model": "scripted"}
    document = {
        "kind": "agentkit.job",
        "format_version": 1,
        "name": "live",
        "created_at": time.time(),
        "concurrency": 8,
        "axes": {axis: [label] for axis, label in cell.items()},
        "cells": [{"name": "arith", "axes": cell, "run_dir": "cells/arith"}],
    }
    planned = planned_arithmetic()
    with ScriptedModelServer(arithmetic_script()) as good:  # a rollout of each task
        done = run_agentkit(*arithmetic_run_args(run_dir, good.base_url))
        assert done.returncode == 0, done.stderr
    (job / "job.json").write_text(json.dumps(document))
    # then a second rollout of each task, whose answers are held back, one never given
    server = ScriptedModelServer(arithmetic_script(hang="apples")).start()
    server.hold()
    proc: subprocess.Popen[str] | None = None
    try:
        with view_server(job.parent) as url:
            args = ["run", "--resume", str(run_dir), "-n", "2", "--base-url", server.base_url]
            proc = subprocess.Popen(
                [sys.executable, "-m", "agentkit", *args, "--max-retries", "0", "--no-progress"],
                cwd=ROOT,
                env=cli_env(),
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            while not server.model_requests:  # the resumed run holds its lock
                assert proc.poll() is None, proc.communicate()
                time.sleep(0.05)

            def listing() -> dict[str, Any]:
                (only,) = get_json(url, "/api/job/live")["cell_list"]
                return dict(only["listing"])

            before = listing()
            assert (before["state"], before["finished"]) == ("running", planned)
            server.release()  # every new rollout but the one that hangs finishes
            while len(agentkit.runs.open(run_dir)) < 2 * planned - 1:
                assert proc.poll() is None, proc.communicate()
                time.sleep(0.05)
            during = listing()
            assert (during["state"], during["finished"]) == ("running", 2 * planned - 1)
            server.stop()  # the hung request fails: that rollout could not run
            assert proc.wait(timeout=120) == 0, proc.communicate()
            after = listing()
            assert (after["state"], after["finished"]) == ("incomplete", 2 * planned)
            assert after["infra_errors"] == 1
            run = get_json(url, "/api/run/live~arith")
            assert {k: run[k] for k in after} == after
    finally:
        server.stop()
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.communicate()


def _corrupt(run: Path, index: int, cut: int | None = None) -> int:
    """Damage line ``index`` (from 0) of ``run``'s rollouts.jsonl: replaced by text that is
    not JSON, or (``cut``) cut to its first ``cut`` bytes, keeping its id and place so that
    the index still reads it and only parsing it fails. Returns its line number."""
    path = run / "rollouts.jsonl"
    lines = path.read_bytes().split(b"\n")
    lines[index] = b'{"broken' if cut is None else lines[index][:cut]
    path.write_bytes(b"\n".join(lines))
    return index + 1


def test_a_run_with_a_corrupt_line_is_listed_with_its_error(
    runs: Path, jobs: Path, tmp_path: Path
) -> None:
    """A run with a corrupt line in the middle of rollouts.jsonl (not JSON at all, or a
    line cut short after its id in a run without its summary) is listed with its error,
    naming the file and the line; every other run (and job) is listed as usual. Its page
    says the same; a job whose cell is corrupt shows its other cells and says which one
    cannot be read."""
    folder = tmp_path / "runs"
    folder.mkdir()
    for name in ("good", "bad"):
        subprocess.run(["cp", "-a", str(runs / name), str(folder / name)], check=True)
    subprocess.run(["cp", "-a", str(runs / "good"), str(folder / "torn")], check=True)
    subprocess.run(["cp", "-a", str(runs / "good"), str(folder / "cut")], check=True)
    subprocess.run(["cp", "-a", str(jobs / "sweep"), str(folder / "sweep")], check=True)
    torn = _corrupt(folder / "torn", 3)
    cut = _corrupt(folder / "cut", 1, cut=200)
    (folder / "cut" / "summary.json").unlink()  # killed before its summary: rollouts are read
    cell = folder / "sweep" / "cells" / "example.chat.b"
    cell_line = _corrupt(cell, 4)
    # a job page takes a finished cell's figures from its summary (no scan of the rollouts);
    # a cell killed before writing one is read, and its corrupt line found
    (cell / "summary.json").unlink()
    errors = {
        "torn": f"{folder / 'torn' / 'rollouts.jsonl'}: line {torn} is not valid JSON",
        "cut": f"{folder / 'cut' / 'rollouts.jsonl'}: line {cut} is not valid JSON",
        "sweep~example.chat.b": f"{cell / 'rollouts.jsonl'}: line {cell_line} is not valid JSON",
    }
    with view_server(folder) as url:
        listing = get_json(url, "/api/runs")
        assert {r["name"] for r in listing["runs"]} == {
            "good",
            "bad",
            *(f"sweep~{c}" for c in JOB_CELLS if c != "example.chat.b"),
        }
        assert [j["name"] for j in listing["jobs"]] == ["sweep"]
        broken = {b["name"]: b for b in listing["broken"]}
        assert set(broken) == set(errors)
        for name, error in errors.items():
            assert broken[name]["kind"] == "run" and broken[name]["error"].startswith(error)
        assert (broken["sweep~example.chat.b"]["job"], broken["sweep~example.chat.b"]["cell"]) == (
            "sweep",
            "example.chat.b",
        )
        for name, error in errors.items():  # the run's own page: the same error
            status, body = raw_get(url, f"/api/run/{name}")
            assert status == 422 and json.loads(body)["error"].startswith(error), (status, body)
        job = get_json(url, "/api/job/sweep")
        cells = {c["name"]: c for c in job["cell_list"]}
        assert cells["example.chat.b"]["state"] == "broken"
        assert cells["example.chat.b"]["error"].startswith(errors["sweep~example.chat.b"])
        assert cells["example.chat.a"]["state"] == "complete"
        assert {r["label"] for r in job["leaderboard"]} == {"example.chat.a", "example.chat.c"}
    # agentkit runs lists it the same way
    done = run_agentkit("runs", str(folder), "--json")
    assert done.returncode == 0, done.stderr
    by_name = {Path(r["path"]).name: r for r in json.loads(done.stdout)}
    assert by_name["torn"]["error"].startswith(errors["torn"]) and by_name["good"]["error"] is None
    table = run_agentkit("runs", str(folder))
    assert table.returncode == 0 and f"torn: cannot read it: {errors['torn']}" in table.stdout
