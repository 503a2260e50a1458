"""docs/statistics.md's worked example, made by real ``agentkit run`` invocations: every
number the page works out by hand is what agentkit.stats and the commands report."""

from __future__ import annotations

import csv
import io
import json
import math
import shutil
import subprocess
import sys
import time
from pathlib import Path

import attrs
import pytest
from _stats_runs import EXAMPLE_SCRIPT, make_example_run, make_example_runs, run_cli

import agentkit.runs
import agentkit.stats
from agentkit.testing.model_server import ScriptedModelServer

ROOT = Path(__file__).resolve().parents[1]
DOC = (ROOT / "docs" / "statistics.md").read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("stats-example")
    make_example_runs(folder)
    return folder


def in_doc(*texts: str) -> None:
    for text in texts:
        assert text in DOC, f"docs/statistics.md does not say {text!r}"


def test_the_runs_are_what_the_page_describes(folder: Path) -> None:
    rewards: dict[str, dict[str, list[float | None]]] = {}
    for name in ("A", "B"):
        for line in (folder / "runs" / name / "rollouts.jsonl").read_text().splitlines():
            d = json.loads(line)
            rewards.setdefault(name, {}).setdefault(d["task_id"], []).append(d["reward"])
    got = {
        name: {t: sorted(v, key=str) for t, v in tasks.items()} for name, tasks in rewards.items()
    }
    assert got["A"] == {
        "example:t1": [1.0, 1.0],
        "example:t2": [0.0, 1.0],
        "example:t3": [0.0, 0.0],
        "example:t4": [1.0, 1.0],
    }
    assert got["B"] == {
        "example:t1": [0.0, 1.0],
        "example:t2": [0.0, 0.0],
        "example:t3": [0.0, None],  # the rollout that could not run
        "example:t4": [1.0, 1.0],
        "example:t5": [1.0, 1.0],
    }


def test_run_a_by_hand(folder: Path) -> None:
    row = agentkit.stats.run_stats(folder / "runs" / "A")
    e = row.reward
    assert (row.rollouts, row.scored, row.tasks, row.could_not_run) == (8, 8, 4, 0)
    assert e.mean == 0.625 and e.df == 3
    assert e.se == pytest.approx(math.sqrt(4 / 3 * 2.75) / 8, rel=1e-12)
    assert e.se == pytest.approx(math.sqrt(0.6875 / 3 / 4), rel=1e-12)  # SE of the task means
    assert round(e.se, 4) == 0.2394
    assert (round(e.ci_low or 0, 3), round(e.ci_high or 0, 3)) == (-0.137, 1.387)
    assert row.pass_at_k == {1: 0.625, 2: 0.75}
    in_doc(
        "= 0.2394", "**[-0.137, 1.387]**", "0.625 ± 0.762", "pass@2 is `(1 + 1 + 0 + 1) / 4 = 0.75`"
    )
    naive = agentkit.stats.clustered_mean([1, 1, 1, 0, 0, 0, 1, 1])
    assert round(naive.se or 0, 4) == 0.1830
    in_doc("would give 0.1830")


def test_run_b_by_hand(folder: Path) -> None:
    row = agentkit.stats.run_stats(folder / "runs" / "B")
    e = row.reward
    assert (row.rollouts, row.scored, row.tasks, row.could_not_run, row.unscored) == (
        10,
        9,
        5,
        1,
        0,
    )
    assert e.mean == pytest.approx(5 / 9) and e.df == 4
    assert e.se == pytest.approx(math.sqrt(5 / 4 * 254 / 81) / 9, rel=1e-12)
    assert round(e.se, 4) == 0.2200
    assert (round(e.ci_low or 0, 3), round(e.ci_high or 0, 3)) == (-0.055, 1.166)
    assert row.pass_at_k == {1: 0.5}  # t3 has one scored rollout: no pass@2
    in_doc("`254/81 = 3.1358`", "**[-0.055, 1.166]**", "`(0.5 + 0 + 0 + 1 + 1) / 5 = 0.5`")


def test_a_against_b_by_hand(folder: Path) -> None:
    c = agentkit.stats.compare_runs(folder / "runs" / "A", folder / "runs" / "B")
    t = c.test
    assert [d.difference for d in c.tasks] == [0.5, 0.5, 0.0, 0.0]
    assert c.only_a == [] and c.only_b == ["example:t5"]
    assert (c.wins_a, c.wins_b, c.ties) == (2, 0, 2)
    assert t.mean == 0.25 and t.df == 3
    assert t.se == pytest.approx(math.sqrt(4 * 0.25**2 / 3) / 2, rel=1e-12)
    assert t.t == pytest.approx(math.sqrt(3), rel=1e-12)
    assert round(t.p_value or 0, 4) == 0.1817
    assert (round(t.ci_low or 0, 3), round(t.ci_high or 0, 3)) == (-0.209, 0.709)
    in_doc("**p = 0.1817**", "**[-0.209, +0.709]**", "A is higher on 2")


