"""Finding the binary, generating Claude Code's settings, reading its stream, options."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from agentkit_claude_code import (
    BINARY_ENV,
    CLAUDE_CODE_VERSION,
    NPM_PACKAGE,
    ClaudeCode,
    find_claude,
)
from agentkit_claude_code._settings import (
    NO_KEY,
    anthropic_base_url,
    bash_env_script,
    build_env,
    build_settings,
    render_settings,
)
from agentkit_claude_code._stream import ClaudeStream, classify_error

from agentkit import EventRecorder, HarnessError, RunContext, Task, registry
from agentkit.programs import ProgramBinary

pytestmark = pytest.mark.anyio
DATA = Path(__file__).parent / "data"


def fake_claude(path: Path, version: str = "9.9.9") -> Path:
    """A stand-in executable (a shell script) answering ``--version`` like claude."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!/bin/sh\necho '{version} (Claude Code)'\n")
    path.chmod(0o755)
    return path


def test_missing_binary_says_how_to_install(tmp_path: Path) -> None:
    with pytest.raises(HarnessError) as info:
        find_claude(env={"PATH": str(tmp_path)}, cwd=tmp_path)
    message = str(info.value)
    assert f"npm install {NPM_PACKAGE}@{CLAUDE_CODE_VERSION}" in message
    assert BINARY_ENV in message and "ClaudeCode(binary=...)" in message


def test_environment_variable_wins_over_path(tmp_path: Path) -> None:
    on_path = fake_claude(tmp_path / "bin" / "claude", "1.0.0")
    chosen = fake_claude(tmp_path / "pinned" / "claude", "2.0.0")
    found = find_claude(env={"PATH": str(on_path.parent), BINARY_ENV: str(chosen)}, cwd=tmp_path)
    assert (found.path, found.version, found.found_via) == (chosen, "2.0.0", f"${BINARY_ENV}")
    found = find_claude(env={"PATH": str(on_path.parent)}, cwd=tmp_path)
    assert (found.path, found.version, found.found_via) == (on_path, "1.0.0", "PATH")
    with pytest.raises(HarnessError, match="does not exist"):
        find_claude(str(tmp_path / "nowhere" / "claude"), env={}, cwd=tmp_path)


def test_project_npm_install_in_a_parent_directory(tmp_path: Path) -> None:
    package_bin = fake_claude(
        tmp_path / "node_modules" / "@anthropic-ai" / "claude-code" / "bin" / "claude.exe"
    )
    link = tmp_path / "node_modules" / ".bin" / "claude"
    link.parent.mkdir()
    link.symlink_to(os.path.relpath(package_bin, link.parent))
    deep = tmp_path / "x" / "y"
    deep.mkdir(parents=True)
    found = find_claude(env={"PATH": str(tmp_path / "empty")}, cwd=deep)
    assert found.path == package_bin.resolve()
    assert found.found_via == str(link.parent)


def test_the_real_binary_is_the_pinned_native_one(claude_bin: ProgramBinary) -> None:
    found = find_claude(cwd=Path(__file__).parent)
    assert found.version == CLAUDE_CODE_VERSION
    assert found.path.read_bytes()[:4] == b"\x7fELF"
    assert found.mount_dirs == (str(found.path.parent),)


