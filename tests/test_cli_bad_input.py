"""Bad input that used to get through ``agentkit run``: real subprocesses, the scripted server.

- a harness that calls a model, run without one, is stopped by the preflight
  (exit 2), not run to a harness_setup failure per rollout;
- a reply nested 200,000 levels deep, or with usage counts of the wrong
  type, is ``model_bad_response`` with our message, never Python's.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from agentkit.testing.model_server import ScriptedModelServer

ROOT = Path(__file__).resolve().parents[1]
ARITHMETIC = ROOT / "examples" / "jsonl" / "arithmetic.jsonl"
HARBOR = ROOT / "examples" / "harbor"
FLEET_TASKS = ROOT / "examples" / "fleet" / "tasks.json"
FLEET_ORACLE = ROOT / "examples" / "fleet" / "oracle_script.json"
DEEP = "[" * 200_000 + "]" * 200_000


def agentkit(*args: str, **extra: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("FLEET_API_KEY", "OPENAI_API_KEY")}
    env.pop("AGENTKIT_PLUGINS", None)
    env.pop("AGENTKIT_DISABLE_PLUGINS", None)
    env.update(extra)
    return subprocess.run(
        [sys.executable, "-m", "agentkit", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def one_error_line(proc: subprocess.CompletedProcess[str]) -> str:
    """The run was refused with status 2 and one ``Error:`` line, no traceback."""
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), proc.stderr
    return lines[0]


def rollouts(run: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run / "rollouts.jsonl").read_text().splitlines()]


# -- 1. a model harness without a model ------------------------------------------


def test_a_model_harness_without_a_model_is_stopped_by_the_preflight(
    tmp_path: Path, model_server: ScriptedModelServer
) -> None:
    out = tmp_path / "run"
    base = ("run", f"jsonl:{ARITHMETIC}", "chat", "--base-url", model_server.base_url)
    error = one_error_line(agentkit(*base, "--out", str(out)))
    assert error == (
        "Error: the 'chat' harness calls a model, and none is given: pass --model NAME "
        "or -H model=NAME"
    )
    assert not out.exists() and model_server.chat_requests == []
    # the harness's own model option is a model too
    ran = agentkit(*base, "-H", "model=scripted-model", "--limit", "1", "--out", str(out))
    assert ran.returncode == 0, ran.stderr
    assert rollouts(out)[0]["error_kind"] is None


def test_fleet_without_a_model_is_stopped_by_the_preflight(tmp_path: Path) -> None:
    out = tmp_path / "run"
    error = one_error_line(
        agentkit("run", f"fleet:{FLEET_TASKS}", "fleet-tool-call", "--out", str(out))
    )
    assert "the 'fleet-tool-call' harness calls a model, and none is given" in error
    assert not out.exists()


# -- 3. replies our parser must refuse with our own message ------------------------


def run_one(
    tmp_path: Path, server: ScriptedModelServer, harness: str, *options: str
) -> dict[str, Any]:
    """One rollout against ``server``; returns its record (the run itself succeeds)."""
    out = tmp_path / "run"
    proc = agentkit(
        "run",
        *(
            (f"jsonl:{ARITHMETIC}", harness)
            if harness == "chat"
            else (f"fleet:{FLEET_TASKS}", harness)
        ),
        "--model",
        "m",
        "--base-url",
        server.base_url,
        "--limit",
        "1",
        "--out",
        str(out),
        *options,
    )
    assert proc.returncode == 0, proc.stderr
    assert "Recursion" not in proc.stdout + proc.stderr and "Traceback" not in proc.stderr
    (record,) = rollouts(out)
    return record


@pytest.mark.parametrize("stream", ["false", "true"])
def test_a_reply_nested_200000_levels_deep_is_a_bad_response(
    tmp_path: Path, model_server: ScriptedModelServer, stream: str
) -> None:
    model_server.set_script({"default": {"raw_body": DEEP}})
    record = run_one(tmp_path, model_server, "chat", "-H", f"stream={stream}")
    what = "event" if stream == "true" else "response"
    assert (record["error_kind"], record["error"]) == (
        "model_bad_response",
        f"the model endpoint sent a malformed {what}: it is nested more than 100 levels deep "
        "(MAX_NESTING_DEPTH)",
    )
    assert record["infra_error"] is False and record["reward"] == 0.0  # it ran; the reply is bad


def test_an_error_body_nested_too_deep_is_reported_as_text(
    tmp_path: Path, model_server: ScriptedModelServer
) -> None:
    model_server.set_script({"default": {"status": 400, "raw_body": DEEP}})
    record = run_one(tmp_path, model_server, "chat")
    assert record["error_kind"] == "model_bad_request"
    assert record["error"] == f"model endpoint answered HTTP 400: {DEEP[:500]}"


COUNTS = {"prompt_tokens": "12", "completion_tokens": 3}
WRONG_USAGE = {
    "false": {
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "2"}}],
        "usage": COUNTS,
    },
    "true": {"choices": [{"index": 0, "delta": {"content": "2"}}], "usage": COUNTS},
}


@pytest.mark.parametrize("stream", ["false", "true"])
def test_usage_with_wrong_types_is_a_bad_response_naming_the_field(
    tmp_path: Path, model_server: ScriptedModelServer, stream: str
) -> None:
    model_server.set_script({"default": {"body": WRONG_USAGE[stream]}})
    record = run_one(tmp_path, model_server, "chat", "-H", f"stream={stream}")
    assert (record["error_kind"], record["error"]) == (
        "model_bad_response",
        "the model response is malformed: usage.prompt_tokens: expected a whole number of "
        "tokens >= 0 or null, got a string ('12')",
    )


def test_a_stream_chunk_of_the_wrong_shape_is_a_bad_response(
    tmp_path: Path, model_server: ScriptedModelServer
) -> None:
    model_server.set_script({"default": {"body": {"choices": [{"delta": "text"}]}}})
    record = run_one(tmp_path, model_server, "chat", "-H", "stream=true")
    assert (record["error_kind"], record["error"]) == (
        "model_bad_response",
        "a stream chunk's delta is a string, not an object",
    )


@pytest.mark.parametrize(
    ("reply", "error"),
    [
        (
            {"raw_body": DEEP},
            "the model endpoint sent a malformed response: it is nested more than 100 "
            "levels deep (MAX_NESTING_DEPTH)",
        ),
        (
            {"body": {**WRONG_USAGE["false"], "usage": {"prompt_tokens_details": []}}},
            "the model response is malformed: usage.prompt_tokens_details: expected an object "
            "or null, got a list",
        ),
    ],
)
def test_the_fleet_harness_refuses_the_same_replies(
    tmp_path: Path, model_server: ScriptedModelServer, reply: dict[str, Any], error: str
) -> None:
    model_server.set_script({"default": reply})
    record = run_one(tmp_path, model_server, "fleet-tool-call")
    assert (record["error_kind"], record["error"]) == ("model_bad_response", error)