def test_agentkit_compare_prints_what_the_page_shows(folder: Path) -> None:
    done = run_cli("compare", "runs/A", "runs/B", cwd=folder)
    assert done.returncode == 0, done.stderr
    block = DOC.split("`agentkit compare A B` prints:\n\n```text\n", 1)[1].split("```", 1)[0]
    assert done.stdout == block


def test_compare_json_is_the_same_comparison(folder: Path) -> None:
    done = run_cli("compare", "runs/A", "runs/B", "--json", "--top", "1", cwd=folder)
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["shared_tasks"] == 4 and data["only_b"] == ["example:t5"]
    assert data["difference"]["mean"] == 0.25 and data["difference"]["df"] == 3
    assert round(data["difference"]["p_value"], 4) == 0.1817
    assert (data["wins_a"], data["wins_b"], data["ties"]) == (2, 0, 2)
    assert [x["task_id"] for x in data["top"]] == ["example:t1"]  # --top 1
    assert data["a"]["mean_reward"] == 0.625 and data["b"]["could_not_run"] == 1
    assert any("only in B" in note for note in data["notes"])


def test_a_copy_of_a_run_has_no_p_value_and_is_named_a_copy(folder: Path, tmp_path: Path) -> None:
    """Two runs that agree on every task (a copy of A): no variance, no p-value, and a
    note that they are copies of one run (the same run id)."""
    shutil.copytree(folder / "runs" / "A", tmp_path / "A-copy")
    copy = str(tmp_path / "A-copy")
    done = run_cli("compare", "runs/A", copy, "--json", cwd=folder)
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["difference"]["mean"] == 0 and data["difference"]["p_value"] is None
    assert data["ties"] == 4 and data["top"] == []
    assert any("no variance" in note for note in data["notes"])
    assert any(note.startswith("A and B are copies of one run") for note in data["notes"])
    text = run_cli("compare", "runs/A", copy, cwd=folder)
    assert "same mean reward on every shared task" in text.stdout
    assert "Note: A and B are copies of one run (run id " in text.stdout
    assert "p =" not in text.stdout


def test_the_same_run_twice_is_an_error(folder: Path, tmp_path: Path) -> None:
    """The same directory, under one path or two (another spelling, a symbolic link):
    one message, exit 2, nothing on stdout."""
    (tmp_path / "link").symlink_to(folder / "runs" / "A")
    for other in ("runs/A", "./runs/A/", str(folder / "runs" / "A"), str(tmp_path / "link")):
        for extra in ((), ("--json",)):
            done = run_cli("compare", "runs/A", other, *extra, cwd=folder)
            assert done.returncode == 2, (other, done.stdout)
            assert done.stdout == "" and "Traceback" not in done.stderr
            assert (
                f"runs/A and {Path(other)} are the same run directory: a run compared with "
                "itself agrees on every task; give two different runs"
            ) in done.stderr, done.stderr
    # the leaderboard lists a run given twice once, and says so
    board = run_cli("runs", "--compare", "runs/A", str(tmp_path / "link"), "--json", cwd=folder)
    assert board.returncode == 0, board.stderr
    assert [r["label"] for r in json.loads(board.stdout)] == ["A"]
    assert f"Note: {tmp_path / 'link'} is runs/A given again: listed once" in board.stderr


