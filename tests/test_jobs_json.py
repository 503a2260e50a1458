"""job.json is read strictly, by one reader, and a bad one is one clear error.

``agentkit job show`` used to raise ``AttributeError`` on a job.json whose
``cells`` was not a list, and showed a cell without a name as "None". Each
malformed job.json below is refused by ``agentkit.jobs``' one reader
(``read_job_json``) with one line naming the file and the field, exit status 2
and no traceback, from every command that reads it and from Python.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import agentkit.jobs
from agentkit.jobs import JobDirError

GOOD: dict[str, Any] = {
    "kind": "agentkit.job",
    "format_version": 1,
    "name": "sweep",
    "created_at": 1_790_000_000.0,
    "concurrency": 4,
    "axes": {"taskset": ["t"], "harness": ["chat"]},
    "cells": [
        {
            "name": "t.chat",
            "axes": {"taskset": "t", "harness": "chat"},
            "explicit": False,
            "taskset": {"spec": "jsonl:t.jsonl", "options": {}},
            "harness": {"name": "chat", "options": {}},
            "settings": {},
            "run_dir": "cells/t.chat",
        }
    ],
    "spec": {},
    "resumes": [],
}


def cell(**changes: Any) -> dict[str, Any]:
    return {**GOOD, "cells": [{**GOOD["cells"][0], **changes}]}


#: (what is wrong, the document as text, the error after "Error: <file>: ")
BAD: list[tuple[str, str, str]] = [
    ("cells-a-string", json.dumps({**GOOD, "cells": "t.chat"}), "cells: expected a list, got str"),
    ("cells-an-object", json.dumps({**GOOD, "cells": {"a": 1}}), "cells: expected a list, got"),
    ("cells-null", json.dumps({**GOOD, "cells": None}), "cells: expected a list, got NoneType"),
    ("cells-missing", json.dumps({k: v for k, v in GOOD.items() if k != "cells"}), "cells: "),
    ("cell-a-number", json.dumps({**GOOD, "cells": [3]}), "cells[0]: expected an object, got int"),
    ("cell-a-list", json.dumps({**GOOD, "cells": [[]]}), "cells[0]: expected an object, got"),
    (
        "name-missing",
        json.dumps({**GOOD, "cells": [{"axes": {}, "run_dir": "cells/x"}]}),
        "cells[0].name: required key is missing",
    ),
    ("name-a-number", json.dumps(cell(name=7)), "cells[0].name: expected a string, got int 7"),
    ("name-null", json.dumps(cell(name=None)), "cells[0].name: expected a string, got NoneType"),
    ("name-empty", json.dumps(cell(name="")), "cells[0].name: expected a cell's name"),
    ("name-path", json.dumps(cell(name="../x")), "cells[0].name: expected a cell's name (letters"),
    ("name-slash", json.dumps(cell(name="a/b")), "cells[0].name: expected a cell's name"),
    (
        "name-twice",
        json.dumps({**GOOD, "cells": GOOD["cells"] * 2}),
        "cells[1].name: a second cell named 't.chat'",
    ),
    ("run-dir-out", json.dumps(cell(run_dir="../elsewhere")), "cells[0].run_dir: expected a dir"),
    ("run-dir-abs", json.dumps(cell(run_dir="/etc")), "cells[0].run_dir: expected a directory"),
    ("run-dir-number", json.dumps(cell(run_dir=5)), "cells[0].run_dir: expected str | None, got"),
    ("axes-label", json.dumps(cell(axes={"taskset": 1})), "cells[0].axes.taskset: expected a str"),
    ("settings-a-list", json.dumps(cell(settings=[])), "cells[0].settings: expected an object"),
    ("explicit-text", json.dumps(cell(explicit="no")), "cells[0].explicit: expected a boolean"),
    ("concurrency-text", json.dumps({**GOOD, "concurrency": "4"}), "concurrency: expected int"),
    ("concurrency-bool", json.dumps({**GOOD, "concurrency": True}), "concurrency: expected int"),
    ("concurrency-zero", json.dumps({**GOOD, "concurrency": 0}), "concurrency: expected at least"),
    ("created-text", json.dumps({**GOOD, "created_at": "today"}), "created_at: expected float"),
    ("job-axes", json.dumps({**GOOD, "axes": {"model": "a"}}), "axes.model: expected a list"),
    ("job-name", json.dumps({**GOOD, "name": ["x"]}), "name: expected a string, got list"),
    ("unknown-key", json.dumps({**GOOD, "celss": []}), "celss: unknown key"),
    (
        "nan",
        json.dumps({**GOOD, "created_at": float("nan")}),
        "cannot read it: NaN is not a JSON number",
    ),
    (
        "infinity",
        json.dumps(cell(settings={"timeout": float("inf")})),
        "cannot read it: Infinity is not a JSON number",
    ),
    (
        "duplicate-key",
        json.dumps(GOOD)[:-1] + ', "name": "other"}',
        "cannot read it: duplicate key 'name' in one object",
    ),
    ("torn", json.dumps(GOOD)[:60], "cannot read it: invalid JSON: "),
    ("kind", json.dumps({**GOOD, "kind": "x"}), "not an agentkit job file (kind is not "),
    ("version", json.dumps({**GOOD, "format_version": True}), "format_version True; this agent"),
]


def agentkit_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agentkit", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=cwd,
        env={**os.environ, "NO_COLOR": "1"},
    )


def one_error_line(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr and proc.stdout == ""
    [line] = proc.stderr.strip().splitlines()
    return line


@pytest.mark.parametrize(("text", "message"), [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_a_malformed_job_json_is_one_error_naming_the_file_and_the_field(
    tmp_path: Path, text: str, message: str
) -> None:
    job = tmp_path / "job"
    (job / "cells").mkdir(parents=True)
    (job / "job.json").write_text(text)
    line = one_error_line(agentkit_cli("job", "show", "job", cwd=tmp_path))
    assert line.startswith(f"Error: job/job.json: {message}"), line
    with pytest.raises(JobDirError) as raised:
        agentkit.jobs.open(job)
    assert f"Error: {raised.value}" == line.replace("job/job.json", str(job / "job.json"))
    assert sorted(p.name for p in job.iterdir()) == ["cells", "job.json"]  # nothing written


def test_the_good_document_reads(tmp_path: Path) -> None:
    (tmp_path / "job.json").write_text(json.dumps(GOOD))
    job = agentkit.jobs.open(tmp_path)
    assert [(c.name, c.run_dir, c.state()) for c in job.cells] == [
        ("t.chat", tmp_path / "cells" / "t.chat", "not started")
    ]
    # a cell's run_dir may be left out: cells/<name>
    (tmp_path / "job.json").write_text(json.dumps(cell(run_dir=None)))
    assert agentkit.jobs.open(tmp_path).cells[0].run_dir == tmp_path / "cells" / "t.chat"


@pytest.mark.parametrize("case", ["cells-a-string", "name-missing", "nan"])
def test_every_command_that_reads_a_job_gives_the_same_error(tmp_path: Path, case: str) -> None:
    [(text, message)] = [b[1:] for b in BAD if b[0] == case]
    job = tmp_path / "job"
    (job / "cells").mkdir(parents=True)
    (job / "job.json").write_text(text)
    for command in (("compare", "job", "a", "b"), ("run", "--resume", "job")):
        line = one_error_line(agentkit_cli("job", *command, cwd=tmp_path))
        assert line.startswith(f"Error: job/job.json: {message}"), (command, line)
    assert sorted(p.name for p in job.iterdir()) == ["cells", "job.json"]
