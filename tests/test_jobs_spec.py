"""The job file: cells of the cross product with stable names, exclusions, explicit
cells, which setting wins, the normalised document, secrets, and every bad input one
clear message (the file, the key path, what was expected; exit status 2)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from agentkit import Job, SpecError, ValidationError
from agentkit.jobs import JobDirError

ROOT = Path(__file__).resolve().parents[1]
ARITH = f"jsonl:{ROOT / 'examples' / 'jsonl' / 'arithmetic.jsonl'}"


def job(data: dict[str, Any]) -> Job:
    return Job.from_mapping(data, source="job.toml")


def names(j: Job) -> list[str]:
    return [c.name for c in j.cells]


def test_the_cross_product_names_cells_by_their_labels() -> None:
    j = job(
        {
            "job": {"name": "sweep"},
            "tasksets": [{"spec": ARITH}, {"spec": "harbor:./examples/harbor", "label": "hb"}],
            "harnesses": [{"name": "chat"}, {"name": "chat", "label": "terse"}],
            "models": [{"name": "openai/gpt-4o-mini"}, {"name": "m2", "label": "small"}],
        }
    )
    assert names(j) == [
        "arithmetic.chat.openai-gpt-4o-mini",
        "arithmetic.chat.small",
        "arithmetic.terse.openai-gpt-4o-mini",
        "arithmetic.terse.small",
        "hb.chat.openai-gpt-4o-mini",
        "hb.chat.small",
        "hb.terse.openai-gpt-4o-mini",
        "hb.terse.small",
    ]
    assert j.axes == {
        "taskset": ["arithmetic", "hb"],
        "harness": ["chat", "terse"],
        "model": ["openai-gpt-4o-mini", "small"],
    }
    cell = j.cell("hb.terse.small")
    assert cell.taskset == "harbor:./examples/harbor" and cell.harness == "chat"
    assert cell.model == "m2" and cell.axes == {
        "taskset": "hb",
        "harness": "terse",
        "model": "small",
    }
    with pytest.raises(SpecError, match=r"has no cell 'nope'; its cells: arithmetic\.chat"):
        j.cell("nope")


def test_a_job_without_models_and_a_matrix() -> None:
    j = job(
        {
            "tasksets": [{"spec": "harbor:./examples/harbor"}],
            "harnesses": [{"name": "oracle"}, {"name": "nop"}],
            "matrix": {
                "max_retries": [0, 2],
                "sandbox_options": {"image": ["host", {"label": "own", "value": "auto"}]},
            },
            "exclude": [{"harness": "nop", "image": "own"}, {"max_retries": 2, "harness": "nop"}],
        }
    )
    assert j.name == "job"
    assert names(j) == [
        "harbor.oracle.max_retries=0.image=host",
        "harbor.oracle.max_retries=0.image=own",
        "harbor.oracle.max_retries=2.image=host",
        "harbor.oracle.max_retries=2.image=own",
        "harbor.nop.max_retries=0.image=host",
    ]
    cell = j.cell("harbor.oracle.max_retries=2.image=own")
    assert cell.settings == {"max_retries": 2, "sandbox_options": {"image": "auto"}}
    assert cell.model is None and "model" not in cell.axes
    assert j.axes["sandbox_options.image"] == ["host", "own"]


def test_matrix_keys_with_the_same_last_part_keep_their_whole_name() -> None:
    j = job(
        {
            "tasksets": [{"spec": ARITH}],
            "harnesses": [{"name": "chat"}],
            "matrix": {
                "sampling_args.seed": [1],
                "harness_options.system_prompt": ["Be brief!"],
                "taskset_options": {},
            },
        }
    )
    assert names(j) == ["arithmetic.chat.seed=1.system_prompt=Be-brief"]
    j = job(
        {
            "tasksets": [{"spec": ARITH}],
            "harnesses": [{"name": "chat"}],
            "matrix": {"sampling_args.max_tokens": [5], "max_tokens": [7]},
        }
    )
    assert names(j) == ["arithmetic.chat.sampling_args.max_tokens=5.max_tokens=7"]


def test_which_setting_wins() -> None:
    """[job] < taskset < harness < model < matrix < [[cells]] < [override]; tables merge
    key by key."""
    j = job(
        {
            "job": {
                "max_turns": 1,
                "timeout": 10.0,
                "sampling_args": {"temperature": 0.1, "top_p": 0.5},
                "harness_options": {"system_prompt": "job"},
            },
            "tasksets": [{"spec": ARITH, "max_turns": 2, "limit": 3}],
            "harnesses": [{"name": "chat", "max_turns": 3, "options": {"max_tokens": 9}}],
            "models": [{"name": "m", "max_turns": 4, "sampling_args": {"temperature": 0.2}}],
            "matrix": {"max_turns": [5]},
            "cells": [{"name": "own", "taskset": "arithmetic", "harness": "chat", "max_turns": 6}],
            "override": {"timeout": 30.0, "sampling_args": {"seed": 7}},
        }
    )
    matrix_cell, own = j.cells
    assert matrix_cell.settings == {
        "max_turns": 5,
        "timeout": 30.0,
        "sampling_args": {"temperature": 0.2, "top_p": 0.5, "seed": 7},
        "limit": 3,
        "model": "m",
    }
    assert matrix_cell.harness_options == {"system_prompt": "job", "max_tokens": 9}
    assert own.name == "own" and own.explicit and own.model is None
    assert own.settings["max_turns"] == 6 and own.settings["timeout"] == 30.0
    options = matrix_cell.run_options(concurrency=16, out="jobs/x/cells/c")
    assert options.concurrency == 16 and options.max_turns == 5 and options.limit == 3
    assert str(options.out) == "jobs/x/cells/c"


def test_the_normalised_document_reads_back_into_the_same_cells() -> None:
    j = job(
        {
            "job": {"name": "n", "concurrency": 3, "rollouts_per_task": 2},
            "tasksets": [{"spec": ARITH, "options": {}}],
            "harnesses": [{"name": "chat", "options": {"system_prompt": "x"}}],
            "models": [{"name": "a/b", "base_url": "http://127.0.0.1:1/v1"}],
            "matrix": {"sampling_args.temperature": [0.0, {"label": "hot", "value": 1.0}]},
            "exclude": [{"temperature": "hot"}],
            "cells": [{"name": "extra", "taskset": "arithmetic", "harness": "chat", "limit": 1}],
        }
    )
    again = Job.from_mapping(json.loads(json.dumps(j.document)))
    assert [c.to_json() for c in again.cells] == [c.to_json() for c in j.cells]
    assert again.document == j.document and again.concurrency == 3
    assert j.document["models"] == [
        {"name": "a/b", "label": "a-b", "base_url": "http://127.0.0.1:1/v1"}
    ]
    assert j.document["exclude"] == [{"sampling_args.temperature": "hot"}]


def test_secrets_are_never_stored(tmp_path: Path) -> None:
    j = job(
        {
            "job": {"headers": {"Authorization": "Bearer sk-job-secret-1234", "X-Team": "evals"}},
            "tasksets": [{"spec": ARITH}],
            "harnesses": [{"name": "chat"}],
            "models": [{"name": "m", "base_url": "http://user:hunter2-secret@127.0.0.1:1/v1"}],
        }
    )
    text = json.dumps(j.document) + json.dumps([c.to_json() for c in j.cells])
    assert "sk-job-secret-1234" not in text and "hunter2-secret" not in text
    assert j.cells[0].to_json()["settings"]["headers"] == {
        "Authorization": "***",
        "X-Team": "evals",
    }
    # the cell itself keeps them, for its run (whose run directory hides them too)
    assert j.cells[0].settings["headers"]["Authorization"] == "Bearer sk-job-secret-1234"
    # a stored job whose secrets were hidden cannot be resumed without its file
    job_dir = tmp_path / "job"
    (job_dir / "cells").mkdir(parents=True)
    (job_dir / "job.json").write_text(
        json.dumps(
            {
                "kind": "agentkit.job",
                "format_version": 1,
                "name": "j",
                "cells": [],
                "spec": j.document,
            }
        )
    )
    with pytest.raises(JobDirError, match=r"held secrets \(job.headers.Authorization, "):
        Job.from_job_dir(job_dir)


def test_job_json_of_another_kind_or_version_is_refused(tmp_path: Path) -> None:
    (tmp_path / "job.json").write_text(json.dumps({"kind": "agentkit.job", "format_version": 99}))
    with pytest.raises(JobDirError, match="format_version 99; this agentkit reads 1"):
        Job.from_job_dir(tmp_path)
    with pytest.raises(JobDirError, match="not a job directory"):
        Job.from_job_dir(tmp_path / "cells")


# -- bad input: one message each ------------------------------------------------------------

GOOD = f"""
[job]
name = "bad"