def test_generated_settings_and_environment() -> None:
    settings = build_settings(
        model="Qwen/Qwen3-8B", extra={"permissions": {"deny": ["WebFetch"]}, "env": {"A": "1"}}
    )
    assert settings == {
        "model": "Qwen/Qwen3-8B",
        "permissions": {"defaultMode": "bypassPermissions", "deny": ["WebFetch"]},
        "env": {"A": "1"},
    }
    assert json.loads(render_settings(settings)) == settings
    env = build_env(
        config_dir="/logs/agent/claude-code",
        model="Qwen/Qwen3-8B",
        base_url="http://127.0.0.1:8000/v1",
        api_key="sk-live-1234567",
        max_retries=2,
        max_output_tokens=4096,
        headers={"X-Team": "evals", "X-Gateway-Key": "gw-1"},
    )
    assert env["ANTHROPIC_CUSTOM_HEADERS"] == "X-Team: evals\nX-Gateway-Key: gw-1"
    assert env["ANTHROPIC_BASE_URL"] == "http://127.0.0.1:8000"
    assert env["ANTHROPIC_API_KEY"] == "sk-live-1234567"
    assert env["CLAUDE_CONFIG_DIR"] == "/logs/agent/claude-code"
    # the Bash tool sources a script that unsets the credentials (and holds none)
    assert env["CLAUDE_ENV_FILE"] == "/logs/agent/claude-code/bash-env.sh"
    assert bash_env_script() == (
        "unset ANTHROPIC_API_KEY ANTHROPIC_AUTH_TOKEN ANTHROPIC_CUSTOM_HEADERS\n"
    )
    assert env["CLAUDE_CODE_MAX_RETRIES"] == "2"
    assert env["CLAUDE_CODE_MAX_OUTPUT_TOKENS"] == "4096"
    assert env["ANTHROPIC_DEFAULT_HAIKU_MODEL"] == "Qwen/Qwen3-8B"
    assert env["CLAUDE_CODE_SUBAGENT_MODEL"] == "Qwen/Qwen3-8B"
    assert env["DISABLE_AUTOUPDATER"] == env["IS_SANDBOX"] == "1"
    assert "sk-live" not in render_settings(settings)


def test_environment_without_a_key_or_an_endpoint() -> None:
    env = build_env(config_dir="/c", model="claude-sonnet-4-5", base_url=None, api_key=None)
    assert env["ANTHROPIC_API_KEY"] == NO_KEY
    assert "ANTHROPIC_BASE_URL" not in env and "CLAUDE_CODE_SUBAGENT_MODEL" not in env
    assert "CLAUDE_CODE_MAX_RETRIES" not in env and "ANTHROPIC_CUSTOM_HEADERS" not in env


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("http://127.0.0.1:8000/v1", "http://127.0.0.1:8000"),
        ("http://127.0.0.1:8000/v1/", "http://127.0.0.1:8000"),
        ("https://gw.example/anthropic", "https://gw.example/anthropic"),
    ],
)
def test_anthropic_base_url(url: str, expected: str) -> None:
    assert anthropic_base_url(url) == expected


@pytest.mark.parametrize(
    ("status", "kind", "message", "expected"),
    [
        (429, "rate_limit", "API Error: Request rejected (429)", "model_rate_limit"),
        (500, "server_error", "API Error: 500 boom", "model_server_error"),
        (529, None, "API Error: overloaded", "model_server_error"),
        (401, "authentication_failed", "Invalid API key", "model_auth"),
        (400, "unknown", "API Error: 400 bad", "model_request_error"),
        (None, "rate_limit", "slow down", "model_rate_limit"),
        (None, None, "API Error: Connection error.", "model_connection"),
        (None, None, "something else", "agent_error"),
    ],
)
def test_errors_are_classified(status: object, kind: object, message: str, expected: str) -> None:
    assert classify_error(status, kind, message) == expected


async def test_stream_becomes_events_transcript_and_usage() -> None:
    """A recorded stream-json run: thinking, text, two Bash calls (one exits 3), an answer."""
    recorder = EventRecorder("t:1", "r-1")
    stream = ClaudeStream(recorder, "Write hi into out.txt.")
    for line in (DATA / "claude-stream.jsonl").read_text().splitlines():
        await stream.feed(line)
    await stream.feed("[claude-code:something] not json")
    assert stream.version == CLAUDE_CODE_VERSION
    assert stream.output == "Wrote out.txt."
    assert (stream.turns, stream.tool_calls, stream.tool_errors) == (2, 2, 0)
    messages = stream.messages
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "tool", "assistant"]
    first = messages[1]
    assert first["content"] == "I will write the file."
    assert first["reasoning_content"] == "A shell command can do it."
    assert [c["function"]["name"] for c in first["tool_calls"]] == ["Bash", "Bash"]
    assert messages[2]["content"] == "hi" and messages[3]["content"] == "Exit code 3"
    results = [e.data for e in recorder.events if e.type == "tool.result"]
    # a command that ran and exited non-zero is not a tool error
    assert [(r["status"], r["exit_code"]) for r in results] == [("completed", 0), ("completed", 3)]
    usage = stream.usage
    assert (usage.input_tokens, usage.cached_tokens, usage.output_tokens) == (2100, 400, 27)
    assert usage.requests == 2 and usage.cost > 0
    kinds = [e.data.get("kind") for e in recorder.events if e.type == "model.response"]
    assert kinds == ["reasoning", "text", "message_end", "text", "message_end"]
    assert [e.type for e in recorder.events].count("model.request") == 2


