"""Finding the installation, the portable runtime, mini's configuration, options, and
reading trajectories."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from agentkit_mini_swe_agent import (
    BINARY_ENV,
    LOCAL_INSTALL,
    MINI_SWE_AGENT_VERSION,
    TESTED_WITH,
    MiniSweAgent,
    MiniSweAgentInstall,
    MiniSweAgentRuntime,
    find_mini_swe_agent,
    portable_runtime,
    prompt_of,
)
from agentkit_mini_swe_agent._config import (
    API_KEY_ENV,
    HEADERS_ENV,
    NO_KEY,
    build_config,
    build_env,
)
from agentkit_mini_swe_agent._trajectory import TrajectoryState, classify_exit

from agentkit import (
    EventRecorder,
    HarnessError,
    RunContext,
    Task,
    TaskReferenceError,
    registry,
)
from agentkit.testing.sandbox_fixtures import requires_bwrap

pytestmark = pytest.mark.anyio


def fake_python(path: Path, answer: dict[str, Any]) -> Path:
    """A stand-in interpreter that answers the harness's probe with ``answer``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!/bin/sh\ncat <<'EOF'\n{json.dumps(answer)}\nEOF\n")
    path.chmod(0o755)
    return path


def probe_answer(tmp: Path, **changes: Any) -> dict[str, Any]:
    site = tmp / "venv" / "lib" / "python3.11" / "site-packages"
    site.mkdir(parents=True, exist_ok=True)
    answer: dict[str, Any] = {
        "python_version": "3.11.9",
        "implementation": "cpython",
        "executable": str(tmp / "venv" / "bin" / "python"),
        "base_executable": "/opt/python/bin/python3.11",
        "prefix": str(tmp / "venv"),
        "base_prefix": "/opt/python",
        "stdlib": "/opt/python/lib/python3.11",
        "dynload": "/opt/python/lib/python3.11/lib-dynload",
        "site_dirs": [str(site)],
        "mini_swe_agent": "9.9.9",
        "package": str(site / "minisweagent"),
        "litellm": "1.0.0",
        "mcp": "2.0.0",
    }
    answer.update(changes)
    return answer


