"""A job's matrix on request headers: names reach the model server as written, and a
secret-looking value is labelled, read from the environment and never written.

``"headers.X-Route-Tag" = [...]`` used to reach the server as ``X_Route_Tag``, and
``"headers.X-Api-Key" = ["sk-..."]`` put the key into the cell's directory name and
job.json. These run real jobs (``agentkit job run``, a subprocess) against the
scripted model server on loopback, read the requests it received, and search every
file of the job directory, every file name and everything printed for the secrets.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from agentkit import Job, ValidationError
from agentkit.jobs import JobDirError
from agentkit.secrets import looks_like_key
from agentkit.testing.model_server import ScriptedModelServer

ROOT = Path(__file__).resolve().parents[1]
ARITH = f"jsonl:{ROOT / 'examples' / 'jsonl' / 'arithmetic.jsonl'}"

SECRET_A = "sk-live-routeA-0c1d2e3f4a5b6c7d"
SECRET_B = "hunter2-route-token-of-b"  # no key's shape: secret by its header's name
SECRET_C = "hunter2-user-c"  # neither: secret because it is read from the environment
SECRETS = (SECRET_A, SECRET_B, SECRET_C)


def agentkit_cli(
    *args: str, cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}
    return subprocess.run(
        [sys.executable, "-m", "agentkit", *args],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=cwd,
        env={**base, "NO_COLOR": "1", **(env or {})},
    )


def job_file(tmp_path: Path, base_url: str, matrix: str) -> Path:
    path = tmp_path / "job.toml"
    path.write_text(
        f"""
[job]
name = "hdr"
rollouts_per_task = 1

[[tasksets]]
spec = "{ARITH}"
limit = 1

[[harnesses]]
name = "chat"

[[models]]
name = "scripted-model"
base_url = "{base_url}"

[matrix]
{matrix}
"""
    )
    return path


def everything_written(job_dir: Path) -> bytes:
    """Every file's bytes and every path under the job directory."""
    out = [str(job_dir).encode()]
    for path in sorted(job_dir.rglob("*")):
        out.append(str(path.relative_to(job_dir)).encode())
        if path.is_file():
            out.append(path.read_bytes())
    return b"\n".join(out)