[[tasksets]]
spec = "{ARITH}"

[[harnesses]]
name = "chat"

[[models]]
name = "m"
"""


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            ("[job]\n", "[job]\nconcurency = 4\n"),
            "job.toml: job.concurency: unknown run option; known: allow_network, api_key_env,",
        ),
        (
            ("[job]\n", '[job]\nrollouts_per_task = "4"\n'),
            "job.toml: job.rollouts_per_task: expected an integer, got str '4'",
        ),
        (
            ("[job]\n", "[job]\nconcurrency = 0\n"),
            "job.toml: job.concurrency: concurrency must be at least 1, got 0",
        ),
        (
            ('name = "chat"', 'name = "chatt"'),
            "job.toml: harnesses[0].name: unknown harness 'chatt'; installed: chat,",
        ),
        (
            ('name = "chat"', 'name = "chat"\noptions = { system_promt = "x" }'),
            "job.toml: harnesses[0].options: unknown option 'system_promt' for harness 'chat'",
        ),
        (
            ('spec = "jsonl:', 'spec = "jsonlx:'),
            "job.toml: tasksets[0].spec: unknown taskset provider 'jsonlx'",
        ),
        (
            ('name = "m"', 'name = "m"\napi_key = "sk-live-0123456789abcdef"'),
            "job.toml: models[0].api_key: a key is never written in a job file: give api_key_env",
        ),
        (
            ('name = "m"', 'name = "m"\nmax_turns = 0'),
            "job.toml: models[0].max_turns: max_turns must be at least 1, got 0",
        ),
        (("[job]\n", "[jobs]\n"), "job.toml: jobs: unknown table; a job file has job, tasksets"),
        (("[job]\n", "[job]\nout = 'x'\n"), "job.toml: job.out: not a setting of a job file"),
        (
            ('name = "m"', 'name = "m"\n[[models]]\nname = "n"\nlabel = "m"'),
            "job.toml: models[1].label: the label 'm' is already models[0]'s",
        ),
        (
            ("[job]\n", "[matrix]\nmax_turns = 3\n[job]\n"),
            "job.toml: matrix.max_turns: expected a non-empty list of values, got int 3",
        ),
        (
            ("[job]\n", "[[exclude]]\nmodel = 'x'\n[job]\n"),
            "job.toml: exclude[0].model: expected one of m",
        ),
        (
            ("[job]\n", "[[cells]]\nname = 'c'\ntaskset = 'arithmetic'\nharness = 'nop2'\n[job]\n"),
            "job.toml: cells[0].harness: no [[harnesses]] entry is labelled 'nop2'; labels: chat",
        ),
        (("[job]\n", "[job\n"), "job.toml: not valid TOML"),
        (
            ("[[harnesses]]", "[harnesses]"),
            "job.toml: harnesses: expected an array of tables ([[harnesses]]), got a table",
        ),
    ],
    ids=[
        "unknown-key",
        "wrong-type",
        "out-of-range",
        "unknown-harness",
        "unknown-harness-option",
        "unknown-provider",
        "api-key-in-file",
        "model-setting-range",
        "unknown-table",
        "job-level-only",
        "duplicate-label",
        "matrix-not-a-list",
        "exclude-unknown-label",
        "cell-unknown-label",
        "toml-syntax",
        "not-an-array",
    ],
)
def test_bad_job_files_get_one_clear_message(
    tmp_path: Path, change: tuple[str, str], message: str
) -> None:
    old, new = change
    assert old in GOOD
    path = tmp_path / "job.toml"
    path.write_text(GOOD.replace(old, new, 1))
    proc = subprocess.run(
        [sys.executable, "-m", "agentkit", "job", "run", "job.toml", "--dry-run"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        env={**os.environ, "NO_COLOR": "1"},
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stdout == ""
    [line] = proc.stderr.splitlines()
    assert line.startswith(f"Error: {message}"), line
    assert "sk-live-0123456789abcdef" not in proc.stderr
    with pytest.raises((ValidationError, SpecError)) as raised:
        Job.from_toml(path)
    assert str(raised.value).endswith(line[len("Error: job.toml") :]) or "TOML" in line


def test_flags_alone_make_a_job_and_their_errors_name_the_flag(tmp_path: Path) -> None:
    def dry(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "agentkit", "job", "run", "--dry-run", "--json", *args],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=tmp_path,
        )

    proc = dry(
        "--taskset", ARITH, "--harness", "chat", "--model", "a", "--model", "b",
        "--matrix", "sampling_args.temperature=0,0.5", "--set", "max_turns=2", "-n", "3",
        "-c", "5",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    plan = json.loads(proc.stdout)
    assert plan["concurrency"] == 5 and plan["name"] == "job"
    assert [c["name"] for c in plan["cells"]] == [
        "arithmetic.chat.a.temperature=0",
        "arithmetic.chat.a.temperature=0.5",
        "arithmetic.chat.b.temperature=0",
        "arithmetic.chat.b.temperature=0.5",
    ]
    assert plan["cells"][0]["settings"] == {
        "model": "a",
        "sampling_args": {"temperature": 0},
        "max_turns": 2,
        "rollouts_per_task": 3,
    }
    bad = dry("--taskset", ARITH, "--harness", "chat", "--set", "max_turns=two")
    assert bad.returncode == 2
    assert bad.stderr.strip() == "Error: --set max_turns: expected int | None, got str 'two'"
    bad = dry("--taskset", ARITH, "--harness", "chatt")
    assert bad.returncode == 2
    assert bad.stderr.startswith("Error: the command line: harnesses[0].name: unknown harness")
    missing = dry("--harness", "chat")
    assert missing.returncode == 2 and "give a JOB_FILE, or at least --taskset" in missing.stderr