def script(path: Path, first_lines: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(first_lines + "\nimport sys\n")
    path.chmod(0o755)
    return path


# -- finding the installation ------------------------------------------------------


def test_missing_installation_says_how_to_install(tmp_path: Path) -> None:
    with pytest.raises(HarnessError) as info:
        find_mini_swe_agent(env={"PATH": str(tmp_path)}, cwd=tmp_path)
    message = str(info.value)
    assert "python -m agentkit_mini_swe_agent install" in message
    assert f"mini-swe-agent=={MINI_SWE_AGENT_VERSION}" in message
    assert BINARY_ENV in message


def test_explicit_binary_that_does_not_exist(tmp_path: Path) -> None:
    with pytest.raises(HarnessError, match="does not exist"):
        find_mini_swe_agent(str(tmp_path / "nowhere" / "mini"), env={}, cwd=tmp_path)
    with pytest.raises(HarnessError, match="was not found"):
        find_mini_swe_agent("mini-not-installed", env={"PATH": str(tmp_path)}, cwd=tmp_path)


def test_the_scripts_interpreter_is_read_in_every_form_pip_and_uv_write(tmp_path: Path) -> None:
    python = fake_python(tmp_path / "venv" / "bin" / "python", probe_answer(tmp_path))
    plain = script(tmp_path / "a" / "mini", f"#!{python}")
    long_form = script(
        tmp_path / "b" / "mini", f"#!/bin/sh\n'''exec' \"{python}\" \"$0\" \"$@\"\n' '''"
    )
    for mini in (plain, long_form):
        found = find_mini_swe_agent(str(mini), env={}, cwd=tmp_path)
        assert (found.python, found.version, found.found_via) == (
            python,
            "9.9.9",
            "the binary option",
        )
    # the virtual environment's directory, or its python, work too
    assert find_mini_swe_agent(str(tmp_path / "venv"), env={}, cwd=tmp_path).python == python
    assert find_mini_swe_agent(str(python), env={}, cwd=tmp_path).python == python
    not_python = script(tmp_path / "c" / "mini", "#!/bin/bash")
    with pytest.raises(HarnessError, match="not mini-swe-agent's `mini` script"):
        find_mini_swe_agent(str(not_python), env={}, cwd=tmp_path)


def test_environment_variable_then_path_then_project_local(tmp_path: Path) -> None:
    local = tmp_path / "project" / LOCAL_INSTALL
    fake_python(local / "bin" / "python", probe_answer(tmp_path, mini_swe_agent="1.0.0"))
    deep = tmp_path / "project" / "a" / "b"
    deep.mkdir(parents=True)
    chosen = fake_python(tmp_path / "env" / "bin" / "python", probe_answer(tmp_path))
    on_path = fake_python(
        tmp_path / "onpath" / "bin" / "python", probe_answer(tmp_path, mini_swe_agent="2.0.0")
    )
    bin_dir = tmp_path / "bin"
    script(bin_dir / "mini", f"#!{on_path}")
    other = tmp_path / "other-bin"
    script(other / "mini", "#!/bin/sh")  # some other program called mini

    found = find_mini_swe_agent(env={BINARY_ENV: str(chosen), "PATH": str(bin_dir)}, cwd=deep)
    assert (found.version, found.found_via) == ("9.9.9", f"${BINARY_ENV}")
    found = find_mini_swe_agent(env={"PATH": str(bin_dir)}, cwd=deep)
    assert (found.version, found.found_via) == ("2.0.0", "PATH")
    found = find_mini_swe_agent(env={"PATH": str(other)}, cwd=deep)
    assert (found.version, found.found_via) == ("1.0.0", str(local))


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"mini_swe_agent": None}, "mini-swe-agent is not installed there"),
        ({"mcp": None}, "the `mcp` package is missing"),
        ({"implementation": "pypy"}, "only CPython"),
        ({"site_dirs": ["/usr/lib/python3/dist-packages"]}, "system directories"),
    ],
)
def test_unusable_installations_are_refused(
    tmp_path: Path, changes: dict[str, Any], message: str
) -> None:
    python = fake_python(tmp_path / "venv" / "bin" / "python", probe_answer(tmp_path, **changes))
    with pytest.raises(HarnessError, match=message):
        find_mini_swe_agent(str(python), env={}, cwd=tmp_path)


def test_the_real_installation_is_the_pinned_one(mini_install: MiniSweAgentInstall) -> None:
    assert mini_install.version == MINI_SWE_AGENT_VERSION
    pins = dict(p.split("==") for p in TESTED_WITH)
    assert mini_install.litellm_version == pins["litellm"]
    assert mini_install.mcp_version == pins["mcp"]
    assert all(Path(d).is_dir() for d in mini_install.site_dirs)


