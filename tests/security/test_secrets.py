"""Secrets never reach the disk: the API key, host values a task's ``${VAR}`` resolves to,
and values of secret-looking host variables are replaced by ``***`` in every file of the
run directory (records, events, manifest, summary, artifacts, verifier output, kept
sandbox files) and in the printed summary, however a harness or verifier echoes them."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from agentkit import EventRecorder, HarnessResult, ListTaskset, Rubric, Task, registry
from agentkit._redact import Redactor
from agentkit.env import AgentEnv

pytestmark = pytest.mark.anyio

API_KEY = "sk-run-key-0123456789abcdef"
TOKEN = "tok-host-service-9876543210"  # in AK_SERVICE_TOKEN: its name looks secret
TEMPLATED = "templated-value-5555-6666"  # in AK_PLAIN_VALUE, read through ${AK_PLAIN_VALUE}
SECRETS = (API_KEY, TOKEN, TEMPLATED)


def assert_no_secret_in(run: Path, *secrets: str) -> None:
    files = [p for p in run.rglob("*") if p.is_file() and not p.is_symlink()]
    assert files
    for path in files:
        data = path.read_bytes()
        for secret in secrets:
            assert secret.encode() not in data, f"{secret} in {path}"


class Leaky:
    """Echoes every secret it can see: in its output, messages, events and artifact files."""

    async def run(self, task: Task, context: Any = None, on_event: Any = None) -> HarnessResult:
        key = context.resolved_api_key
        token = os.environ["AK_SERVICE_TOKEN"]
        recorder = EventRecorder(task.task_id, context.rollout_id, on_event)
        await recorder.emit("log", message=f"calling with {key} and {token}")
        out = Path(context.artifacts_dir)
        out.mkdir(parents=True, exist_ok=True)
        (out / "harness.log").write_text(f"Authorization: Bearer {key}\ntoken={token}\n")
        big = out / "big.bin"  # a secret straddling the 1 MiB chunks the scrubber reads
        big.write_bytes(b"\0" * ((1 << 20) - 5) + key.encode() + b"\0" * 10)
        (out / "link").symlink_to("/etc/hostname")  # never followed, never rewritten
        return HarnessResult(
            status="failed",
            output=f"{key} {token}",
            messages=[{"role": "assistant", "content": f"the key is {key}"}],
            error=f"leaked {token}",
            error_kind="agent_error",
            events=recorder.events,
            raw={key: token},
        )


async def test_a_harness_echoing_secrets_leaves_none_on_disk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MY_API_KEY", API_KEY)
    monkeypatch.setenv("AK_SERVICE_TOKEN", TOKEN)
    ts = ListTaskset(
        "ts", [Task(task_id="ts:0", input="q", target="a")], default_grading_spec=Rubric([])
    )
    run = tmp_path / "run"
    results = await AgentEnv(ts, Leaky()).evaluate(out=run, api_key_env="MY_API_KEY")
    assert_no_secret_in(run, API_KEY, TOKEN)
    assert API_KEY not in json.dumps(results.summary) and TOKEN not in json.dumps(results.summary)
    artifacts = run / "artifacts" / results.rollouts[0].rollout_id
    assert (artifacts / "harness.log").read_text() == "Authorization: Bearer ***\ntoken=***\n"
    big = (artifacts / "big.bin").read_bytes()
    assert big == b"\0" * ((1 << 20) - 5) + b"***" + b"\0" * 10
    assert (artifacts / "link").is_symlink()
    line = json.loads((run / "rollouts.jsonl").read_text())
    assert line["output"] == "*** ***" and line["raw"] == {"***": "***"}


def test_the_redactor_replaces_whole_secrets_longest_first(tmp_path: Path) -> None:
    redactor = Redactor(["short", "abcdefgh", "abcdefgh-and-more"], registered=False)
    assert redactor.text("x abcdefgh-and-more y abcdefgh z short") == "x *** y *** z short"
    assert redactor.json({"abcdefgh": ["abcdefgh", 1, None]}) == {"***": ["***", 1, None]}
    path = tmp_path / "f"
    path.write_bytes(b"abcdefgh-and-more\n")
    path.chmod(0o640)
    assert redactor.file(path) and path.read_bytes() == b"***\n"
    assert path.stat().st_mode & 0o777 == 0o640
    assert not redactor.file(path)  # nothing left to do: the file is not rewritten
    assert not [p for p in tmp_path.iterdir() if p.name != "f"]


HARBOR_TASK = {
    "task.toml": """schema_version = "1.4"

[task]
name = "agentkit/leaky"

[verifier]
timeout_sec = 60.0
env = { LEAK = "${AK_PLAIN_VALUE}" }

[agent]
timeout_sec = 60.0

[solution]
env = { SOL = "${AK_PLAIN_VALUE}" }
""",
    "instruction.md": "Write the value you are given to /app/out.txt.\n",
    "solution/solve.sh": '#!/bin/sh\necho "solution has $SOL"\necho "$SOL" > /app/out.txt\n',
    "tests/test.sh": (
        '#!/bin/sh\necho "verifier has $LEAK"\n'
        'mkdir -p /logs/artifacts && echo "$LEAK" > /logs/artifacts/copy.txt\n'
        'echo "$LEAK" > /logs/verifier/seen.txt\n'
        "echo 1 > /logs/verifier/reward.txt\n"
    ),
}


def test_harbor_templated_host_values_are_redacted_everywhere(tmp_path: Path) -> None:
    """The verifier and the solution get a host value through ${AK_PLAIN_VALUE} (a name
    that does not look secret) and write it to stdout, verifier logs and artifacts."""
    try:
        registry.get("harness", "oracle")
    except Exception:
        pytest.skip("the harbor plugin is not installed")
    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap is not installed")
    task = tmp_path / "tasks" / "leaky"
    for rel, text in HARBOR_TASK.items():
        path = task / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        if rel.endswith(".sh"):
            path.chmod(0o755)
    run = tmp_path / "run"
    env = {
        **os.environ,
        "AK_PLAIN_VALUE": TEMPLATED,
        "AK_SERVICE_TOKEN": TOKEN,
        "MY_API_KEY": API_KEY,
    }
    done = subprocess.run(
        [
            sys.executable, "-m", "agentkit", "run", f"harbor:{tmp_path / 'tasks'}", "oracle",
            "--api-key-env", "MY_API_KEY", "--keep-sandboxes", "--json", "--out", str(run),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["mean_reward"] == 1.0, summary
    for secret in SECRETS:
        assert secret not in done.stdout and secret not in done.stderr
    assert_no_secret_in(run, *SECRETS)
    # the value did reach the sandbox, and what it wrote is kept, redacted
    copies = [p for p in run.rglob("copy.txt")]
    assert copies and all(p.read_text() == "***\n" for p in copies)
