"""Finding the binary, generating opencode's configuration, checking options."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from agentkit_opencode import BINARY_ENV, OPENCODE_VERSION, OpenCode, find_opencode, prompt_of
from agentkit_opencode._config import API_KEY_ENV, build_config, build_env

from agentkit import HarnessError, RunContext, Task, registry

pytestmark = pytest.mark.anyio


def fake_opencode(path: Path, version: str = "9.9.9") -> Path:
    """A stand-in executable that answers ``--version`` like opencode does."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!/bin/sh\necho {version}\n")
    path.chmod(0o755)
    return path


def test_missing_binary_says_how_to_install(tmp_path: Path) -> None:
    with pytest.raises(HarnessError) as info:
        find_opencode(env={"PATH": str(tmp_path)}, cwd=tmp_path)
    message = str(info.value)
    assert f"npm install opencode-ai@{OPENCODE_VERSION}" in message
    assert BINARY_ENV in message


def test_explicit_binary_that_does_not_exist(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere" / "opencode"
    with pytest.raises(HarnessError, match="does not exist"):
        find_opencode(str(missing), env={}, cwd=tmp_path)
    with pytest.raises(HarnessError, match="was not found"):
        find_opencode("opencode-not-installed", env={"PATH": str(tmp_path)}, cwd=tmp_path)


def test_environment_variable_wins_over_path(tmp_path: Path) -> None:
    on_path = fake_opencode(tmp_path / "bin" / "opencode", "1.0.0")
    chosen = fake_opencode(tmp_path / "pinned" / "opencode", "2.0.0")
    env = {"PATH": str(on_path.parent), BINARY_ENV: str(chosen)}
    found = find_opencode(env=env, cwd=tmp_path)
    assert (found.path, found.version, found.found_via) == (chosen, "2.0.0", f"${BINARY_ENV}")
    found = find_opencode(env={"PATH": str(on_path.parent)}, cwd=tmp_path)
    assert (found.path, found.version, found.found_via) == (on_path, "1.0.0", "PATH")


def test_node_modules_bin_in_a_parent_directory(tmp_path: Path) -> None:
    package = fake_opencode(tmp_path / "node_modules" / "opencode-ai" / "bin" / "opencode")
    link = tmp_path / "node_modules" / ".bin" / "opencode"
    link.parent.mkdir()
    link.symlink_to(os.path.relpath(package, link.parent))
    deep = tmp_path / "a" / "b"
    deep.mkdir(parents=True)
    found = find_opencode(env={"PATH": str(tmp_path / "empty")}, cwd=deep)
    assert found.path == package.resolve()
    assert found.found_via == str(link.parent)
    # a wrapper script needs its whole package visible in a sandbox
    assert found.mount_dirs == (str(package.resolve().parent.parent),)


def test_the_real_binary_is_the_pinned_native_one(opencode_bin: object) -> None:
    found = find_opencode(cwd=Path(__file__).parent)
    assert found.version == OPENCODE_VERSION
    assert found.path.read_bytes()[:4] == b"\x7fELF"
    assert found.mount_dirs == (str(found.path.parent),)


def test_generated_config_points_at_the_endpoint_without_the_key() -> None:
    config = build_config(
        model="Qwen/Qwen3-8B",
        base_url="http://127.0.0.1:8000/v1",
        has_api_key=True,
        agent=None,
        max_turns=7,
        sampling_args={"temperature": 0.2, "seed": 3},
    )
    provider = config["provider"]["agentkit"]
    assert provider["npm"] == "@ai-sdk/openai-compatible"
    assert provider["options"] == {
        "baseURL": "http://127.0.0.1:8000/v1",
        "apiKey": "{env:" + API_KEY_ENV + "}",
    }
    assert list(provider["models"]) == ["Qwen/Qwen3-8B"]
    assert provider["models"]["Qwen/Qwen3-8B"]["options"] == {"seed": 3}
    assert config["model"] == "agentkit/Qwen/Qwen3-8B"
    assert config["permission"] == {"*": "allow"}
    assert config["enabled_providers"] == ["agentkit"]
    assert config["agent"] == {"build": {"steps": 7, "temperature": 0.2}}
    env = build_env(config, xdg_root="/logs/agent/opencode", api_key="sk-live-1234567")
    assert env[API_KEY_ENV] == "sk-live-1234567"
    assert "sk-live" not in env["OPENCODE_CONFIG_CONTENT"]
    assert json.loads(env["OPENCODE_CONFIG_CONTENT"]) == config
    assert env["XDG_DATA_HOME"] == "/logs/agent/opencode/data"
    assert env["XDG_STATE_HOME"] == "/logs/agent/opencode/state"
    assert env["OPENCODE_DISABLE_AUTOUPDATE"] == "1"
    assert env["OPENCODE_DISABLE_MODELS_FETCH"] == "1"
    no_key = build_env(
        build_config(model="m", base_url="http://x/v1", has_api_key=False, agent="plan"),
        xdg_root="/x",
        api_key=None,
    )
    assert API_KEY_ENV not in no_key
    assert "apiKey" not in no_key["OPENCODE_CONFIG_CONTENT"]


def test_extra_config_is_merged_over_the_generated_one() -> None:
    config = build_config(
        model="m",
        base_url="http://127.0.0.1:1/v1",
        has_api_key=False,
        agent="plan",
        max_turns=3,
        extra={
            "permission": {"bash": "deny"},
            "provider": {
                "agentkit": {"models": {"m": {"limit": {"context": 8000, "output": 512}}}}
            },
            "agent": {"plan": {"steps": 9}},
            "instructions": ["AGENTS.md"],
        },
    )
    assert config["permission"] == {"*": "allow", "bash": "deny"}
    assert config["provider"]["agentkit"]["models"]["m"] == {
        "name": "m",
        "tool_call": True,
        "temperature": True,
        "limit": {"context": 8000, "output": 512},
    }
    assert config["provider"]["agentkit"]["options"] == {"baseURL": "http://127.0.0.1:1/v1"}
    assert config["agent"] == {"plan": {"steps": 9}}
    assert config["instructions"] == ["AGENTS.md"]


def test_without_an_endpoint_the_model_is_used_as_given() -> None:
    config = build_config(model="openai/gpt-5", base_url=None, has_api_key=False, agent=None)
    assert "provider" not in config and "enabled_providers" not in config
    assert config["model"] == "openai/gpt-5"


def test_prompt_of_each_input_kind() -> None:
    assert prompt_of(Task(task_id="t:1", input="Fix the bug.")) == "Fix the bug."
    chat = Task(
        task_id="t:2",
        input=[
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": [{"type": "text", "text": "Fix "}, {"text": "it."}]},
            {"role": "assistant", "content": "ok"},
        ],
    )
    assert prompt_of(chat) == "Be brief.\n\nFix it."
    data = Task(task_id="t:3", input={"repo": "x", "issue": 3})
    assert json.loads(prompt_of(data)) == {"repo": "x", "issue": 3}


def test_registered_by_name_with_typed_options() -> None:
    harness = registry.resolve_harness("opencode", model="m", agent="plan", timeout=30.0)
    assert isinstance(harness, OpenCode)
    assert (harness.model, harness.agent, harness.timeout) == ("m", "plan", 30.0)
    assert harness.requires_sandbox is True
    schema = registry.option_schema("harness", "opencode")
    assert list(schema.options) == ["model", "agent", "variant", "config", "timeout", "binary"]


def test_bad_options_are_reported() -> None:
    with pytest.raises(HarnessError, match="config"):
        OpenCode(config="not a dict")  # type: ignore[arg-type]
    with pytest.raises(HarnessError, match="timeout"):
        OpenCode(timeout=0)


async def test_run_needs_a_model_and_an_endpoint() -> None:
    task = Task(task_id="t:1", input="hi")
    with pytest.raises(HarnessError, match="needs a model"):
        await OpenCode().run(task, RunContext(base_url="http://127.0.0.1:1/v1"))
    with pytest.raises(HarnessError, match="model endpoint"):
        await OpenCode(model="m").run(task, RunContext())


async def test_run_with_a_missing_binary_raises_the_install_hint(tmp_path: Path) -> None:
    task = Task(task_id="t:1", input="hi")
    harness = OpenCode(model="m", binary=str(tmp_path / "opencode"))
    with pytest.raises(HarnessError, match=f"npm install opencode-ai@{OPENCODE_VERSION}"):
        await harness.run(task, RunContext(base_url="http://127.0.0.1:1/v1"))
    assert harness.sandbox_ro_binds == []


def test_a_run_without_an_endpoint_is_stopped_by_the_preflight(tmp_path: Path) -> None:
    """A bare model name needs a base URL: ``agentkit run`` stops before the first rollout
    (exit 2, one line), instead of failing every rollout with harness_setup."""
    import subprocess
    import sys

    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(json.dumps({"id": "a", "input": "say hi"}) + "\n")
    out = tmp_path / "run"
    proc = subprocess.run(
        [
            *(sys.executable, "-m", "agentkit", "run", f"jsonl:{tasks}", "opencode"),
            *("--model", "gpt-test", "--api-key-env", "OC_TEST_KEY", "--out", str(out)),
        ],
        env={**os.environ, "OC_TEST_KEY": "sk-test-key-123456"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines() == [
        "Error: the opencode harness needs the model endpoint: pass "
        "RunContext(base_url='http://.../v1') (--base-url), or a 'provider/model' model with "
        "that provider in the config option"
    ]
    assert not out.exists()