def test_header_names_reach_the_model_server_as_written(
    tmp_path: Path, model_server: ScriptedModelServer
) -> None:
    job_file(tmp_path, model_server.base_url, '"headers.X-Route-Tag" = ["a", "b"]')
    (tmp_path / "job.toml").write_text(
        (tmp_path / "job.toml").read_text()
        + '\n[[exclude]]\nX-Route-Tag = "b"\nX-Trace-Mode = "off"\n'
    )
    proc = agentkit_cli(
        "job", "run", "job.toml", "--out", "job", "--no-progress",
        "--matrix", "headers.X-Trace-Mode=on,off",  # a flag's header name, as written
        "--set", "headers.X-Team-Name=evals",
        cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    cells = sorted(p.name for p in (tmp_path / "job" / "cells").iterdir())
    assert cells == [
        "arithmetic.chat.scripted-model.X-Route-Tag=a.X-Trace-Mode=off",
        "arithmetic.chat.scripted-model.X-Route-Tag=a.X-Trace-Mode=on",
        "arithmetic.chat.scripted-model.X-Route-Tag=b.X-Trace-Mode=on",
    ]
    sent = sorted(
        (r.headers.get("x-route-tag"), r.headers.get("x-trace-mode"), r.headers["x-team-name"])
        for r in model_server.model_requests
    )
    assert sent == [("a", "off", "evals"), ("a", "on", "evals"), ("b", "on", "evals")]
    for request in model_server.model_requests:
        assert not [name for name in request.headers if "_" in name], request.headers
    stored = json.loads((tmp_path / "job" / "job.json").read_text())
    assert list(stored["axes"]) == [
        "taskset", "harness", "model", "headers.X-Route-Tag", "headers.X-Trace-Mode",
    ]  # fmt: skip
    assert stored["cells"][0]["settings"]["headers"] == {
        "X-Route-Tag": "a",
        "X-Trace-Mode": "on",
        "X-Team-Name": "evals",
    }


def test_secret_matrix_values_are_read_from_the_environment_and_never_written(
    tmp_path: Path, model_server: ScriptedModelServer
) -> None:
    env = {"ROUTE_KEY_A": SECRET_A, "ROUTE_KEY_B": SECRET_B, "ROUTE_USER": SECRET_C}
    job_file(
        tmp_path,
        model_server.base_url,
        '"headers.X-Route-Token" = [{label = "keyA", env = "ROUTE_KEY_A"}, '
        '{label = "keyB", env = "ROUTE_KEY_B"}]\n'
        '"sampling_args.user" = [{label = "someone", env = "ROUTE_USER"}]',
    )
    run = agentkit_cli("job", "run", "job.toml", "--out", "job", cwd=tmp_path, env=env)
    assert run.returncode == 0, run.stderr
    # the model server got each cell's values ...
    requests = model_server.model_requests
    assert sorted(r.headers["x-route-token"] for r in requests) == sorted([SECRET_A, SECRET_B])
    assert [r.body["user"] for r in requests] == [SECRET_C, SECRET_C]
    job_dir = tmp_path / "job"
    assert sorted(p.name for p in (job_dir / "cells").iterdir()) == [
        "arithmetic.chat.scripted-model.X-Route-Token=keyA.user=someone",
        "arithmetic.chat.scripted-model.X-Route-Token=keyB.user=someone",
    ]
    stored = json.loads((job_dir / "job.json").read_text())
    assert stored["spec"]["matrix"] == {
        "headers.X-Route-Token": [
            {"label": "keyA", "env": "ROUTE_KEY_A"},
            {"label": "keyB", "env": "ROUTE_KEY_B"},
        ],
        "sampling_args.user": [{"label": "someone", "env": "ROUTE_USER"}],
    }
    settings = stored["cells"][0]["settings"]
    assert settings["headers"] == {"X-Route-Token": "***"}
    assert settings["sampling_args"] == {"user": "***"}
    # ... and nothing the job wrote or printed holds it: dry run, run, show, resume
    dry = agentkit_cli("job", "run", "job.toml", "--dry-run", "--json", cwd=tmp_path, env=env)
    assert dry.returncode == 0, dry.stderr
    show = agentkit_cli("job", "show", "job", cwd=tmp_path)
    assert show.returncode == 0, show.stderr
    again = agentkit_cli("job", "run", "--resume", "job", cwd=tmp_path, env=env)
    assert again.returncode == 0, again.stderr  # the stored job reads the variables again
    written = everything_written(job_dir)
    printed = "".join(p.stdout + p.stderr for p in (run, dry, show, again))
    for secret in SECRETS:
        assert secret.encode() not in written
        assert secret not in printed
    assert b"X-Route-Token" in written  # the header is named, its value is not


@pytest.mark.parametrize(
    ("matrix", "reason"),
    [
        ('"headers.X-Api-Key" = ["sk-live-0123456789abcdef"]', "a value of 'headers.X-Api-Key'"),
        ('"headers.Authorization" = ["Bearer not-a-key-shape"]', "a value of 'headers.Author"),
        ('[matrix.headers]\napi-key = ["plain-words-here"]', "a value of 'headers.api-key'"),
        ('"headers.X-Route-Tag" = ["a", "sk-live-0123456789abcdef"]', "looks like a key"),
        ('"harness_options.system_prompt" = ["ghp_0123456789abcdefghij"]', "looks like a key"),
        ('"sampling_args.user" = ["u-9fK2mQ7xLp3RtZ8wYv6BnC4d"]', "looks like a key"),
        ('"taskset_options.api_token" = ["x", "y"]', "a value of 'taskset_options.api_token'"),
    ],
    ids=["x-api-key", "authorization", "api-key", "key-shaped", "github", "random", "by-name"],
)
def test_a_secret_looking_matrix_value_without_a_label_is_refused_without_echoing_it(
    tmp_path: Path, matrix: str, reason: str
) -> None:
    sub_table = matrix.startswith("[matrix.headers]")
    path = job_file(tmp_path, "http://127.0.0.1:9/v1", "" if sub_table else matrix)
    if sub_table:  # the same key as a sub-table of [matrix]
        path.write_text(path.read_text() + matrix + "\n")
    proc = agentkit_cli("job", "run", "job.toml", "--dry-run", cwd=tmp_path)
    assert proc.returncode == 2 and proc.stdout == "" and "Traceback" not in proc.stderr
    [line] = proc.stderr.splitlines()
    assert line.startswith("Error: job.toml: matrix.") and reason in line, line
    assert '{label = "...", env = "VAR"}' in line
    for value in ("sk-live-0123", "Bearer", "plain-words", "ghp_", "u-9fK2", '"x"'):
        assert value not in line
    assert not (tmp_path / "jobs").exists()


def test_the_matrix_flag_refuses_a_key_the_same_way(tmp_path: Path) -> None:
    proc = agentkit_cli(
        "job", "run", "--taskset", ARITH, "--harness", "chat", "--model", "m", "--dry-run",
        "--matrix", "headers.X-Api-Key=sk-live-0123456789abcdef",
        cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 2
    assert "the command line: matrix.headers.X-Api-Key[0]: a value of" in proc.stderr
    assert "sk-live-0123456789abcdef" not in proc.stderr + proc.stdout


def data(matrix: dict[str, Any]) -> dict[str, Any]:
    return {
        "tasksets": [{"spec": ARITH}],
        "harnesses": [{"name": "chat"}],
        "models": [{"name": "m"}],
        "matrix": matrix,
    }


def test_a_labelled_secret_value_is_kept_for_the_run_and_hidden_everywhere(
    tmp_path: Path,
) -> None:
    secret = "sk-live-labelled-0123456789"
    j = Job.from_mapping(
        data(
            {
                "headers.X-Api-Key": [
                    {"label": "k1", "value": secret},
                    {"label": "k2", "env": "HOME"},
                ]
            }
        ),
        source="job.toml",
    )
    assert [c.name for c in j.cells] == [
        "arithmetic.chat.m.X-Api-Key=k1",
        "arithmetic.chat.m.X-Api-Key=k2",
    ]
    assert j.cells[0].settings["headers"] == {"X-Api-Key": secret}  # the run gets it
    assert j.cells[1].settings["headers"] == {"X-Api-Key": os.environ["HOME"]}
    text = json.dumps(j.document) + json.dumps([c.to_json() for c in j.cells])
    assert secret not in text and os.environ["HOME"] not in text
    assert j.document["matrix"]["headers.X-Api-Key"] == [
        {"label": "k1", "value": "***"},
        {"label": "k2", "env": "HOME"},
    ]
    assert looks_like_key(secret)
    # a stored job holding a written secret cannot be resumed without its file
    job_dir = tmp_path / "job"
    job_dir.mkdir()
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
    with pytest.raises(
        JobDirError, match=r"held secrets \(matrix\.headers\.X-Api-Key\[0\]\.value\)"
    ):
        Job.from_job_dir(job_dir)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (
            {"label": "k", "env": "AGENTKIT_TEST_UNSET_VAR"},
            "env: environment variable 'AGENTKIT_TEST_UNSET_VAR' is not set",
        ),
        (
            {"label": "k", "env": "HOME", "value": "x"},
            "expected a value, or a table {label = ..., value = ...}",
        ),
        ({"label": "k"}, "expected a value, or a table"),
    ],
    ids=["unset", "both", "neither"],
)
def test_the_environment_form_is_checked(value: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError) as raised:
        Job.from_mapping(data({"headers.X-Api-Key": [value]}), source="job.toml")
    assert message in str(raised.value)


