"""Secret request fields (``-M``) and headers are never printed or written.

``agentkit run --dry-run`` and ``agentkit job run --dry-run`` (text and JSON) show a
secret's name and ``***`` in its place: a field or header whose name says it holds a
credential, and any value shaped like a key whatever its name. A real run sends the
values to the model server and keeps them out of its run directory; resuming it asks
for them again.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from agentkit.testing.model_server import ScriptedModelServer

ROOT = Path(__file__).resolve().parents[1]
ARITH = f"jsonl:{ROOT / 'examples' / 'jsonl' / 'arithmetic.jsonl'}"

BY_NAME = "hunter2-plain-words"  # secret by its name only: api_key, x-route-token
KEY_SHAPED = "sk-proj-0c1d2e3f4a5b6c7d8e9f"  # secret by its shape only
NESTED = "hunter2-nested-auth"  # metadata.auth
HEADER_BY_NAME = "hunter2-header-words"
HEADER_SHAPED = "sk-ant-api03-0c1d2e3f4a5b6c7d"
SECRETS = (BY_NAME, KEY_SHAPED, NESTED, HEADER_BY_NAME, HEADER_SHAPED)

MODEL_ARGS = (
    "-M", f"api_key={BY_NAME}",
    "-M", f"user={KEY_SHAPED}",
    "-M", f'metadata={{"auth": "{NESTED}", "team": "evals"}}',
    "-M", "max_tokens=7",
    "--header", f"X-Route-Token: {HEADER_BY_NAME}",
    "--header", f"X-Trace: {HEADER_SHAPED}",
    "--header", "X-Team-Name: evals",
)  # fmt: skip


def agentkit_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}
    return subprocess.run(
        [sys.executable, "-m", "agentkit", *args],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=cwd,
        env={**env, "NO_COLOR": "1"},
    )


def printed(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 0, proc.stderr
    return proc.stdout + proc.stderr


def assert_hidden(text: str) -> None:
    for secret in SECRETS:
        assert secret not in text
    # the names are shown, their values hidden; what is no secret is shown as it is
    for shown in ("api_key", "user", "auth", "X-Route-Token", "X-Trace", "***", "evals"):
        assert shown in text, shown


def test_run_dry_run_hides_secret_fields_and_headers(tmp_path: Path) -> None:
    base = ("run", ARITH, "chat", "--model", "m", "--base-url", "http://127.0.0.1:9/v1")
    text = printed(agentkit_cli(*base, *MODEL_ARGS, "--dry-run", cwd=tmp_path))
    assert_hidden(text)
    assert '"max_tokens": 7' in text
    plan = json.loads(
        printed(agentkit_cli(*base, *MODEL_ARGS, "--dry-run", "--json", cwd=tmp_path))
    )
    assert_hidden(json.dumps(plan))
    assert plan["context"]["sampling_args"] == {
        "api_key": "***",
        "user": "***",
        "metadata": {"auth": "***", "team": "evals"},
        "max_tokens": 7,
    }
    assert plan["context"]["headers"] == {
        "X-Route-Token": "***",
        "X-Trace": "***",
        "X-Team-Name": "evals",
    }


def test_job_dry_run_hides_secret_fields_and_headers(tmp_path: Path) -> None:
    base = ("job", "run", "--taskset", ARITH, "--harness", "chat", "--model", "m")
    settings = (
        "--base-url", "http://127.0.0.1:9/v1",
        "--set", f"sampling_args.api_key={BY_NAME}",
        "--set", f"sampling_args.user={KEY_SHAPED}",
        "--set", f'sampling_args.metadata={{auth = "{NESTED}", team = "evals"}}',
        "--set", f"headers.X-Route-Token={HEADER_BY_NAME}",
        "--set", f"headers.X-Trace={HEADER_SHAPED}",
        "--set", "headers.X-Team-Name=evals",
    )  # fmt: skip
    assert_hidden(printed(agentkit_cli(*base, *settings, "--dry-run", cwd=tmp_path)))
    plan = printed(agentkit_cli(*base, *settings, "--dry-run", "--json", cwd=tmp_path))
    assert_hidden(plan)


def test_a_run_sends_the_secrets_and_writes_none_of_them(
    tmp_path: Path, model_server: ScriptedModelServer
) -> None:
    base = ("--model", "scripted-model", "--base-url", model_server.base_url)
    run = agentkit_cli(
        "run", ARITH, "chat", *base, *MODEL_ARGS, "--limit", "1", "--out", "run",
        "--no-progress", cwd=tmp_path,
    )  # fmt: skip
    text = printed(run)
    [request] = model_server.model_requests
    assert request.body["api_key"] == BY_NAME and request.body["user"] == KEY_SHAPED
    assert request.body["metadata"] == {"auth": NESTED, "team": "evals"}
    assert request.headers["x-route-token"] == HEADER_BY_NAME
    assert request.headers["x-trace"] == HEADER_SHAPED
    run_dir = tmp_path / "run"
    written = b"\n".join(p.read_bytes() for p in sorted(run_dir.rglob("*")) if p.is_file())
    assert (run_dir / "calls").is_dir()  # the proxy recorded the call, its body redacted
    for secret in SECRETS:
        assert secret.encode() not in written
        assert secret not in text
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["context"]["sampling_args"]["api_key"] == "***"
    # resuming asks for the hidden values again rather than sending ***
    again = agentkit_cli("run", "--resume", "run", "-n", "2", "--no-progress", cwd=tmp_path)
    assert again.returncode != 0 and "Traceback" not in again.stderr
    [line] = again.stderr.splitlines()
    assert "-M api_key" in line and "-M user" in line and "-M metadata" in line, line
    assert "--header X-Route-Token" in line and "pass them again" in line, line
