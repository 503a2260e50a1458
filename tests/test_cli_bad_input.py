"""Bad input that used to get through ``agentkit run``: real subprocesses, the scripted server.

- a harness that calls a model, run without one, is stopped by the preflight
  (exit 2), not run to a harness_setup failure per rollout;
- a taskset paired with a harness that can run none of its tasks (Harbor
  tasks with ``fleet-tool-call``) is refused before the first rollout, and
  tasks a harness cannot run among others are left out and listed, never
  scored 0;
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

from agentkit import AgentEnv, SpecError
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


# -- 2. a taskset the harness cannot run ---------------------------------------


def test_harbor_tasks_with_the_fleet_harness_are_refused_before_the_first_rollout(
    tmp_path: Path, model_server: ScriptedModelServer
) -> None:
    out = tmp_path / "run"
    spec = f"harbor:{HARBOR}"
    args = ("run", spec, "fleet-tool-call", "--model", "m", "--base-url", model_server.base_url)
    error = one_error_line(agentkit(*args, "--out", str(out)))
    assert error.startswith(
        f"Error: harness 'fleet-tool-call' cannot run any of the 5 selected tasks of taskset "
        f"'{spec}': for each, no Fleet environment serves the task (it has no env_key)"
    ), error
    assert "agentkit list harnesses" in error
    assert not out.exists() and model_server.requests == []
    # a dry run says the same, and so does the Python API
    assert one_error_line(agentkit(*args, "--dry-run")) == error
    env = AgentEnv.from_names(spec, "fleet-tool-call")
    with pytest.raises(SpecError) as refused:
        env.run(model="m", base_url=model_server.base_url)
    assert f"Error: {refused.value}" == error


def test_the_mcp_provider_without_a_server_is_refused(
    tmp_path: Path, model_server: ScriptedModelServer
) -> None:
    out = tmp_path / "run"
    spec = f"fleet:{FLEET_TASKS}"
    args = ("run", spec, "fleet-tool-call", "-H", "provider=mcp", "--model", "m")
    error = one_error_line(agentkit(*args, "--base-url", model_server.base_url, "--out", str(out)))
    assert error == (
        f"Error: harness 'fleet-tool-call' cannot run any of the 12 selected tasks of taskset "
        f"'{spec}': for each, provider 'mcp' needs mcp_url or mcp_command (-H mcp_url=URL or "
        "-H mcp_command=CMD). Pair the taskset with a harness that runs its tasks "
        "(agentkit list harnesses)"
    )
    assert not out.exists() and model_server.requests == []


@pytest.mark.parametrize("harness", ["oracle", "nop"])
def test_other_tasks_with_a_harbor_harness_are_refused(tmp_path: Path, harness: str) -> None:
    out = tmp_path / "run"
    error = one_error_line(agentkit("run", f"jsonl:{ARITHMETIC}", harness, "--out", str(out)))
    assert error == (
        f"Error: harness {harness!r} cannot run any of the 10 selected tasks of taskset "
        f"'jsonl:{ARITHMETIC}': for each, the task is not a Harbor task (a task directory "
        "with tests/test.sh), and this harness runs only Harbor tasks. Pair the taskset with "
        "a harness that runs its tasks (agentkit list harnesses)"
    )
    assert not out.exists()


def test_tasks_the_harness_cannot_run_are_left_out_listed_and_not_retried(
    tmp_path: Path,
) -> None:
    records = json.loads(FLEET_TASKS.read_text())["tasks"]
    crm = {**records[0], "task_key": "crm-lookup", "env_key": "crm", "prompt": "Find it."}
    tasks = tmp_path / "tasks.json"
    tasks.write_text(json.dumps({"tasks": [records[0], crm]}))
    out = tmp_path / "run"
    run = ("run", f"fleet:{tasks}", "fleet-tool-call", "--model", f"scripted:{FLEET_ORACLE}")
    proc = agentkit(*run, "--out", str(out), "--no-progress")
    assert proc.returncode == 0, proc.stderr
    reason = (
        "no Fleet environment serves the task (it has env_key 'crm'): set FLEET_API_KEY for "
        "the Fleet platform, give -H mcp_url=URL or -H mcp_command=CMD, or run tasks whose "
        "env_key the bundled local environment serves (bookings)"
    )
    assert (
        "Warning: harness 'fleet-tool-call' cannot run 1 of the 2 selected tasks; it is left "
        f"out of the run (no rollouts, not in the statistics): fleet:crm-lookup: {reason}"
    ) in proc.stderr
    assert "1 task left out" in proc.stdout
    # one rollout ran and scored; the other task has none, and is in no statistic
    assert [(r["task_id"], r["reward"]) for r in rollouts(out)] == [
        (f"fleet:{records[0]['task_key']}", 1.0)
    ]
    left_out = [{"task_id": "fleet:crm-lookup", "reason": reason}]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["unsupported_tasks"] == left_out
    assert (summary["planned"], summary["mean_reward"], summary["complete"]) == (1, 1.0, True)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["plan"]["unsupported"] == left_out
    shown = agentkit("show", str(out), "--json")
    assert json.loads(shown.stdout)["unsupported_tasks"] == left_out
    # resume does not try it again: the same harness would refuse it again
    again = agentkit("run", "--resume", str(out), "--no-progress")
    assert again.returncode == 0, again.stderr
    assert "0 rollouts to run (1 task × 1); 1 of 1 already finished" in again.stderr
    assert len(rollouts(out)) == 1
    # the harness could run it now (the Fleet platform): a resumed run keeps its tasks
    error = one_error_line(agentkit("run", "--resume", str(out), FLEET_API_KEY="fk-test-123456"))
    assert (
        "the tasks differ (the tasks the harness can run changed since the run started): "
        "new: fleet:crm-lookup"
    ) in error


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


def test_a_tool_call_nested_200000_levels_deep_is_a_parse_error_of_ours(
    tmp_path: Path, model_server: ScriptedModelServer
) -> None:
    deep = '{"a":' * 200_000 + "1" + "}" * 200_000
    call = f'<tool_call>{{"name": "search", "arguments": {deep}}}</tool_call>'
    model_server.set_script({"default": {"content": call}})
    record = run_one(tmp_path, model_server, "fleet-tool-call", "--max-turns", "1")
    assert (record["status"], record["raw"]["parse_errors"]) == ("completed", 1)
    events = [json.loads(e) for e in (tmp_path / "run" / record["events_file"]).open()]
    (parse_error,) = [e for e in events if e["type"] == "fleet.parse_error"]
    assert parse_error["data"]["error"] == (
        "the tool call's JSON cannot be read: it is nested more than 100 levels deep "
        "(MAX_NESTING_DEPTH)"
    )