def test_install_command_keeps_an_existing_environment(mini_install: MiniSweAgentInstall) -> None:
    venv = mini_install.python.parent.parent
    proc = subprocess.run(
        [sys.executable, "-m", "agentkit_mini_swe_agent", "install", "--dir", str(venv)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert f"mini-swe-agent {MINI_SWE_AGENT_VERSION}: {venv}/bin/mini" in proc.stdout
    assert "sandbox runtime: " in proc.stdout


# -- the portable runtime ----------------------------------------------------------


def test_the_runtime_runs_without_the_hosts_environment(
    mini_runtime: MiniSweAgentRuntime, tmp_path: Path
) -> None:
    meta = json.loads((mini_runtime.root / "runtime.json").read_text())
    assert meta["mini_swe_agent"] == MINI_SWE_AGENT_VERSION
    libs = set(os.listdir(mini_runtime.root / "lib"))
    assert {"libc.so.6", mini_runtime.loader.name} <= libs
    code = "import sys, ssl, sqlite3, ctypes; print(sys.prefix); print(ssl.OPENSSL_VERSION)"
    proc = subprocess.run(
        mini_runtime.python_argv("-I", "-c", code),
        capture_output=True,
        text=True,
        env={"PYTHONHOME": "/nonexistent", "PYTHONPATH": "/nonexistent"},
        cwd=tmp_path,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[0] == str(mini_runtime.root / "python")
    # world-readable, never writable by others: a sandbox's root is another host uid
    for path in (mini_runtime.root / "lib", mini_runtime.python):
        mode = path.stat().st_mode
        assert mode & 0o005 == 0o005 and not mode & 0o002


def test_runtimes_are_built_once_even_by_concurrent_builders(
    mini_install: MiniSweAgentInstall, tmp_path: Path
) -> None:
    built: list[MiniSweAgentRuntime] = []

    def build() -> None:
        built.append(portable_runtime(mini_install, cache=tmp_path))

    threads = [threading.Thread(target=build) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(built) == 2 and built[0].root == built[1].root
    assert [p.name for p in tmp_path.iterdir()] == [built[0].root.name]
    assert portable_runtime(mini_install, cache=tmp_path).root == built[0].root


@requires_bwrap
async def test_a_sandbox_that_cannot_see_the_runtime_gets_a_clear_error(
    sandbox_factory: Any, mini_runtime: MiniSweAgentRuntime
) -> None:
    sandbox = await sandbox_factory("local")  # no ro_binds
    context = RunContext(base_url="http://127.0.0.1:9/v1", sandbox=sandbox)
    task = Task(task_id="demo:unseen", input="hello")
    with pytest.raises(HarnessError) as info:
        await MiniSweAgent(model="m").run(task, context)
    message = str(info.value)
    assert "cannot run in this sandbox" in message
    assert str(mini_runtime.root) in message and "ro_binds" in message


# -- configuration -----------------------------------------------------------------


def test_generated_config_points_at_the_endpoint_without_the_key() -> None:
    config = build_config(
        task="Fix the bug.",
        model="Qwen/Qwen3-8B",
        base_url="http://127.0.0.1:8000/v1",
        max_turns=7,
        cost_limit=0.5,
        command_timeout=90,
        sampling_args={
            "temperature": 0.2,
            "seed": 3,
            "top_k": 20,
            "extra_body": {"chat_template_kwargs": {"enable_thinking": False}},
            "extra_headers": {"Authorization": "Bearer not-in-the-file"},
            "tools": [],
        },
        max_tokens=512,
        extra={"agent": {"step_limit": 9}, "environment": {"env": {"FOO": "1"}}},
    )
    assert config["run"] == {"task": "Fix the bug."}
    assert config["model"]["model_name"] == "openai/Qwen/Qwen3-8B"
    assert config["model"]["model_kwargs"] == {
        "drop_params": True,
        "api_base": "http://127.0.0.1:8000/v1",
        "temperature": 0.2,
        "seed": 3,
        "max_tokens": 512,
        "extra_body": {"chat_template_kwargs": {"enable_thinking": False}, "top_k": 20},
    }
    assert "not-in-the-file" not in json.dumps(config)
    assert config["agent"] == {
        "mode": "yolo",
        "confirm_exit": False,
        "step_limit": 9,  # the config option wins
        "cost_limit": 0.5,
    }
    assert config["environment"] == {
        "environment_class": "local",
        "timeout": 90,
        "env": {"FOO": "1"},
    }
    # without a base URL the model is litellm's provider/model, as given
    plain = build_config(task="t", model="anthropic/claude-x", base_url=None)
    assert plain["model"]["model_name"] == "anthropic/claude-x"
    assert "api_base" not in plain["model"]["model_kwargs"]


def test_environment_carries_the_key_in_one_variable() -> None:
    env = build_env(
        config_dir="/logs/agent/mini-swe-agent/global", api_key="sk-1", retry_attempts=2
    )
    assert env[API_KEY_ENV] == "sk-1"
    assert [k for k, v in env.items() if v == "sk-1"] == [API_KEY_ENV]
    assert env["MSWEA_MODEL_RETRY_STOP_AFTER_ATTEMPT"] == "2"
    assert env["LITELLM_LOCAL_MODEL_COST_MAP"] == "True"
    assert env["MSWEA_GLOBAL_CONFIG_DIR"] == "/logs/agent/mini-swe-agent/global"
    assert build_env(config_dir="/x", api_key=None)[API_KEY_ENV] == NO_KEY
    with_headers = build_env(config_dir="/x", api_key=None, headers={"X-Api-Key": "h"})
    assert json.loads(with_headers[HEADERS_ENV]) == {"X-Api-Key": "h"}


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"config": ["x"]}, "option config: expected an object"),
        ({"timeout": 0}, "option timeout"),
        ({"cost_limit": -1}, "option cost_limit"),
        ({"command_timeout": 0}, "option command_timeout"),
        ({"retry_attempts": 0}, "option retry_attempts"),
    ],
)
def test_bad_options_are_refused(options: dict[str, Any], message: str) -> None:
    with pytest.raises(HarnessError, match=message):
        MiniSweAgent(**options)


