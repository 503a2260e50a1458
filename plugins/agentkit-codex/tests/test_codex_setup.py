"""Finding the binary, generating codex's configuration, reading its output, options."""

from __future__ import annotations

import os
import platform
import tomllib
from pathlib import Path

import pytest
from agentkit_codex import BINARY_ENV, CODEX_VERSION, NPM_PACKAGE, Codex, find_codex
from agentkit_codex._config import API_KEY_ENV, build_config, build_env, render_config
from agentkit_codex._rollout import Rollout
from agentkit_codex._stream import CodexStream, classify_error, clean_error

from agentkit import EventRecorder, HarnessError, RunContext, Task, registry
from agentkit.programs import ProgramBinary

pytestmark = pytest.mark.anyio
DATA = Path(__file__).parent / "data"
ELF_STUB = b"\x7fELF"


def fake_codex(path: Path, version: str = "9.9.9") -> Path:
    """A stand-in executable (a shell script) answering ``--version`` like codex."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!/bin/sh\necho codex-cli {version}\n")
    path.chmod(0o755)
    return path


def test_missing_binary_says_how_to_install(tmp_path: Path) -> None:
    with pytest.raises(HarnessError) as info:
        find_codex(env={"PATH": str(tmp_path)}, cwd=tmp_path)
    message = str(info.value)
    assert f"npm install {NPM_PACKAGE}@{CODEX_VERSION}" in message
    assert BINARY_ENV in message and "Codex(binary=...)" in message


def test_explicit_binary_that_does_not_exist(tmp_path: Path) -> None:
    with pytest.raises(HarnessError, match="does not exist"):
        find_codex(str(tmp_path / "nowhere" / "codex"), env={}, cwd=tmp_path)
    with pytest.raises(HarnessError, match="was not found"):
        find_codex("codex-not-installed", env={"PATH": str(tmp_path)}, cwd=tmp_path)


def test_environment_variable_wins_over_path(tmp_path: Path) -> None:
    on_path = fake_codex(tmp_path / "bin" / "codex", "1.0.0")
    chosen = fake_codex(tmp_path / "pinned" / "codex", "2.0.0")
    found = find_codex(env={"PATH": str(on_path.parent), BINARY_ENV: str(chosen)}, cwd=tmp_path)
    assert (found.path, found.version, found.found_via) == (chosen, "2.0.0", f"${BINARY_ENV}")
    found = find_codex(env={"PATH": str(on_path.parent)}, cwd=tmp_path)
    assert (found.path, found.version, found.found_via) == (on_path, "1.0.0", "PATH")


def test_project_npm_install_in_a_parent_directory(tmp_path: Path) -> None:
    """``node_modules/.bin/codex`` is npm's node wrapper: the script itself is run
    (its package shown to the sandbox) when no platform package is installed."""
    wrapper = fake_codex(tmp_path / "node_modules" / "@openai" / "codex" / "bin" / "codex.js")
    link = tmp_path / "node_modules" / ".bin" / "codex"
    link.parent.mkdir()
    link.symlink_to(os.path.relpath(wrapper, link.parent))
    deep = tmp_path / "a" / "b"
    deep.mkdir(parents=True)
    found = find_codex(env={"PATH": str(tmp_path / "empty")}, cwd=deep)
    assert found.path == wrapper.resolve()
    assert found.found_via == str(link.parent)
    assert found.mount_dirs == (str(wrapper.resolve().parent.parent),)


def test_the_real_binary_is_the_pinned_native_one(codex_bin: ProgramBinary) -> None:
    found = find_codex(cwd=Path(__file__).parent)
    assert found.version == CODEX_VERSION
    assert found.path.read_bytes()[:4] == ELF_STUB
    # npm's layout: vendor/<triple>/{bin/codex,codex-path/rg,...} is what a sandbox shows
    [mount] = found.mount_dirs
    assert found.path == Path(mount) / "bin" / "codex"
    assert (Path(mount) / "codex-package.json").exists()
    if platform.system() == "Linux":
        assert "linux-musl" in mount  # a static executable: it runs in any image


def test_generated_config_points_at_the_endpoint_without_the_key() -> None:
    config = build_config(
        model="Qwen/Qwen3-8B",
        base_url="http://127.0.0.1:8000/v1",
        has_api_key=True,
        max_retries=2,
        sampling_args={"reasoning_effort": "low", "temperature": 0.2},
    )
    assert config["model"] == "Qwen/Qwen3-8B"
    assert config["model_provider"] == "agentkit"
    assert config["model_providers"]["agentkit"] == {
        "name": "agentkit endpoint",
        "base_url": "http://127.0.0.1:8000/v1",
        "wire_api": "responses",
        "env_key": API_KEY_ENV,
        "request_max_retries": 2,
        "stream_max_retries": 2,
    }
    assert config["model_reasoning_effort"] == "low"
    assert "temperature" not in render_config(config)
    assert (config["approval_policy"], config["sandbox_mode"]) == ("never", "danger-full-access")
    assert config["analytics"] == {"enabled": False}
    assert tomllib.loads(render_config(config)) == config
    env = build_env(codex_home="/logs/agent/codex", api_key="sk-live-1234567", has_endpoint=True)
    assert env == {"CODEX_HOME": "/logs/agent/codex", API_KEY_ENV: "sk-live-1234567"}
    assert "sk-live" not in render_config(config)


def test_headers_travel_in_the_environment() -> None:
    headers = {"X-Team": "evals", "Authorization-Extra": "secret-1"}
    config = build_config(
        model="m", base_url="http://127.0.0.1:1/v1", has_api_key=False, headers=headers
    )
    assert config["model_providers"]["agentkit"]["env_http_headers"] == {
        "Authorization-Extra": "AGENTKIT_CODEX_HEADER_0",
        "X-Team": "AGENTKIT_CODEX_HEADER_1",
    }
    assert "secret-1" not in render_config(config)
    env = build_env(codex_home="/h", api_key=None, has_endpoint=True, headers=headers)
    assert env["AGENTKIT_CODEX_HEADER_0"] == "secret-1"
    assert env["AGENTKIT_CODEX_HEADER_1"] == "evals"


def test_config_without_a_key_or_an_endpoint() -> None:
    no_key = build_config(model="m", base_url="http://127.0.0.1:1/v1", has_api_key=False)
    assert "env_key" not in no_key["model_providers"]["agentkit"]
    assert build_env(codex_home="/h", api_key=None, has_endpoint=True) == {"CODEX_HOME": "/h"}
    default = build_config(model="gpt-5", base_url=None, has_api_key=True)
    assert "model_provider" not in default and "model_providers" not in default
    assert build_env(codex_home="/h", api_key="sk-live-1234567", has_endpoint=False) == {
        "CODEX_HOME": "/h",
        "CODEX_API_KEY": "sk-live-1234567",
    }


def test_extra_config_is_merged_over_the_generated_one() -> None:
    config = build_config(
        model="m",
        base_url="http://127.0.0.1:1/v1",
        has_api_key=False,
        extra={
            "model_providers": {"agentkit": {"stream_idle_timeout_ms": 60000}},
            "sandbox_mode": "workspace-write",
            "mcp_servers": {"docs": {"command": "docs-server"}},
        },
    )
    assert config["model_providers"]["agentkit"]["stream_idle_timeout_ms"] == 60000
    assert config["model_providers"]["agentkit"]["base_url"] == "http://127.0.0.1:1/v1"
    assert config["sandbox_mode"] == "workspace-write"
    assert config["mcp_servers"] == {"docs": {"command": "docs-server"}}


@pytest.mark.parametrize(
    ("message", "kind", "cleaned"),
    [
        (
            "We’re currently experiencing high demand, which may cause temporary errors.",
            "model_server_error",
            "We’re currently experiencing high demand, which may cause temporary errors. "
            "(the model endpoint answered HTTP 500; codex does not report its message)",
        ),
        (
            "exceeded retry limit, last status: 429 Too Many Requests",
            "model_rate_limit",
            "exceeded retry limit, last status: 429 Too Many Requests",
        ),
        (
            "unexpected status 503 Service Unavailable: busy, url: http://x/v1/responses",
            "model_server_error",
            "unexpected status 503 Service Unavailable: busy, url: http://x/v1/responses",
        ),
        (
            "unexpected status 401 Unauthorized: bad key, url: http://x/v1/responses",
            "model_auth",
            "unexpected status 401 Unauthorized: bad key, url: http://x/v1/responses",
        ),
        (
            '{"error": {"message": "too long", "type": "invalid_request_error"}}',
            "model_request_error",
            "too long",
        ),
        (
            "stream disconnected before completion: Transport error: network error: "
            "error decoding response body",
            "model_connection",
            "stream disconnected before completion: Transport error: network error: "
            "error decoding response body",
        ),
        ("something else went wrong", "agent_error", "something else went wrong"),
    ],
)
def test_error_messages_are_classified(message: str, kind: str, cleaned: str) -> None:
    assert classify_error(message) == kind
    assert clean_error(message) == cleaned


async def test_stream_becomes_events() -> None:
    """A recorded ``codex exec --json`` stream: two commands (one exits 3), text, usage."""
    recorder = EventRecorder("t:1", "r-1")
    stream = CodexStream(recorder)
    threads: list[str] = []

    async def on_thread(thread_id: str) -> None:
        threads.append(thread_id)

    stream.on_thread = on_thread
    for line in (DATA / "codex-stream.jsonl").read_text().splitlines():
        await stream.feed(line)
    await stream.feed("not json at all")
    assert threads == [stream.session_id]
    assert stream.output == "Wrote out.txt."
    assert stream.failure is None and stream.errors == []
    assert (stream.tool_calls, stream.tool_errors) == (2, 0)
    assert stream.usage is not None
    assert (stream.usage.input_tokens, stream.usage.cached_tokens) == (2100, 400)
    assert (stream.usage.output_tokens, stream.usage.reasoning_tokens) == (27, 5)
    events = [(e.type, e.data.get("kind") or e.data.get("name")) for e in recorder.events]
    assert [e for e in events if e[0] != "log"] == [
        ("model.response", "reasoning"),
        ("model.response", "text"),
        ("tool.call", "command_execution"),
        ("tool.result", "command_execution"),
        ("tool.call", "command_execution"),
        ("tool.result", "command_execution"),
        ("model.response", "text"),
    ]
    results = [e.data for e in recorder.events if e.type == "tool.result"]
    assert [(r["status"], r["exit_code"], r["output"]) for r in results] == [
        ("completed", 0, "hi\n"),
        ("completed", 3, ""),  # a command that exits non-zero is not a tool error
    ]
    unparsed = [e for e in recorder.events if e.data.get("message") == "not json at all"]
    assert unparsed and stream.unparsed == ["not json at all"]


async def test_failures_and_retries_in_the_stream() -> None:
    recorder = EventRecorder("t:1")
    stream = CodexStream(recorder, redact=lambda text: text.replace("sk-secret-99", "***"))
    for line in [
        '{"type":"error","message":"Reconnecting... 1/2 (boom)"}',
        '{"type":"error","message":"key sk-secret-99 refused"}',
        '{"type":"turn.failed","error":{"message":"unexpected status 401 Unauthorized: '
        'key sk-secret-99 refused, url: http://x"}}',
    ]:
        await stream.feed(line)
    assert stream.retries == 1
    assert stream.errors == ["key *** refused"]
    assert stream.failure is not None and "sk-secret" not in stream.failure
    [error] = [e for e in recorder.events if e.type == "error"]
    assert error.data["kind"] == "model_auth"


def test_session_file_gives_the_transcript_and_per_call_usage() -> None:
    rollout = Rollout()
    rollout.feed_text((DATA / "codex-rollout.jsonl").read_text())
    assert len(rollout.calls) == 2
    assert rollout.session_id and rollout.cli_version == CODEX_VERSION
    usage = rollout.usage
    assert (usage.input_tokens, usage.cached_tokens, usage.output_tokens) == (2100, 400, 27)
    assert (usage.reasoning_tokens, usage.requests) == (5, 2)
    messages = rollout.messages("Write hi into out.txt.")
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "tool", "assistant"]
    first = messages[1]
    assert first["content"] == "I will write the file."
    assert first["reasoning_content"] == "A shell command can do it."
    names = [c["function"]["name"] for c in first["tool_calls"]]
    assert names == ["exec_command", "exec_command"]
    assert [m["tool_call_id"] for m in messages[2:4]] == [c["id"] for c in first["tool_calls"]]
    assert "Process exited with code 3" in messages[3]["content"]
    assert messages[4] == {"role": "assistant", "content": "Wrote out.txt."}
    assert rollout.output == "Wrote out.txt." and rollout.tool_calls == 2


def test_turn_limit_waits_for_the_last_calls_tools() -> None:
    """With max_turns=1, codex is stopped once call 1's tools all answered (it would
    then ask the model again), not before."""
    lines = (DATA / "codex-rollout.jsonl").read_text().splitlines()
    rollout = Rollout()
    states = []
    for line in lines:
        rollout.feed(line)
        states.append(rollout.turn_limit_reached(1))
    first_record = next(i for i, line in enumerate(lines) if '"token_usage_record"' in line)
    outputs = [i for i, line in enumerate(lines) if '"function_call_output"' in line]
    assert not any(states[: outputs[-1]])  # one tool still running: not yet
    assert states[outputs[-1]] and first_record < outputs[-1]
    assert Rollout.from_lines(lines).turn_limit_reached(2) is False  # it answered with text


def test_a_call_answered_after_the_turn_limit_is_not_part_of_the_rollout() -> None:
    """codex is stopped as call 2 begins with max_turns=1; when a busy machine lets
    call 2 be answered before the stop lands, the rollout still ends after call 1."""
    rollout = Rollout.from_lines((DATA / "codex-rollout.jsonl").read_text().splitlines())
    assert len(rollout.all_calls()) == 2
    assert rollout.cut_after(1) == 1
    assert len(rollout.all_calls()) == 1 and rollout.tool_calls == 2
    roles = [m["role"] for m in rollout.messages("Write hi into out.txt.")]
    assert roles == ["user", "assistant", "tool", "tool"]
    assert rollout.usage.requests == 1
    assert rollout.cut_after(1) == 0


def test_registered_by_name_with_typed_options() -> None:
    harness = registry.resolve_harness("codex", model="m", max_retries=1, timeout=30.0)
    assert isinstance(harness, Codex)
    assert (harness.model, harness.max_retries, harness.timeout) == ("m", 1, 30.0)
    assert harness.requires_sandbox is True
    schema = registry.option_schema("harness", "codex")
    assert list(schema.options) == ["model", "config", "max_retries", "timeout", "binary"]


def test_bad_options_are_reported() -> None:
    with pytest.raises(HarnessError, match="config"):
        Codex(config="not a dict")  # type: ignore[arg-type]
    with pytest.raises(HarnessError, match="timeout"):
        Codex(timeout=0)
    with pytest.raises(HarnessError, match="max_retries"):
        Codex(max_retries=-1)


async def test_run_needs_a_model_and_the_binary(tmp_path: Path) -> None:
    task = Task(task_id="t:1", input="hi")
    with pytest.raises(HarnessError, match="needs a model"):
        await Codex().run(task, RunContext(base_url="http://127.0.0.1:1/v1"))
    harness = Codex(model="m", binary=str(tmp_path / "codex"))
    with pytest.raises(HarnessError, match=f"npm install {NPM_PACKAGE}@{CODEX_VERSION}"):
        await harness.run(task, RunContext(base_url="http://127.0.0.1:1/v1"))
    assert harness.sandbox_ro_binds == []


def test_agentkit_plugins_table_lists_it() -> None:
    import subprocess
    import sys

    proc = subprocess.run(
        [sys.executable, "-m", "agentkit", "plugins", "--table"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert proc.returncode == 0, proc.stderr
    [row] = [line for line in proc.stdout.splitlines() if "agentkit-codex " in line]
    assert "harnesses: codex" in row