def test_a_run_still_being_written_is_said_to_be_partial(folder: Path) -> None:
    """Run B again while its model holds back every answer for task 3: while the run is
    going (it holds its lock, no summary yet), comparing A with it says its figures are
    partial, and so does a leaderboard of it."""
    script = {**EXAMPLE_SCRIPT, "rules": [
        {"match": {"last_user_contains": "task 3."}, "reply": {"fail": "hang"}},
        *EXAMPLE_SCRIPT["rules"],
    ]}  # fmt: skip
    with ScriptedModelServer(script) as server:
        proc = subprocess.Popen(
            [
                sys.executable, "-m", "agentkit", "run", "jsonl:example.jsonl", "chat",
                "--model", "b", "--base-url", server.base_url, "-n", "2", "--max-retries", "0",
                "--out", "runs/live", "--no-progress",
            ],
            cwd=folder,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        try:
            rollouts = folder / "runs" / "live" / "rollouts.jsonl"
            # the eight rollouts of the other tasks finish; task 3's two wait for the model
            while not (rollouts.exists() and rollouts.read_text().count("\n") == 8):
                if proc.poll() is not None:
                    raise AssertionError(f"agentkit run ended: {proc.communicate()}")
                time.sleep(0.02)  # polls the file: the condition, not a guess of time
            assert agentkit.runs.open(folder / "runs" / "live").state() == "running"
            done = run_cli("compare", "runs/A", "runs/live", cwd=folder)
            assert done.returncode == 0, done.stderr
            partial = (
                "Note: B (runs/live) is still being written (8 of 10 rollouts finished; no "
                "summary yet): its figures are partial and will change"
            )
            assert partial in done.stdout
            as_json = json.loads(
                run_cli("compare", "runs/A", "runs/live", "--json", cwd=folder).stdout
            )
            assert partial.removeprefix("Note: ") in as_json["notes"]
            board = run_cli("runs", "--compare", "runs/A", "runs/live", cwd=folder)
            assert board.returncode == 0, board.stderr
            assert (
                "Note: live is still being written (8 of 10 rollouts finished): its row is "
                "partial and will change"
            ) in board.stderr
        finally:
            proc.terminate()
            proc.communicate(timeout=60)
    # once it has stopped (interrupted, its summary written) there is no such note
    done = run_cli("compare", "runs/A", "runs/live", cwd=folder)
    assert done.returncode == 0, done.stderr
    assert "still being written" not in done.stdout
    shutil.rmtree(folder / "runs" / "live")


def test_leaderboard_in_every_format(folder: Path) -> None:
    done = run_cli("runs", "--compare", "runs/A", "runs/B", "--format", "csv", cwd=folder)
    assert done.returncode == 0, done.stderr
    rows = list(csv.DictReader(io.StringIO(done.stdout)))
    assert [r["label"] for r in rows] == ["A", "B"]  # ranked by mean reward
    assert rows[0]["mean_reward"] == "0.625" and rows[0]["df"] == "3"
    assert round(float(rows[1]["ci_low"]), 3) == -0.055 and rows[1]["could_not_run"] == "1"
    assert rows[0]["pass@2"] == "0.75" and rows[1]["pass@2"] == ""
    as_json = json.loads(
        run_cli("runs", "--compare", "runs", "--format", "json", cwd=folder).stdout
    )
    # a folder of runs: every run in it (C has tasks of its own)
    assert sorted(r["label"] for r in as_json) == ["A", "B", "C"]
    same = json.loads(run_cli("runs", "--compare", "runs/A", "runs/B", "--json", cwd=folder).stdout)
    assert same[0]["se"] == pytest.approx(0.23935677693908453, rel=1e-12)
    markdown = run_cli("runs", "--compare", "runs/A", "runs/B", "--format", "markdown", cwd=folder)
    lines = markdown.stdout.splitlines()
    assert lines[0].startswith("| run | harness | model |") and "95% CI" in lines[0]
    assert lines[2].startswith("| A | chat | a | 4 | 8 | 0 | 0.625 | [-0.137, 1.387] |")
    table = run_cli("runs", "--compare", "runs/A", "runs/B", cwd=folder)
    assert "95% CI" in table.stdout and "[-0.055, 1.166]" in table.stdout
    assert "B: 1 rollout could not run" in table.stdout
    out = folder / "board.md"
    wrote = run_cli(
        "runs", "--compare", "runs/A", "runs/B", "--format", "markdown", "--out", str(out),
        cwd=folder,
    )  # fmt: skip
    assert wrote.returncode == 0 and wrote.stdout == ""
    assert out.read_text() == markdown.stdout


def test_summary_and_rollouts_give_the_same_row(folder: Path, tmp_path: Path) -> None:
    """The leaderboard reads summary.json when it is current; without it, the rollouts."""
    for name in ("A", "B"):
        fast = agentkit.stats.run_stats(folder / "runs" / name)
        copy = tmp_path / name
        shutil.copytree(folder / "runs" / name, copy)
        summary = json.loads((copy / "summary.json").read_text())
        assert summary["rollout_time_s"]["timed"] == fast.rollouts
        (copy / "summary.json").unlink()
        slow = agentkit.stats.run_stats(copy, label=name)
        assert slow.duration_s == pytest.approx(fast.duration_s, rel=1e-12)
        assert slow.reward == fast.reward
        skip = ("path", "duration_s")
        assert {k: v for k, v in attrs.asdict(slow).items() if k not in skip} == {
            k: v for k, v in attrs.asdict(fast).items() if k not in skip
        }


def test_bad_input_is_one_message_and_exit_2(folder: Path, tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    cases = {
        ("compare", "runs/A", "runs/C"): "share no scored task",
        ("compare", "runs/A", str(tmp_path / "empty")): "no manifest.json",
        ("compare", "runs/A", "runs/missing"): "does not exist",
        ("compare", "runs/A", "runs/B", "--top", "-1"): "--top",
        ("runs", "--compare", str(tmp_path / "empty")): "neither a run directory",
        ("runs", "--compare", "runs/missing"): "no such run directory",
        ("runs", "--format", "csv"): "--format and --out go with --compare",
        ("runs", "runs/A", "runs/B"): "give one FOLDER",
        ("runs", "--compare", "runs/A", "--format", "xml"): "'xml' is not one of",
        ("runs", "--compare", "runs/A", "--json", "--format", "csv"): "--json is --format json",
        ("runs", "--compare", "runs/A", "--out", str(tmp_path / "no" / "board.csv")): (
            "cannot write the leaderboard"
        ),
    }
    for args, message in cases.items():
        done = run_cli(*args, cwd=folder)
        assert done.returncode == 2, (args, done.stdout, done.stderr)
        assert message in done.stderr, (args, done.stderr)
        assert "Traceback" not in done.stderr and done.stdout == "", args


def test_a_summary_left_behind_by_a_killed_resume_is_not_used(tmp_path: Path) -> None:
    """A resume that ran a rollout again and was killed before writing its summary leaves
    the old summary.json (older than rollouts.jsonl, counting the same rollouts): the
    statistics come from the rollouts then."""
    with ScriptedModelServer(EXAMPLE_SCRIPT) as server:
        run = make_example_run(tmp_path, "B", server)
        before = agentkit.stats.run_stats(run)
        old = tmp_path / "summary-before-resume.json"
        shutil.copy2(run / "summary.json", old)  # its time too
        # t3's rollout that could not run runs again (the server answers it now: wrong)
        done = run_cli("run", "--resume", "runs/B", "--no-progress", cwd=tmp_path)
        assert done.returncode == 0, done.stderr
    after = agentkit.stats.run_stats(run)
    assert (before.could_not_run, before.scored) == (1, 9)
    assert (after.could_not_run, after.scored, after.reward.mean) == (0, 10, 0.5)
    shutil.copy2(old, run / "summary.json")  # the state a resume killed at its end leaves
    assert agentkit.runs.open(run).current_summary() is None
    assert agentkit.stats.run_stats(run) == after


SUMMARY_DAMAGE = {
    "a count as text": lambda s: s["tasks"][0].update(scored="2"),
    "no mean for a scored task": lambda s: s["tasks"][1].update(mean_reward=None),
    "no pass@k": lambda s: s["tasks"][0].pop("pass_at_k"),
    "more rollouts left out than ran": lambda s: s["tasks"][2].update(infra_errors=5),
    "tasks not a list": lambda s: s.update(tasks={"example:t1": {}}),
    "written before rollout_time_s": lambda s: s.pop("rollout_time_s"),
    # as written with --pass-threshold 0, not the manifest's 1.0: every reward passes
    "another pass threshold": lambda s: [
        s.update(pass_threshold=0.0),
        *(t.update(pass_at_k={"1": 1.0, "2": 1.0}) for t in s["tasks"]),
    ],
    "a task outside the counts": lambda s: s["tasks"][0].update(rollouts=3),
    "a token count as text": lambda s: s["usage"].update(input_tokens="12"),
}


@pytest.mark.parametrize("damage", sorted(SUMMARY_DAMAGE))
def test_a_summary_that_is_not_as_agentkit_writes_it_is_not_used(
    folder: Path, tmp_path: Path, damage: str
) -> None:
    """The summary is only a faster way to the same numbers: one that does not look as
    agentkit writes it (edited by hand, or written by another version) is passed over
    for the rollouts, and the numbers stay right."""
    right = agentkit.stats.run_stats(folder / "runs" / "B", label="B")
    copy = tmp_path / "B"
    shutil.copytree(folder / "runs" / "B", copy)
    summary = json.loads((copy / "summary.json").read_text())
    SUMMARY_DAMAGE[damage](summary)
    (copy / "summary.json").write_text(json.dumps(summary))
    got = agentkit.stats.run_stats(copy, label="B")
    assert attrs.evolve(got, path=right.path, duration_s=right.duration_s) == right
    assert got.duration_s == pytest.approx(right.duration_s, rel=1e-12)