async def test_run_needs_a_model_an_endpoint_and_a_payload() -> None:
    task = Task(task_id="demo:1", input="hi")
    with pytest.raises(HarnessError, match="needs a model"):
        await MiniSweAgent().run(task, RunContext())
    with pytest.raises(HarnessError, match="needs the model endpoint"):
        await MiniSweAgent(model="m").run(task, RunContext())
    with pytest.raises(HarnessError, match="max_turns >= 1"):
        from agentkit import Limits

        await MiniSweAgent(model="m").run(
            task, RunContext(base_url="http://127.0.0.1:9/v1", limits=Limits(max_turns=0))
        )
    with pytest.raises(TaskReferenceError):
        await MiniSweAgent(model="m").run(Task(task_id="demo:1"), RunContext())


def test_a_run_without_an_endpoint_is_stopped_by_the_preflight(tmp_path: Path) -> None:
    """A bare model name needs a base URL: ``agentkit run`` stops before the first rollout
    (exit 2, one line), instead of failing every rollout with harness_setup."""
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(json.dumps({"id": "a", "input": "say hi"}) + "\n")
    out = tmp_path / "run"
    proc = subprocess.run(
        [
            *(sys.executable, "-m", "agentkit", "run", f"jsonl:{tasks}", "mini-swe-agent"),
            *("--model", "gpt-test", "--api-key-env", "MINI_TEST_KEY", "--out", str(out)),
        ],
        env={**os.environ, "MINI_TEST_KEY": "sk-test-key-123456"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines() == [
        "Error: the mini-swe-agent harness needs the model endpoint: pass "
        "RunContext(base_url='http://.../v1') (--base-url), or a litellm 'provider/model' model"
    ]
    assert not out.exists()


def test_registered_under_its_name() -> None:
    harness = registry.resolve_harness("mini-swe-agent", model="m", retry_attempts=2)
    assert isinstance(harness, MiniSweAgent)
    assert harness.retry_attempts == 2
    info = {p.name: p for p in registry.plugins()}["mini-swe-agent"]
    assert info.distribution == "agentkit-mini-swe-agent"
    assert info.registers == {"harness": ["mini-swe-agent"]}
    assert MiniSweAgent.requires_sandbox is True


def test_agentkit_plugins_table_lists_it() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "agentkit", "plugins", "--table"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert proc.returncode == 0, proc.stderr
    [row] = [line for line in proc.stdout.splitlines() if "agentkit-mini-swe-agent " in line]
    assert "harnesses: mini-swe-agent" in row


def test_prompt_of_each_input_kind() -> None:
    assert prompt_of(Task(task_id="a:1", input="text")) == "text"
    chat = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Fix it."}]
    assert prompt_of(Task(task_id="a:2", input=chat)) == "Be brief.\n\nFix it."
    assert json.loads(prompt_of(Task(task_id="a:3", input={"repo": "x"}))) == {"repo": "x"}


# -- reading trajectories ----------------------------------------------------------


def _response(content: str, usage: dict[str, Any], calls: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "choices": [
            {
                "finish_reason": "tool_calls" if calls else "stop",
                "message": {"content": content, "tool_calls": calls or None},
            }
        ],
        "usage": usage,
    }


async def test_trajectory_becomes_events_transcript_and_usage() -> None:
    call = {
        "id": "c1",
        "type": "function",
        "function": {"name": "bash", "arguments": '{"command": "ls sk-secret-42"}'},
    }
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "task"},
        {
            "role": "user",
            "content": "Tool call error: no tool calls",
            "extra": {
                "interrupt_type": "FormatError",
                "response": _response("hmm", {"prompt_tokens": 10, "completion_tokens": 2}, []),
                "cost": 0.25,
            },
        },
        {
            "role": "assistant",
            "content": "Listing.",
            "tool_calls": [call],
            "extra": {
                "response": _response(
                    "Listing.",
                    {
                        "prompt_tokens": 20,
                        "completion_tokens": 5,
                        "prompt_tokens_details": {"cached_tokens": 8},
                        "completion_tokens_details": {"reasoning_tokens": 3},
                    },
                    [call],
                ),
                "cost": 0.5,
            },
        },
        {
            "role": "tool",
            "tool_call_id": "c1",
            "content": "<output>timed out</output>",
            "extra": {"raw_output": "", "returncode": -1, "exception_info": "timed out"},
        },
    ]
    seen: list[Any] = []
    state = TrajectoryState(
        EventRecorder("demo:1", "r1", seen.append), lambda s: s.replace("sk-secret-42", "[r]")
    )
    await state.update({"messages": messages[:3]})
    await state.update({"messages": messages[:3]})  # nothing new: no events
    assert [e.type for e in seen] == ["model.response", "log"]
    final = {
        "info": {"model_stats": {"instance_cost": 0.75, "api_calls": 2}, "mini_version": "2.4.6"},
        "messages": [
            *messages,
            {"role": "exit", "content": "boom", "extra": {"exit_status": "RateLimitError"}},
        ],
    }
    await state.update(final)
    assert [e.type for e in seen] == [
        "model.response",
        "log",
        "model.response",
        "tool.call",
        "tool.result",
    ]
    assert seen[3].data["arguments"] == {"command": "ls [r]"}
    assert seen[4].data["status"] == "error" and seen[4].data["error"] == "timed out"
    assert [m["role"] for m in state.messages] == ["system", "user", "user", "assistant", "tool"]
    assert state.messages[3]["tool_calls"][0]["function"]["arguments"] == '{"command": "ls [r]"}'
    assert state.usage.input_tokens == 30 and state.usage.output_tokens == 7
    assert state.usage.cached_tokens == 8 and state.usage.reasoning_tokens == 3
    assert state.usage.cost == 0.75 and state.usage.requests == 2
    assert (state.api_calls, state.tool_calls, state.tool_errors, state.format_errors) == (
        2,
        1,
        1,
        1,
    )
    assert (state.exit_status, state.exit_text, state.output) == (
        "RateLimitError",
        "boom",
        "Listing.",
    )


def test_exit_statuses_map_to_error_kinds() -> None:
    assert classify_exit("RateLimitError") == "model_rate_limit"
    assert classify_exit("InternalServerError") == "model_server_error"
    assert classify_exit("APIConnectionError") == "model_connection"
    assert classify_exit("AuthenticationError") == "model_auth"
    assert classify_exit("BadRequestError") == "model_request_error"
    assert classify_exit("KeyError") == "agent_error"


def test_install_refuses_a_directory_that_is_not_a_virtual_environment(tmp_path: Path) -> None:
    (tmp_path / "precious.txt").write_text("keep me")
    proc = subprocess.run(
        [sys.executable, "-m", "agentkit_mini_swe_agent", "install", "--dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 2
    assert "is not a virtual environment" in proc.stderr
    assert (tmp_path / "precious.txt").read_text() == "keep me"