def test_settings_named_like_tokens_are_not_secrets() -> None:
    j = Job.from_mapping(
        data(
            {
                "max_tokens": [64, 128],
                "sampling_args.max_completion_tokens": [10],
                "harness_options.max_tokens": [5],
                "headers.X-Request-Id": ["550e8400-e29b-41d4-a716-446655440000"],
            }
        )
    )
    assert j.cells[0].name == (
        "arithmetic.chat.m.max_tokens=64.max_completion_tokens=10.harness_options.max_tokens=5"
        ".X-Request-Id=550e8400-e29b-41d4-a716-446655440000"
    )


def test_a_secret_too_short_to_redact_is_still_hidden_in_job_json(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Values under 8 characters are not redacted from runs (docs/security.md), but a
    secret matrix value never reaches job.json or the dry run's plan, whatever its
    length."""
    monkeypatch.setenv("SHORT_SECRET", "pw1")
    j = Job.from_mapping(
        data({"sampling_args.user": [{"label": "u", "env": "SHORT_SECRET"}]}), source="job.toml"
    )
    [cell] = j.cells
    assert cell.settings["sampling_args"] == {"user": "pw1"}
    assert cell.to_json()["settings"]["sampling_args"] == {"user": "***"}
    plan = j.plan(out="unused")
    assert plan["cells"][0]["context"]["sampling_args"] == {"user": "***"}
    assert '"pw1"' not in json.dumps(plan)
