"""The real claude binary, offline, against agentkit's scripted model server.

Each test runs Claude Code inside a real sandbox whose only way out is the
forwarded model endpoint (the scripted server speaks the Anthropic Messages API).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest
from agentkit_claude_code import CLAUDE_CODE_VERSION, ClaudeCode

from agentkit import Event, HarnessResult, Limits, RunContext, Task
from agentkit.programs import ProgramBinary
from agentkit.testing.conformance import harness_conformance_test
from agentkit.testing.model_server import ScriptedModelServer
from agentkit.testing.programs import (
    bound_sandbox,
    cancel_while_the_model_is_called,
    files_containing,
    host_processes_with,
    sandbox_processes,
    time_out_while_the_model_is_called,
)
from agentkit.testing.programs import unique_task as new_task
from agentkit.testing.sandbox_fixtures import unique_sleep_arg

pytestmark = pytest.mark.anyio

API_KEY = "sk-agentkit-claude-7d2b5f9e1a"

#: The first call writes a file with the Bash tool and then waits for /app/release,
#: which only the test's on_event callback creates: the run can only finish if
#: events arrive while Claude Code runs.
WRITE_THEN_ANSWER: dict[str, Any] = {
    "rules": [
        {
            "match": {"after_tool": False, "has_tools": True},
            "reply": {
                "reasoning": "A shell command can write the file.",
                "content": "I will write the file.",
                "tool_calls": [
                    {
                        "name": "Bash",
                        "arguments": {
                            "command": "printf 'hello from claude\\n' > /app/out.txt && cat out.txt"
                            " && while [ ! -e /app/release ]; do sleep 0.05; done",
                            "description": "Write out.txt",
                        },
                    }
                ],
                "usage": {
                    "prompt_tokens": 1500,
                    "completion_tokens": 40,
                    "cached_tokens": 300,
                    "cache_creation_tokens": 200,
                },
            },
        },
        {
            "match": {"after_tool": True},
            "reply": {
                "content": "Wrote /app/out.txt.",
                "usage": {"prompt_tokens": 1650, "completion_tokens": 12, "cached_tokens": 1500},
            },
        },
    ]
}


def unique_task(prefix: str = "cc") -> Task:
    return new_task(prefix, "Write 'hello from claude' into /app/out.txt, then say what you did.")


@pytest.mark.model_script(WRITE_THEN_ANSWER)
async def test_bash_tool_writes_a_file_then_answers(
    model_server: ScriptedModelServer, sandbox_factory: Any, claude_bin: ProgramBinary
) -> None:
    sandbox = await bound_sandbox(sandbox_factory, claude_bin.mount_dirs, model_server)
    task = unique_task()
    seen: list[Event] = []
    running: list[bool] = []

    async def on_event(event: Event) -> None:
        seen.append(event)
        if event.type == "tool.call":
            # Claude Code waits for this tool, which waits for this file
            running.append(bool(await sandbox_processes(sandbox, str(claude_bin.path))))
            await sandbox.exec(["touch", "/app/release"])

    model_server.set_api_key(API_KEY)  # any other key: a 401
    context = RunContext(base_url=model_server.base_url, api_key=API_KEY, sandbox=sandbox)
    result = await ClaudeCode(model="scripted-model").run(task, context, on_event=on_event)

    assert result.status == "completed", result.error
    assert running == [True]
    assert Path(sandbox.host_path("/app/out.txt")).read_text() == "hello from claude\n"
    assert result.output == "Wrote /app/out.txt."
    assert [e.seq for e in seen] == [e.seq for e in result.events]
    assert not await sandbox_processes(sandbox, str(claude_bin.path))

    messages = result.messages
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "assistant"]
    assert messages[0]["content"] == task.input
    call = messages[1]["tool_calls"][0]
    assert call["function"]["name"] == "Bash"
    assert json.loads(call["function"]["arguments"])["description"] == "Write out.txt"
    assert messages[1]["content"] == "I will write the file."
    assert messages[1]["reasoning_content"] == "A shell command can write the file."
    assert messages[2] == {
        "role": "tool",
        "tool_call_id": call["id"],
        "content": "hello from claude",
    }
    assert messages[3] == {"role": "assistant", "content": "Wrote /app/out.txt."}

    # usage is exactly what the scripted server reported (cache reads and writes included)
    assert result.usage.input_tokens == 1500 + 1650
    assert result.usage.cached_tokens == 300 + 1500
    assert result.usage.output_tokens == 40 + 12
    assert result.usage.requests == 2
    assert result.usage.cost > 0  # Claude Code's own estimate
    ends = [e.data["usage"] for e in result.events if e.data.get("kind") == "message_end"]
    assert ends == [
        {"input_tokens": 1500, "output_tokens": 40, "cached_tokens": 300},
        {"input_tokens": 1650, "output_tokens": 12, "cached_tokens": 1500},
    ]

    assert result.raw["claude_code_version"] == CLAUDE_CODE_VERSION
    assert result.raw["session_id"] == next(
        e.data["session_id"] for e in result.events if e.type == "harness.start"
    )
    assert result.raw["turns"] == 2 and result.raw["binary_staged"] is False
    types = [e.type for e in result.events]
    assert types[0] == "harness.start" and types[-1] == "harness.end"
    assert {"model.request", "model.response", "tool.call", "tool.result"} <= set(types)
    tool_result = next(e for e in result.events if e.type == "tool.result")
    assert (tool_result.data["status"], tool_result.data["exit_code"]) == ("completed", 0)

    # the model got the prompt and the key, on the Messages API, asking for the run's model
    requests = model_server.model_requests
    assert len(requests) == 2 and all(r.api == "messages" and r.api_key_sent for r in requests)
    assert all(r.body["model"] == "scripted-model" for r in requests)
    assert task.input in json.dumps(requests[0].body)

    # the key is nowhere: not in the result, not in the sandbox's files (Claude Code's)
    assert API_KEY not in json.dumps(result.to_json())
    assert files_containing(sandbox.root, API_KEY) == []
    config_dir = Path(sandbox.host_path("/logs/agent/claude-code"))
    assert json.loads((config_dir / "settings.json").read_text())["model"] == "scripted-model"
    assert list(config_dir.rglob(f"{result.raw['session_id']}.jsonl"))  # its transcript


#: One Bash command, then an answer: the transcript has a tool call and its result.
LOOK_THEN_ANSWER: dict[str, Any] = {
    "rules": [
        {
            "match": {"after_tool": False, "has_tools": True},
            "reply": {
                "content": "I will look.",
                "tool_calls": [
                    {
                        "name": "Bash",
                        "arguments": {"command": "echo conformance", "description": "Look"},
                    }
                ],
                "usage": {"prompt_tokens": 900, "completion_tokens": 20, "cached_tokens": 100},
            },
        },
        {"match": {"after_tool": True}, "reply": {"content": "Hi from the scripted model."}},
    ]
}


def _answered_after_its_tool(result: HarnessResult) -> None:
    assert result.output == "Hi from the scripted model."
    assert result.raw["claude_code_version"] == CLAUDE_CODE_VERSION and result.raw["session_id"]
    [tool] = [m for m in result.messages if m["role"] == "tool"]
    assert "conformance" in tool["content"]
    assert result.usage.cached_tokens == 100


# run on its own: the harness opens a local sandbox with its binary bound read-only
test_conformance = harness_conformance_test(
    "claude-code", script=LOOK_THEN_ANSWER, fixtures=["claude_bin"], check=_answered_after_its_tool
)


def _server_error(result: HarnessResult) -> None:
    assert result.error_kind == "model_server_error" and result.retryable
    assert result.error is not None and "upstream exploded (scripted)" in result.error


# the failure path too: a 500 gives a failed, classified, conforming result with its message
test_conformance_on_a_server_error = harness_conformance_test(
    "claude-code",
    script={
        "default": {"status": 500, "message": "upstream exploded (scripted)", "retry_after": 0}
    },
    options={"max_retries": 0},
    fixtures=["claude_bin"],
    expect_status="failed",
    check=_server_error,
)


@pytest.mark.model_script(
    {"default": {"status": 500, "message": "upstream exploded (scripted)", "retry_after": 0}}
)
async def test_server_error_fails_with_the_message(
    model_server: ScriptedModelServer, sandbox_factory: Any, claude_bin: ProgramBinary
) -> None:
    sandbox = await bound_sandbox(sandbox_factory, claude_bin.mount_dirs, model_server)
    model_server.set_api_key(API_KEY)  # any other key: a 401
    context = RunContext(base_url=model_server.base_url, api_key=API_KEY, sandbox=sandbox)
    result = await ClaudeCode(model="scripted-model", max_retries=1).run(unique_task(), context)
    assert result.status == "failed"
    assert result.error_kind == "model_server_error"
    assert result.retryable
    assert result.error is not None and "upstream exploded (scripted)" in result.error
    [error] = [e for e in result.events if e.type == "error"]
    assert error.data["status_code"] == 500
    # Claude Code retried once on its own before giving up
    assert result.raw["retries"] == 1
    assert len(model_server.model_requests) == 2


@pytest.mark.model_script({"default": {"fail": "rate_limit", "message": "slow down (scripted)"}})
async def test_rate_limit_fails_with_the_message(
    model_server: ScriptedModelServer, sandbox_factory: Any, claude_bin: ProgramBinary
) -> None:
    sandbox = await bound_sandbox(sandbox_factory, claude_bin.mount_dirs, model_server)
    context = RunContext(base_url=model_server.base_url, sandbox=sandbox)
    result = await ClaudeCode(model="scripted-model", max_retries=0).run(unique_task(), context)
    assert result.status == "failed"
    assert result.error_kind == "model_rate_limit"
    assert result.retryable
    assert result.error is not None and "slow down (scripted)" in result.error


#: The harness's own timeout in the hanging-model test: well past Claude Code's
#: start-up (under a second here), so that it is waiting for the model when it fires.
HANG_TIMEOUT = 10


async def test_hanging_model_times_out_and_nothing_is_left(
    model_server: ScriptedModelServer, sandbox_factory: Any, claude_bin: ProgramBinary
) -> None:
    """Claude Code's request reached the model, which never answers (the server holds
    it back): its own timeout ends the run while it waits, and nothing is left."""
    sandbox = await bound_sandbox(sandbox_factory, claude_bin.mount_dirs, model_server)
    context = RunContext(
        base_url=model_server.base_url, sandbox=sandbox, limits=Limits(timeout_sec=600)
    )
    task = unique_task("hang")
    harness = ClaudeCode(model="scripted-model", timeout=HANG_TIMEOUT)
    result = await time_out_while_the_model_is_called(
        lambda: harness.run(task, context),
        model_server,
        str(task.input),
        timeout=HANG_TIMEOUT,
        within=HANG_TIMEOUT + 120,
    )
    # the sandbox is still open: the harness itself killed Claude Code's whole tree
    assert not await sandbox_processes(sandbox, str(claude_bin.path))
    assert not host_processes_with(result.raw["session_id"])
    assert result.events[-1].type == "harness.end"


async def test_a_run_cancelled_while_claude_waits_for_the_model_leaves_nothing(
    model_server: ScriptedModelServer, sandbox_factory: Any, claude_bin: ProgramBinary
) -> None:
    """Claude Code's request reached the model, whose answer is held back; the run is
    then cancelled as a runner's timeout does: Claude Code's whole tree is killed."""
    sandbox = await bound_sandbox(sandbox_factory, claude_bin.mount_dirs, model_server)
    context = RunContext(base_url=model_server.base_url, sandbox=sandbox)
    task = unique_task("hang")
    harness = ClaudeCode(model="scripted-model")
    received = await cancel_while_the_model_is_called(
        lambda: harness.run(task, context), model_server, str(task.input), within=120
    )
    assert all(r.api == "messages" for r in received)
    assert not await sandbox_processes(sandbox, str(claude_bin.path))


SLEEP = unique_sleep_arg()
SLEEPING_TOOL = {
    "rules": [
        {
            "match": {"after_tool": False, "has_tools": True},
            "reply": {
                "tool_calls": [
                    {
                        "name": "Bash",
                        # Claude Code refuses a standalone long sleep
                        "arguments": {
                            "command": f"echo waiting; sleep {SLEEP}",
                            "description": "wait",
                        },
                    }
                ]
            },
        }
    ],
    "default": {"content": "done"},
}


@pytest.mark.model_script(SLEEPING_TOOL)
async def test_cancelling_a_run_kills_the_commands_claude_started(
    model_server: ScriptedModelServer, sandbox_factory: Any, claude_bin: ProgramBinary
) -> None:
    """A runner timeout cancels run(): Claude Code and the commands it started are killed."""
    sandbox = await bound_sandbox(sandbox_factory, claude_bin.mount_dirs, model_server)
    context = RunContext(base_url=model_server.base_url, sandbox=sandbox)
    sleeping = anyio.Event()

    async def on_event(event: Event) -> None:
        if event.type == "tool.call":
            while not host_processes_with(f"sleep {SLEEP}"):
                await anyio.sleep(0.05)
            sleeping.set()

    finished: list[Any] = []
    async with anyio.create_task_group() as tg:

        async def run() -> None:
            harness = ClaudeCode(model="scripted-model")
            finished.append(await harness.run(unique_task(), context, on_event))

        tg.start_soon(run)
        with anyio.fail_after(120):  # a hang guard; the wait is for the sleep to run
            await sleeping.wait()  # the Bash tool's sleep is running inside Claude Code
        tg.cancel_scope.cancel()
    assert finished == []
    assert not host_processes_with(f"sleep {SLEEP}")
    assert not await sandbox_processes(sandbox, str(claude_bin.path))


ENDLESS_TOOLS = {
    "rules": [
        {
            "match": {"has_tools": True},
            "reply": {
                "content": "Once more.",
                "tool_calls": [
                    {
                        "name": "Bash",
                        "arguments": {"command": "echo again >> /app/log", "description": "loop"},
                    }
                ],
            },
        }
    ]
}


@pytest.mark.model_script(ENDLESS_TOOLS)
async def test_max_turns_is_claude_codes_own_limit(
    model_server: ScriptedModelServer, sandbox_factory: Any, claude_bin: ProgramBinary
) -> None:
    sandbox = await bound_sandbox(sandbox_factory, claude_bin.mount_dirs, model_server)
    context = RunContext(
        base_url=model_server.base_url,
        sandbox=sandbox,
        limits=Limits(max_turns=2, max_tokens=777),
        sampling_args={"temperature": 0.3},
    )
    result = await ClaudeCode(model="scripted-model").run(unique_task("loop"), context)
    # the model never stops calling tools: Claude Code stops after its second call's tools
    assert result.status == "timeout", result.error
    assert result.error_kind == "max_turns"
    assert result.raw["turns"] == 2 and result.raw["tool_calls"] == 2
    assert result.raw["subtype"] == "error_max_turns"
    assert Path(sandbox.host_path("/app/log")).read_text() == "again\nagain\n"
    assert len(model_server.model_requests) == 2
    assert all(r.body["max_tokens"] == 777 for r in model_server.model_requests)
    assert [e for e in result.events if e.type == "log" and "temperature" in str(e.data)]


@pytest.mark.model_script({"default": {"content": "Reviewed."}})
async def test_settings_and_system_prompt_reach_claude_code(
    model_server: ScriptedModelServer, sandbox_factory: Any, claude_bin: ProgramBinary
) -> None:
    sandbox = await bound_sandbox(sandbox_factory, claude_bin.mount_dirs, model_server)
    context = RunContext(base_url=model_server.base_url, sandbox=sandbox)
    harness = ClaudeCode(
        model="scripted-model",
        append_system_prompt="You are REVIEWER-7731.",
        settings={"permissions": {"deny": ["WebFetch"]}},
    )
    result = await harness.run(unique_task("cfg"), context)
    assert result.status == "completed", result.error
    assert result.output == "Reviewed."
    [request] = model_server.model_requests
    assert "You are REVIEWER-7731." in json.dumps(request.body["system"])
    settings = json.loads(
        Path(sandbox.host_path("/logs/agent/claude-code/settings.json")).read_text()
    )
    assert settings["permissions"] == {"defaultMode": "bypassPermissions", "deny": ["WebFetch"]}


RELATIVE_WRITE = {
    "rules": [
        {
            "match": {"after_tool": False, "has_tools": True},
            "reply": {
                "tool_calls": [
                    {
                        "name": "Bash",
                        "arguments": {"command": "printf 'hi\\n' > out.txt", "description": "w"},
                    }
                ]
            },
        }
    ],
    "default": {"content": "Wrote out.txt."},
}


@pytest.mark.model_script(RELATIVE_WRITE)
async def test_host_sandbox_keeps_claude_files_in_the_rollout(
    model_server: ScriptedModelServer, sandbox_factory: Any, claude_bin: ProgramBinary
) -> None:
    sandbox = await sandbox_factory("host", model_endpoint=model_server.base_url)
    model_server.set_api_key(API_KEY)  # any other key: a 401
    context = RunContext(base_url=model_server.base_url, api_key=API_KEY, sandbox=sandbox)
    result = await ClaudeCode(model="scripted-model").run(unique_task("host"), context)
    assert result.status == "completed", result.error
    assert (sandbox.fs_root / "app" / "out.txt").read_text() == "hi\n"
    config_dir = sandbox.fs_root / "logs" / "agent" / "claude-code"
    assert list(config_dir.rglob(f"{result.raw['session_id']}.jsonl"))
    assert files_containing(sandbox.root, API_KEY) == []


COSTLY_TOOLS = {
    "rules": [
        {
            "match": {"has_tools": True},
            "reply": {
                "tool_calls": [
                    {"name": "Bash", "arguments": {"command": "env", "description": "x"}}
                ],
                "usage": {"prompt_tokens": 1000, "completion_tokens": 10},
            },
        }
    ]
}


@pytest.mark.model_script(COSTLY_TOOLS)
async def test_token_limit_stops_claude_code_and_headers_reach_the_endpoint(
    model_server: ScriptedModelServer, sandbox_factory: Any, claude_bin: ProgramBinary
) -> None:
    sandbox = await bound_sandbox(sandbox_factory, claude_bin.mount_dirs, model_server)
    secret = "gw-secret-9c3d1b6e"
    context = RunContext(
        base_url=model_server.base_url,
        sandbox=sandbox,
        limits=Limits(token_limit=2500),
        headers={"X-Team": "evals", "X-Gateway-Key": secret},
    )
    result = await ClaudeCode(model="scripted-model").run(unique_task("tokens"), context)
    assert result.status == "timeout", result.error
    assert result.error_kind == "token_limit"
    # stopped as the third call began: its input and message_start's one output token
    assert result.usage.total_tokens == 2 * 1010 + 1001
    requests = model_server.model_requests
    assert 3 <= len(requests) <= 4
    assert all(r.headers.get("x-team") == "evals" for r in requests)
    assert all(r.headers.get("x-gateway-key") == secret for r in requests)
    # the Bash tool's env printed neither the header's value nor the key
    tool_output = json.dumps([m for m in result.messages if m["role"] == "tool"])
    assert "CLAUDE_CONFIG_DIR=" in tool_output
    assert "ANTHROPIC_API_KEY" not in tool_output and secret not in tool_output
    assert files_containing(sandbox.root, secret) == []
    assert secret not in json.dumps(result.to_json())
