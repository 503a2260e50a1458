"""Resuming a job: what may change and what is refused (naming the cell and setting), cells
never started, rollouts that could not run, a cell that fails while the others run."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from agentkit import Job
from agentkit.testing.model_server import ScriptedModelServer

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[1]


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agentkit", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "NO_COLOR": "1"},
    )


def write_tasks(path: Path, n: int = 3) -> Path:
    rows = [{"id": f"t{i}", "input": f"Say {i}.", "target": "ok"} for i in range(n)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def job_file(path: Path, tasks: Path, models: dict[str, str], extra: str = "") -> Path:
    """A job of the chat harness on ``tasks`` with one cell per model (label -> base URL)."""
    text = f'[job]\nname = "r"\nconcurrency = 2\n{extra}\n'
    text += f'[[tasksets]]\nspec = "jsonl:{tasks}"\nlabel = "t"\n\n[[harnesses]]\nname = "chat"\n\n'
    for label, url in models.items():
        text += f'[[models]]\nname = "scripted-model"\nlabel = "{label}"\nbase_url = "{url}"\n\n'
    path.write_text(text)
    return path


def ids_per_cell(job_dir: Path) -> dict[str, list[str]]:
    out = {}
    for cell in sorted((job_dir / "cells").iterdir()):
        lines = (cell / "rollouts.jsonl").read_text().splitlines()
        out[cell.name] = [json.loads(x)["rollout_id"] for x in lines]
    return out


def test_resume_refuses_changed_cells_and_takes_allowed_changes(
    model_server: ScriptedModelServer, tmp_path: Path
) -> None:
    tasks = write_tasks(tmp_path / "tasks.jsonl")
    url = model_server.base_url
    job = job_file(tmp_path / "job.toml", tasks, {"a": url, "b": url})
    job_dir = tmp_path / "job"
    assert cli("job", "run", str(job), "--out", str(job_dir)).returncode == 0

    # a setting that changes results: refused, naming the cells and the setting
    job_file(tmp_path / "job.toml", tasks, {"a": url, "b": url}, extra="max_turns = 2")
    refused = cli("job", "run", str(job), "--resume", str(job_dir))
    assert refused.returncode == 2
    assert refused.stderr.strip() == (
        f"Error: cannot resume {job_dir}: the job's cells differ from those it was started "
        "with; cell t.chat.a: max_turns differs: was not given, now 2; cell t.chat.b: "
        "max_turns differs: was not given, now 2"
    )
    # another cell: refused
    job_file(tmp_path / "job.toml", tasks, {"a": url, "b": url, "c": url})
    refused = cli("job", "run", str(job), "--resume", str(job_dir))
    assert refused.returncode == 2 and "new cells: t.chat.c" in refused.stderr
    # so is a flag that changes results, with the stored job
    refused = cli("job", "run", "--resume", str(job_dir), "--set", "sampling_args.seed=3")
    assert refused.returncode == 2
    assert 'cell t.chat.a: sampling_args differs: was not given, now {"seed": 3}' in refused.stderr
    assert ids_per_cell(job_dir) == {
        "t.chat.a": ids_per_cell(job_dir)["t.chat.a"],
        "t.chat.b": ids_per_cell(job_dir)["t.chat.b"],
    }

    # the budget, the timeout and more rollouts per task may change: the cells grow
    job_file(
        tmp_path / "job.toml",
        tasks,
        {"a": url, "b": url},
        extra="timeout = 60\nrollouts_per_task = 2",
    )
    grown = cli("job", "run", str(job), "--resume", str(job_dir), "-c", "3", "--json")
    assert grown.returncode == 0, grown.stderr
    report = json.loads(grown.stdout)
    assert [c["summary"]["this_session"]["ran"] for c in report["cells"]] == [3, 3]
    for ids in ids_per_cell(job_dir).values():
        assert len(ids) == 6 == len(set(ids))
    stored = json.loads((job_dir / "job.json").read_text())
    [entry] = stored["resumes"]
    assert entry["concurrency"] == {"was": 2, "now": 3}
    assert entry["changed"]["t.chat.a"] == {"timeout": [None, 60.0], "rollouts_per_task": [None, 2]}
    assert stored["concurrency"] == 3


def test_a_cell_never_started_is_started_and_the_others_run_nothing(
    model_server: ScriptedModelServer, tmp_path: Path
) -> None:
    tasks = write_tasks(tmp_path / "tasks.jsonl")
    url = model_server.base_url
    job = job_file(tmp_path / "job.toml", tasks, {"a": url, "b": url})
    job_dir = tmp_path / "job"
    assert cli("job", "run", str(job), "--out", str(job_dir)).returncode == 0
    before = ids_per_cell(job_dir)["t.chat.a"]
    shutil.rmtree(job_dir / "cells" / "t.chat.b")
    model_server.clear_requests()
    resumed = cli("job", "run", "--resume", str(job_dir), "--json")
    assert resumed.returncode == 0, resumed.stderr
    report = json.loads(resumed.stdout)
    assert [c["summary"]["this_session"]["ran"] for c in report["cells"]] == [0, 3]
    assert len(model_server.model_requests) == 3
    assert ids_per_cell(job_dir)["t.chat.a"] == before
    assert len(ids_per_cell(job_dir)["t.chat.b"]) == 3


async def test_rollouts_that_could_not_run_run_again_on_resume(
    model_server: ScriptedModelServer, tmp_path: Path
) -> None:
    tasks = write_tasks(tmp_path / "tasks.jsonl")
    model_server.set_script(
        {"rules": [{"match": {"model": "broken"}, "reply": {"fail": "server_error"}}]}
    )
    job = Job.from_mapping(
        {
            "job": {"name": "infra", "max_retries": 0},
            "tasksets": [{"spec": f"jsonl:{tasks}"}],
            "harnesses": [{"name": "chat"}],
            "models": [
                {"name": "fine", "base_url": model_server.base_url},
                {"name": "broken", "base_url": model_server.base_url},
            ],
        }
    )
    job_dir = tmp_path / "job"
    first = await job.run(out=job_dir)
    assert not first.complete and first.failed == []
    broken = first.cell("tasks.chat.broken")
    assert broken.results is not None and broken.results.summary["infra_errors"] == 3
    assert first.cell("tasks.chat.fine").complete

    model_server.set_script({"default": {"content": "ok"}})
    model_server.clear_requests()
    again = await Job.from_job_dir(job_dir).run(resume=job_dir)
    assert again.complete
    assert len(model_server.model_requests) == 3  # only the broken cell's three
    ids: list[str] = ids_per_cell(job_dir)["tasks.chat.broken"]
    assert len(ids) == 6 and len(set(ids)) == 3  # run again: a second line each


def test_a_cell_that_cannot_start_fails_alone(
    model_server: ScriptedModelServer, tmp_path: Path
) -> None:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{s.getsockname()[1]}/v1"
    tasks = write_tasks(tmp_path / "tasks.jsonl")
    job = job_file(tmp_path / "job.toml", tasks, {"up": model_server.base_url, "down": closed})
    job_dir = tmp_path / "job"
    proc = cli("job", "run", str(job), "--out", str(job_dir), "--json")
    assert proc.returncode == 2
    report: dict[str, Any] = json.loads(proc.stdout)
    assert report["failed"] == ["t.chat.down"]
    [down] = [c for c in report["cells"] if c["name"] == "t.chat.down"]
    assert down["summary"] is None
    assert down["error"].startswith(f"cannot reach the model server at {closed}")
    lines = proc.stderr.strip().splitlines()
    assert lines[-2].startswith("cell t.chat.down failed: ")
    assert lines[-1] == (
        f"Error: 1 of 2 cells failed; the others ran. Fix the cause, then continue with: "
        f"agentkit job run --resume {job_dir}"
    )
    assert "Traceback" not in proc.stderr
    assert len(ids_per_cell(job_dir)["t.chat.up"]) == 3
    # the endpoint may move on resume
    job_file(
        tmp_path / "job.toml", tasks, {"up": model_server.base_url, "down": model_server.base_url}
    )
    fixed = cli("job", "run", str(job), "--resume", str(job_dir), "--json")
    assert fixed.returncode == 0, fixed.stderr
    assert json.loads(fixed.stdout)["complete"] is True
    assert len(ids_per_cell(job_dir)["t.chat.down"]) == 3
