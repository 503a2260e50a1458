"""Real jobs through ``agentkit job run``: the Harbor examples with the oracle and nop
harnesses in the local sandbox, JSONL tasks with the chat harness on scripted models;
each cell an ordinary run directory that ``show``, ``compare``, ``runs --compare`` and
``agentkit.runs`` read unchanged; the leaderboard in every format; dry runs."""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import agentkit.jobs
import agentkit.runs
from agentkit.jobs import JOB_FORMAT_VERSION

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"


def agentkit_cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agentkit", *args],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=cwd,
        env={**os.environ, "NO_COLOR": "1"},
    )


def ok(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    proc = agentkit_cli(*args, cwd=cwd)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    return proc


@pytest.fixture(scope="module")
def harbor_job(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The Harbor examples with oracle and nop, by flags alone, two rollouts per task."""
    pytest.importorskip("agentkit_harbor", reason="the Harbor plugin is not installed")
    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap (bwrap) is not installed")
    job_dir = tmp_path_factory.mktemp("harbor") / "job"
    proc = ok(
        "job", "run",
        "--taskset", f"harbor:{EXAMPLES / 'harbor'}",
        "--harness", "oracle", "--harness", "nop",
        "-S", "image=host", "-n", "2", "-c", "4", "--name", "harbor-demo",
        "--out", str(job_dir),
    )  # fmt: skip
    # not a terminal: plain progress lines on stderr, the leaderboard on stdout
    assert "cell harbor.oracle: 10 rollouts to run" in proc.stderr
    assert "cell harbor.nop: finished 10/10 rollouts" in proc.stderr
    assert "Job harbor-demo" in proc.stdout and f"Job directory: {job_dir}" in proc.stdout
    return job_dir


def test_harbor_job_cells_are_ordinary_runs(harbor_job: Path) -> None:
    data = json.loads((harbor_job / "job.json").read_text())
    assert data["kind"] == "agentkit.job" and data["format_version"] == JOB_FORMAT_VERSION
    assert data["name"] == "harbor-demo" and data["concurrency"] == 4
    assert data["source"] is None  # from flags
    assert data["axes"] == {"taskset": ["harbor"], "harness": ["oracle", "nop"]}
    assert [(c["name"], c["run_dir"]) for c in data["cells"]] == [
        ("harbor.oracle", "cells/harbor.oracle"),
        ("harbor.nop", "cells/harbor.nop"),
    ]
    oracle = data["cells"][0]
    assert oracle["harness"] == {"name": "oracle", "options": {}}
    assert oracle["settings"] == {"rollouts_per_task": 2, "sandbox_options": {"image": "host"}}
    assert sorted(p.name for p in harbor_job.iterdir()) == [".lock", "cells", "job.json"]

    job = agentkit.jobs.open(harbor_job)
    assert job.name == "harbor-demo" and job.state() == "complete"
    assert [c.name for c in job.cells] == ["harbor.oracle", "harbor.nop"]
    run = job.cell("harbor.oracle").open()
    assert isinstance(run, agentkit.runs.Run) and run.state() == "complete"
    assert run.info.harness == "oracle" and len(run) == 10
    by_task = {r.task_id.rsplit(":", 1)[-1]: r.reward for r in run.rollouts(0, 10)}
    assert by_task["hello-world"] == 1.0 and by_task["wrong-on-purpose"] == 0.0
    nop = agentkit.runs.open(harbor_job / "cells" / "harbor.nop")
    assert nop.summary()["mean_reward"] == 0.0
    # agentkit show works on a cell as on any run
    shown = ok("show", str(harbor_job / "cells" / "harbor.oracle"), "--json")
    assert json.loads(shown.stdout)["finished"] == 10


def test_harbor_job_leaderboard_in_every_format(harbor_job: Path, tmp_path: Path) -> None:
    table = ok("job", "show", str(harbor_job)).stdout
    assert "Job harbor-demo" in table and "harbor.oracle" in table and "harbor.nop" in table
    assert "Cells: 2 (2 complete); job complete" in table
    rows = json.loads(ok("job", "show", str(harbor_job), "--format", "json").stdout)
    assert [r["label"] for r in rows] == ["harbor.oracle", "harbor.nop"]  # best first
    assert rows[0]["mean_reward"] == pytest.approx(0.6) and rows[1]["mean_reward"] == 0.0
    assert rows[0]["tasks"] == 5 and rows[0]["scored"] == 10
    assert rows[0]["pass@1"] == pytest.approx(0.6) and rows[0]["pass@2"] == pytest.approx(0.6)
    # the same rows as agentkit.stats gives for the cells' run directories
    direct = json.loads(
        ok("runs", "--compare", str(harbor_job / "cells"), "--format", "json").stdout
    )
    assert {r["label"]: r["mean_reward"] for r in direct} == {
        r["label"]: r["mean_reward"] for r in rows
    }
    via_job = json.loads(ok("runs", "--compare", str(harbor_job), "--format", "json").stdout)
    assert [r["label"] for r in via_job] == ["harbor.oracle", "harbor.nop"]
    markdown = ok("job", "show", str(harbor_job), "--format", "markdown").stdout
    assert markdown.splitlines()[0].startswith("| run |") and "| harbor.oracle |" in markdown
    out = tmp_path / "board.csv"
    proc = ok("job", "show", str(harbor_job), "--format", "csv", "--out", str(out))
    assert proc.stdout == ""
    records = list(csv.DictReader(io.StringIO(out.read_text())))
    assert [r["label"] for r in records] == ["harbor.oracle", "harbor.nop"]
    assert float(records[0]["mean_reward"]) == pytest.approx(0.6)


def test_harbor_job_cells_compare_as_runs(harbor_job: Path) -> None:
    by_job = json.loads(
        ok("job", "compare", str(harbor_job), "harbor.oracle", "harbor.nop", "--json").stdout
    )
    cells = harbor_job / "cells"
    by_path = json.loads(
        ok("compare", str(cells / "harbor.oracle"), str(cells / "harbor.nop"), "--json").stdout
    )
    assert by_job == by_path
    assert by_job["difference"]["mean"] == pytest.approx(0.6)
    assert by_job["wins_a"] == 3 and by_job["wins_b"] == 0 and by_job["ties"] == 2
    text = ok("job", "compare", str(harbor_job), "harbor.oracle", "harbor.nop").stdout
    assert "Difference A - B: +0.600" in text
    missing = agentkit_cli("job", "compare", str(harbor_job), "harbor.oracle", "harbor.bogus")
    assert missing.returncode == 2
    assert "no cell 'harbor.bogus'; its cells: harbor.oracle, harbor.nop" in missing.stderr
    assert "Traceback" not in missing.stderr
    itself = agentkit_cli("job", "compare", str(harbor_job), "harbor.oracle", "harbor.oracle")
    assert itself.returncode == 2 and itself.stdout == ""
    assert (
        f"{harbor_job}: cell 'harbor.oracle' compared with itself agrees on every task; give "
        "two different cells"
    ) in itself.stderr
    assert "Traceback" not in itself.stderr


# -- JSONL tasks, the chat harness, scripted models ----------------------------------------

JOB_FILE = """\
[job]
name = "arith"
concurrency = 6
rollouts_per_task = 2

[[tasksets]]
spec = "jsonl:{tasks}"
label = "arith"

[[harnesses]]
name = "chat"

[[models]]
name = "scripted:{scripts}/arithmetic.json"
label = "right"

[[models]]
name = "scripted:{scripts}/echo.json"
label = "echo"

[matrix]
sampling_args.temperature = [0.0, 0.7]

[[exclude]]
model = "echo"
temperature = 0.7

[[cells]]
name = "arith-limited"
taskset = "arith"
harness = "chat"
model = "right"
limit = 3
max_turns = 1
"""


def write_arith_job(tmp_path: Path) -> Path:
    job = tmp_path / "job.toml"
    tasks = EXAMPLES / "jsonl" / "arithmetic.jsonl"
    job.write_text(JOB_FILE.format(tasks=tasks, scripts=EXAMPLES / "scripts"))
    return job


def test_dry_run_prints_the_cells_and_runs_nothing(tmp_path: Path) -> None:
    job = write_arith_job(tmp_path)
    proc = ok("job", "run", str(job), "--dry-run", "--out", str(tmp_path / "j"))
    text = proc.stdout
    assert text.startswith("Dry run: nothing is run or written.")
    for name in (
        "arith.chat.right.temperature=0.0",
        "arith.chat.right.temperature=0.7",
        "arith.chat.echo.temperature=0.0",
        "arith-limited",
    ):
        assert f"  {name}\n" in text
    assert "arith.chat.echo.temperature=0.7" not in text  # excluded
    assert '"limit": 3' in text and '"max_turns": 1' in text
    assert "Total: 66 rollouts planned, 66 to run" in text
    assert not (tmp_path / "j").exists()
    plan = json.loads(ok("job", "run", str(job), "--dry-run", "--json").stdout)
    assert plan["planned"] == 66 and plan["concurrency"] == 6
    assert [c["planned"] for c in plan["cells"]] == [20, 20, 20, 6]
    assert plan["cells"][3]["settings"]["limit"] == 3
    assert not (tmp_path / "jobs").exists()


def test_jsonl_job_with_scripted_models(tmp_path: Path) -> None:
    job = write_arith_job(tmp_path)
    job_dir = tmp_path / "job"
    proc = ok("job", "run", str(job), "--out", str(job_dir), "--json")
    report: dict[str, Any] = json.loads(proc.stdout)  # stdout holds only the JSON
    assert report["complete"] is True and report["failed"] == []
    means = {c["name"]: c["summary"]["mean_reward"] for c in report["cells"]}
    assert means == {
        "arith.chat.right.temperature=0.0": 1.0,
        "arith.chat.right.temperature=0.7": 1.0,
        "arith.chat.echo.temperature=0.0": 0.0,
        "arith-limited": 1.0,
    }
    assert [c["summary"]["finished"] for c in report["cells"]] == [20, 20, 20, 6]
    assert "cell arith-limited: finished 6/6" not in proc.stderr  # --json: no progress
    # each cell's settings reached its run: the manifest says what ran
    hot = agentkit.runs.open(job_dir / "cells" / "arith.chat.right.temperature=0.7")
    assert hot.info.sampling_args == {"temperature": 0.7}
    manifest = json.loads((hot.path / "manifest.json").read_text())
    assert manifest["options"]["concurrency"] == 6
    limited = json.loads((job_dir / "cells" / "arith-limited" / "manifest.json").read_text())
    assert limited["plan"]["limit"] == 3 and limited["context"]["limits"]["max_turns"] == 1
    stored = json.loads((job_dir / "job.json").read_text())
    assert stored["source"] == str(job.resolve())
    assert stored["axes"]["sampling_args.temperature"] == ["0.0", "0.7"]
    assert [c["explicit"] for c in stored["cells"]] == [False, False, False, True]
    # the normalised spec reads back into the same cells
    again = agentkit.Job.from_mapping(stored["spec"])
    assert [c.to_json() for c in again.cells] == [
        {k: v for k, v in c.items() if k != "run_dir"} for c in stored["cells"]
    ]
    # a finished job resumed runs nothing
    resumed = json.loads(ok("job", "run", "--resume", str(job_dir), "--json").stdout)
    assert all(c["summary"]["this_session"]["ran"] == 0 for c in resumed["cells"])
    # a new job into the same directory is refused, pointing at --resume
    again_proc = agentkit_cli("job", "run", str(job), "--out", str(job_dir))
    assert again_proc.returncode == 2
    assert f"{job_dir} already holds a job; continue it with agentkit job run --resume" in (
        again_proc.stderr
    )


def test_default_job_directory_is_under_jobs(tmp_path: Path) -> None:
    job = write_arith_job(tmp_path)
    ok("job", "run", str(job), "--no-progress", "--set", "limit=1", "-n", "1", cwd=tmp_path)
    [made] = list((tmp_path / "jobs").iterdir())
    assert made.name.endswith("-arith")
    rows = json.loads(ok("job", "show", str(made), "--format", "json").stdout)
    assert {r["rollouts"] for r in rows} == {1}


def readme_block(title: str) -> list[list[str]]:
    """The commands of the README's bash block under ``## title``, as argument lists."""
    import shlex

    text = (ROOT / "README.md").read_text()
    block = text.split(f"## {title}\n", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    return [w for w in (shlex.split(x, comments=True) for x in block.splitlines()) if w]


def test_the_readme_job_works_as_written(tmp_path: Path) -> None:
    commands = readme_block("A job")
    assert [c[:3] for c in commands] == [
        ["agentkit", "job", "run"],
        ["agentkit", "job", "show"],
        ["agentkit", "job", "compare"],
        ["agentkit", "job", "run"],
    ]
    outputs = []
    for words in commands:
        args = [str(tmp_path / "arith") if w == "jobs/arith" else w for w in words[1:]]
        outputs.append(ok(*args, cwd=ROOT).stdout)
    board = outputs[1]
    # the numbers docs/jobs.md shows
    assert (
        "| arith.chat.weak.temperature=0.0 | chat | scripted:examples/scripts/arithmetic-weak.json"
        " | 10 | 20 | 0 | 0.550 | [0.237, 0.863] | 0.1384 | 0.550 | 0.700 |"
    ) in board
    assert "| arith.chat.strong.temperature=0.7 | chat |" in board
    compared = outputs[2]
    assert "Difference A - B: +0.450  95% CI [+0.137, +0.763]  SE 0.138" in compared
    assert "Paired t-test on per-task means: t = 3.250, df = 9, p = 0.009991" in compared
    assert "Tasks: A higher on 6, B higher on 0, tied on 4" in compared
    assert f"Job directory: {tmp_path / 'arith'}" in outputs[3]
    docs = (ROOT / "docs" / "jobs.md").read_text()
    for line in board.splitlines()[2:]:
        assert line.rsplit("|", 2)[0] in docs, line  # all but the seconds per rollout
    for line in compared.splitlines()[2:]:
        assert line in docs, line