async def test_usage_without_a_result_comes_from_each_call() -> None:
    """Killed before its result line: each call's start and end usage still count."""
    lines = [
        line
        for line in (DATA / "claude-stream.jsonl").read_text().splitlines()
        if json.loads(line)["type"] != "result"
    ]
    stream = ClaudeStream(EventRecorder("t:1"), "p")
    for line in lines:
        await stream.feed(line)
    usage = stream.usage
    assert (usage.input_tokens, usage.cached_tokens, usage.output_tokens) == (2100, 400, 27)
    assert usage.cost == 0.0


async def test_api_error_and_retries_in_the_stream() -> None:
    recorder = EventRecorder("t:1")
    stream = ClaudeStream(recorder, "p", redact=lambda t: t.replace("sk-secret-99", "***"))
    await stream.feed(
        json.dumps(
            {
                "type": "system",
                "subtype": "api_retry",
                "attempt": 1,
                "max_retries": 2,
                "retry_delay_ms": 500,
                "error_status": 500,
                "error": "server_error",
            }
        )
    )
    await stream.feed(
        json.dumps(
            {
                "type": "assistant",
                "message": {
                    "id": "x",
                    "model": "<synthetic>",
                    "role": "assistant",
                    "content": [{"type": "text", "text": "API Error: 401 key sk-secret-99 bad"}],
                },
                "is_api_error_message": True,
                "api_error_status": 401,
                "error": "authentication_failed",
            }
        )
    )
    assert stream.retries == 1
    assert stream.api_error == {
        "message": "API Error: 401 key *** bad",
        "status": 401,
        "error": "authentication_failed",
    }
    assert stream.turns == 0 and stream.messages == [{"role": "user", "content": "p"}]
    [retry] = [e for e in recorder.events if e.type == "log" and e.data["level"] == "warning"]
    assert "retry 1/2 in 0.5 s" in retry.data["message"]


def test_registered_by_name_with_typed_options() -> None:
    harness = registry.resolve_harness("claude-code", model="m", max_retries=1, timeout=30.0)
    assert isinstance(harness, ClaudeCode)
    assert (harness.model, harness.max_retries, harness.timeout) == ("m", 1, 30.0)
    assert harness.requires_sandbox is True
    schema = registry.option_schema("harness", "claude-code")
    assert list(schema.options) == [
        "model",
        "settings",
        "append_system_prompt",
        "max_retries",
        "timeout",
        "binary",
    ]


def test_bad_options_are_reported() -> None:
    with pytest.raises(HarnessError, match="settings"):
        ClaudeCode(settings=["not", "a", "dict"])  # type: ignore[arg-type]
    with pytest.raises(HarnessError, match="timeout"):
        ClaudeCode(timeout=-1)
    with pytest.raises(HarnessError, match="max_retries"):
        ClaudeCode(max_retries=True)


async def test_run_needs_a_model_and_the_binary(tmp_path: Path) -> None:
    task = Task(task_id="t:1", input="hi")
    with pytest.raises(HarnessError, match="needs a model"):
        await ClaudeCode().run(task, RunContext(base_url="http://127.0.0.1:1/v1"))
    harness = ClaudeCode(model="m", binary=str(tmp_path / "claude"))
    with pytest.raises(HarnessError, match=f"npm install {NPM_PACKAGE}@{CLAUDE_CODE_VERSION}"):
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
    [row] = [line for line in proc.stdout.splitlines() if "agentkit-claude-code " in line]
    assert "harnesses: claude-code" in row
