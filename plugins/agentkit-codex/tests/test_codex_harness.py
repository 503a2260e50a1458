"""The real codex binary, offline, against agentkit's scripted model server.

Each test runs codex inside a real sandbox whose only way out is the
forwarded model endpoint (the scripted server speaks the Responses API).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest
from agentkit_codex import CODEX_VERSION, Codex

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

API_KEY = "sk-agentkit-codex-4c1e9a7b2d"

#: The first call writes a file with the shell tool and then waits for /app/release,
#: which only the test's on_event callback creates: the run can only finish if
#: events arrive while codex runs.
WRITE_THEN_ANSWER: dict[str, Any] = {
    "rules": [
        {
            "match": {"after_tool": False},
            "reply": {
                "reasoning": "A shell command can write the file.",
                "content": "I will write the file.",
                "tool_calls": [
                    {
                        "name": "exec_command",
                        "arguments": {
                            "cmd": "printf 'hello from codex\\n' > /app/out.txt && cat out.txt"
                            " && while [ ! -e /app/release ]; do sleep 0.05; done"
                        },
                    }
                ],
                "usage": {
                    "prompt_tokens": 1500,
                    "completion_tokens": 40,
                    "cached_tokens": 300,
                    "reasoning_tokens": 9,
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


def unique_task(prefix: str = "cx") -> Task:
    return new_task(prefix, "Write 'hello from codex' into /app/out.txt, then say what you did.")


@pytest.mark.model_script(WRITE_THEN_ANSWER)
async def test_shell_tool_writes_a_file_then_answers(
    model_server: ScriptedModelServer, sandbox_factory: Any, codex_bin: ProgramBinary
) -> None:
    sandbox = await bound_sandbox(sandbox_factory, codex_bin.mount_dirs, model_server)
    task = unique_task()
    seen: list[Event] = []
    running: list[bool] = []

    async def on_event(event: Event) -> None:
        seen.append(event)
        if event.type == "tool.call":
            # codex is waiting for this tool, which waits for this file
            running.append(bool(await sandbox_processes(sandbox, str(codex_bin.path))))
            await sandbox.exec(["touch", "/app/release"])

    model_server.set_api_key(API_KEY)  # any other key: a 401
    context = RunContext(base_url=model_server.base_url, api_key=API_KEY, sandbox=sandbox)
    result = await Codex(model="scripted-model").run(task, context, on_event=on_event)

    assert result.status == "completed", result.error
    assert running == [True]
    assert Path(sandbox.host_path("/app/out.txt")).read_text() == "hello from codex\n"
    assert result.output == "Wrote /app/out.txt."
    assert [e.seq for e in seen] == [e.seq for e in result.events]
    assert not await sandbox_processes(sandbox, str(codex_bin.path))

    messages = result.messages
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "assistant"]
    assert messages[0]["content"] == task.input
    call = messages[1]["tool_calls"][0]
    assert call["function"]["name"] == "exec_command"
    assert json.loads(call["function"]["arguments"])["cmd"].startswith("printf 'hello from codex")
    assert messages[1]["content"] == "I will write the file."
    assert messages[1]["reasoning_content"] == "A shell command can write the file."
    assert messages[2]["tool_call_id"] == call["id"]
    assert "hello from codex" in messages[2]["content"]
    assert messages[3] == {"role": "assistant", "content": "Wrote /app/out.txt."}

    # usage is exactly what the scripted server reported
    assert result.usage.input_tokens == 1500 + 1650
    assert result.usage.cached_tokens == 300 + 1500
    assert result.usage.output_tokens == 40 + 12
    assert result.usage.reasoning_tokens == 9
    assert result.usage.requests == 2

    assert result.raw["codex_version"] == CODEX_VERSION
    assert result.raw["session_id"] and result.raw["turns"] == 2
    assert result.raw["rollout_file"].startswith("/logs/agent/codex/sessions/")
    assert result.raw["binary_staged"] is False
    types = [e.type for e in result.events]
    assert types[0] == "harness.start" and types[-1] == "harness.end"
    assert {"model.response", "tool.call", "tool.result"} <= set(types)
    tool_result = next(e for e in result.events if e.type == "tool.result")
    assert tool_result.data["exit_code"] == 0 and tool_result.data["status"] == "completed"

    # the model got the prompt and the key as a bearer token, on the Responses API
    requests = model_server.model_requests
    assert len(requests) == 2 and all(r.api == "responses" and r.api_key_sent for r in requests)
    assert task.input in json.dumps(requests[0].body)

    # the key is nowhere: not in the result, not in the sandbox's files (codex's home)
    assert API_KEY not in json.dumps(result.to_json())
    assert files_containing(sandbox.root, API_KEY) == []
    config = Path(sandbox.host_path("/logs/agent/codex/config.toml")).read_text()
    assert "AGENTKIT_CODEX_API_KEY" in config and API_KEY not in config


#: One shell command, then an answer: the transcript has a tool call and its result.
LOOK_THEN_ANSWER: dict[str, Any] = {
    "rules": [
        {
            "match": {"after_tool": False, "has_tools": True},
            "reply": {
                "content": "I will look.",
                "tool_calls": [{"name": "exec_command", "arguments": {"cmd": "echo conformance"}}],
                "usage": {"prompt_tokens": 900, "completion_tokens": 20, "cached_tokens": 100},
            },
        },
        {"match": {"after_tool": True}, "reply": {"content": "Hi from the scripted model."}},
    ]
}


def _answered_after_its_tool(result: HarnessResult) -> None:
    assert result.output == "Hi from the scripted model."
    assert result.raw["codex_version"] == CODEX_VERSION and result.raw["session_id"]
    [tool] = [m for m in result.messages if m["role"] == "tool"]
    assert "conformance" in tool["content"]
    assert result.usage.cached_tokens == 100


# run on its own: the harness opens a local sandbox with its binary bound read-only
test_conformance = harness_conformance_test(
    "codex", script=LOOK_THEN_ANSWER, fixtures=["codex_bin"], check=_answered_after_its_tool
)


def _server_error(result: HarnessResult) -> None:
    assert result.error_kind == "model_server_error" and result.retryable
    assert result.error is not None and "HTTP 500" in result.error


# the failure path too: a 500 gives a failed, classified, conforming result
test_conformance_on_a_server_error = harness_conformance_test(
    "codex",
    script={
        "default": {"status": 500, "message": "upstream exploded (scripted)", "retry_after": 0}
    },
    options={"max_retries": 0},
    fixtures=["codex_bin"],
    expect_status="failed",
    check=_server_error,
)


@pytest.mark.model_script(
    {"default": {"status": 500, "message": "upstream exploded (scripted)", "retry_after": 0}}
)
async def test_server_error_fails_with_the_message(
    model_server: ScriptedModelServer, sandbox_factory: Any, codex_bin: ProgramBinary
) -> None:
    sandbox = await bound_sandbox(sandbox_factory, codex_bin.mount_dirs, model_server)
    model_server.set_api_key(API_KEY)  # any other key: a 401
    context = RunContext(base_url=model_server.base_url, api_key=API_KEY, sandbox=sandbox)
    result = await Codex(model="scripted-model", max_retries=1).run(unique_task(), context)
    assert result.status == "failed"
    assert result.error_kind == "model_server_error"
    assert result.retryable
    # codex replaces a 500's body with a sentence of its own; the harness says what happened
    assert result.error is not None and "HTTP 500" in result.error
    errors = [e for e in result.events if e.type == "error"]
    assert errors and errors[0].data["kind"] == "model_server_error"
    # codex retried on its own (request and stream retries: max_retries=1 each) before giving up
    assert len(model_server.model_requests) == 4
    assert result.raw["retries"] == 1


@pytest.mark.model_script(
    {"default": {"status": 503, "message": "overloaded (scripted)", "retry_after": 0}}
)
async def test_other_server_errors_keep_their_message(
    model_server: ScriptedModelServer, sandbox_factory: Any, codex_bin: ProgramBinary
) -> None:
    sandbox = await bound_sandbox(sandbox_factory, codex_bin.mount_dirs, model_server)
    context = RunContext(base_url=model_server.base_url, sandbox=sandbox)
    result = await Codex(model="scripted-model", max_retries=0).run(unique_task(), context)
    assert result.status == "failed"
    assert result.error_kind == "model_server_error"
    assert result.error is not None and "overloaded (scripted)" in result.error


@pytest.mark.model_script({"default": {"fail": "rate_limit"}})
async def test_rate_limit_fails_with_the_message(
    model_server: ScriptedModelServer, sandbox_factory: Any, codex_bin: ProgramBinary
) -> None:
    sandbox = await bound_sandbox(sandbox_factory, codex_bin.mount_dirs, model_server)
    context = RunContext(base_url=model_server.base_url, sandbox=sandbox)
    result = await Codex(model="scripted-model", max_retries=0).run(unique_task(), context)
    assert result.status == "failed"
    assert result.error_kind == "model_rate_limit"
    assert result.retryable
    assert result.error is not None and "429" in result.error


@pytest.mark.model_script({"default": {"status": 400, "message": "context too long (scripted)"}})
async def test_request_error_gives_the_servers_message(
    model_server: ScriptedModelServer, sandbox_factory: Any, codex_bin: ProgramBinary
) -> None:
    sandbox = await bound_sandbox(sandbox_factory, codex_bin.mount_dirs, model_server)
    context = RunContext(base_url=model_server.base_url, sandbox=sandbox)
    result = await Codex(model="scripted-model").run(unique_task(), context)
    assert result.status == "failed"
    assert result.error == "context too long (scripted)"
    assert result.error_kind == "model_request_error"
    assert not result.retryable


#: The harness's own timeout in the hanging-model test: well past codex's start-up
#: (under a second here), so that codex is waiting for the model when it fires.
HANG_TIMEOUT = 10


async def test_hanging_model_times_out_and_nothing_is_left(
    model_server: ScriptedModelServer, sandbox_factory: Any, codex_bin: ProgramBinary
) -> None:
    """Codex's request reached the model, which never answers (the server holds it
    back): codex's own timeout ends the run while it waits, and nothing is left."""
    sandbox = await bound_sandbox(sandbox_factory, codex_bin.mount_dirs, model_server)
    context = RunContext(
        base_url=model_server.base_url, sandbox=sandbox, limits=Limits(timeout_sec=600)
    )
    task = unique_task("hang")
    harness = Codex(model="scripted-model", timeout=HANG_TIMEOUT)
    result = await time_out_while_the_model_is_called(
        lambda: harness.run(task, context),
        model_server,
        str(task.input),
        timeout=HANG_TIMEOUT,
        within=HANG_TIMEOUT + 120,
    )
    # the sandbox is still open: the harness itself killed codex's whole tree
    assert not await sandbox_processes(sandbox, str(codex_bin.path))
    assert result.events[-1].type == "harness.end"


async def test_a_run_cancelled_while_codex_waits_for_the_model_leaves_nothing(
    model_server: ScriptedModelServer, sandbox_factory: Any, codex_bin: ProgramBinary
) -> None:
    """Codex's request reached the model, whose answer is held back; the run is then
    cancelled as a runner's timeout does: codex's whole tree is killed."""
    sandbox = await bound_sandbox(sandbox_factory, codex_bin.mount_dirs, model_server)
    context = RunContext(base_url=model_server.base_url, sandbox=sandbox)
    task = unique_task("hang")
    harness = Codex(model="scripted-model")
    received = await cancel_while_the_model_is_called(
        lambda: harness.run(task, context), model_server, str(task.input), within=120
    )
    assert all(r.api == "responses" for r in received)
    assert not await sandbox_processes(sandbox, str(codex_bin.path))


SLEEP = unique_sleep_arg()
SLEEPING_TOOL = {
    "rules": [
        {
            "match": {"after_tool": False},
            "reply": {
                "tool_calls": [{"name": "exec_command", "arguments": {"cmd": f"sleep {SLEEP}"}}]
            },
        }
    ],
    "default": {"content": "done"},
}


@pytest.mark.model_script(SLEEPING_TOOL)
async def test_cancelling_a_run_kills_the_commands_codex_started(
    model_server: ScriptedModelServer, sandbox_factory: Any, codex_bin: ProgramBinary
) -> None:
    """A runner timeout cancels run(): codex and the commands it started are killed."""
    sandbox = await bound_sandbox(sandbox_factory, codex_bin.mount_dirs, model_server)
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
            finished.append(
                await Codex(model="scripted-model").run(unique_task(), context, on_event)
            )

        tg.start_soon(run)
        with anyio.fail_after(120):  # a hang guard; the wait is for the sleep to run
            await sleeping.wait()  # the shell tool's sleep is running inside codex
        tg.cancel_scope.cancel()
    assert finished == []
    assert not host_processes_with(f"sleep {SLEEP}")
    assert not await sandbox_processes(sandbox, str(codex_bin.path))


ENDLESS_TOOLS = {
    "rules": [
        {
            "match": {"has_tools": True},
            "reply": {
                "content": "Once more.",
                "tool_calls": [
                    {"name": "exec_command", "arguments": {"cmd": "echo again >> /app/log"}}
                ],
            },
        }
    ]
}


@pytest.mark.model_script(ENDLESS_TOOLS)
async def test_max_turns_stops_codex_as_the_next_call_begins(
    model_server: ScriptedModelServer, sandbox_factory: Any, codex_bin: ProgramBinary
) -> None:
    sandbox = await bound_sandbox(sandbox_factory, codex_bin.mount_dirs, model_server)
    context = RunContext(
        base_url=model_server.base_url,
        sandbox=sandbox,
        limits=Limits(max_turns=2),
        sampling_args={"reasoning_effort": "high", "temperature": 0.3},
    )
    result = await Codex(model="scripted-model").run(unique_task("loop"), context)
    # the model never stops calling tools: codex is stopped once both calls' tools ran
    assert result.status == "timeout", result.error
    assert result.error_kind == "max_turns"
    assert result.raw["turns"] == 2
    assert result.raw["tool_calls"] == 2
    assert Path(sandbox.host_path("/app/log")).read_text() == "again\nagain\n"
    assert 2 <= len(model_server.model_requests) <= 3
    assert all(r.body["reasoning"]["effort"] == "high" for r in model_server.model_requests)
    ignored = [e for e in result.events if e.type == "log" and "temperature" in str(e.data)]
    assert ignored  # codex takes no temperature: the run says so
    assert not await sandbox_processes(sandbox, "tail -n +1 -F")  # the session follower is gone


@pytest.mark.model_script({"default": {"content": "never asked"}})
async def test_unknown_config_key_fails_naming_it(
    model_server: ScriptedModelServer, sandbox_factory: Any, codex_bin: ProgramBinary
) -> None:
    sandbox = await bound_sandbox(sandbox_factory, codex_bin.mount_dirs, model_server)
    context = RunContext(base_url=model_server.base_url, sandbox=sandbox)
    harness = Codex(model="scripted-model", config={"model_providers": {"agentkit": {"bogus": 1}}})
    result = await harness.run(unique_task("config"), context)
    assert result.status == "failed"
    assert result.error_kind == "agent_error"
    assert "config.toml" in (result.error or "")
    assert "model_providers.agentkit.bogus" in (result.error or "")
    assert model_server.model_requests == []


@pytest.mark.model_script({"default": {"content": "Instructions followed."}})
async def test_config_option_reaches_codex(
    model_server: ScriptedModelServer, sandbox_factory: Any, codex_bin: ProgramBinary
) -> None:
    sandbox = await bound_sandbox(sandbox_factory, codex_bin.mount_dirs, model_server)
    context = RunContext(base_url=model_server.base_url, sandbox=sandbox)
    harness = Codex(
        model="scripted-model", config={"developer_instructions": "You are REVIEWER-5521."}
    )
    result = await harness.run(unique_task("cfg"), context)
    assert result.status == "completed", result.error
    [request] = model_server.model_requests
    assert "You are REVIEWER-5521." in json.dumps(request.body)


RELATIVE_WRITE = {
    "rules": [
        {
            "match": {"after_tool": False},
            "reply": {
                "tool_calls": [
                    {"name": "exec_command", "arguments": {"cmd": "printf 'hi\\n' > out.txt"}}
                ]
            },
        }
    ],
    "default": {"content": "Wrote out.txt."},
}


@pytest.mark.model_script(RELATIVE_WRITE)
async def test_host_sandbox_keeps_codex_home_in_the_rollout(
    model_server: ScriptedModelServer, sandbox_factory: Any, codex_bin: ProgramBinary
) -> None:
    sandbox = await sandbox_factory("host", model_endpoint=model_server.base_url)
    model_server.set_api_key(API_KEY)  # any other key: a 401
    context = RunContext(base_url=model_server.base_url, api_key=API_KEY, sandbox=sandbox)
    result = await Codex(model="scripted-model").run(unique_task("host"), context)
    assert result.status == "completed", result.error
    assert (sandbox.fs_root / "app" / "out.txt").read_text() == "hi\n"
    assert list((sandbox.fs_root / "logs" / "agent" / "codex" / "sessions").rglob("rollout-*"))
    assert result.raw["turns"] == 2
    assert files_containing(sandbox.root, API_KEY) == []


@pytest.mark.slow
@pytest.mark.model_script({"default": {"content": "copied"}})
async def test_binary_is_copied_into_a_sandbox_that_cannot_see_it(
    model_server: ScriptedModelServer, sandbox_factory: Any, codex_bin: ProgramBinary
) -> None:
    sandbox = await sandbox_factory("local", model_endpoint=model_server.base_url)
    context = RunContext(base_url=model_server.base_url, sandbox=sandbox)
    result = await Codex(model="scripted-model").run(unique_task("staged"), context)
    assert result.status == "completed", result.error
    assert result.raw["binary_staged"] is True
    assert not sandbox.host_path("/tmp/.agentkit-codex/codex").exists()


COSTLY_TOOLS = {
    "rules": [
        {
            "match": {"has_tools": True},
            "reply": {
                "tool_calls": [{"name": "exec_command", "arguments": {"cmd": "env"}}],
                "usage": {"prompt_tokens": 1000, "completion_tokens": 10},
            },
        }
    ]
}


@pytest.mark.model_script(COSTLY_TOOLS)
async def test_token_limit_stops_codex_and_headers_reach_the_endpoint(
    model_server: ScriptedModelServer, sandbox_factory: Any, codex_bin: ProgramBinary
) -> None:
    sandbox = await bound_sandbox(sandbox_factory, codex_bin.mount_dirs, model_server)
    secret = "gw-secret-5f8e2a7c"
    context = RunContext(
        base_url=model_server.base_url,
        sandbox=sandbox,
        limits=Limits(token_limit=2500),
        headers={"X-Team": "evals", "X-Gateway-Key": secret},
    )
    result = await Codex(model="scripted-model").run(unique_task("tokens"), context)
    assert result.status == "timeout", result.error
    assert result.error_kind == "token_limit"
    assert result.usage.total_tokens == 3 * 1010  # stopped once the third call was counted
    requests = model_server.model_requests
    assert 3 <= len(requests) <= 4
    assert all(r.headers.get("x-team") == "evals" for r in requests)
    assert all(r.headers.get("x-gateway-key") == secret for r in requests)
    # the header's value went through the environment only, and not the shell tool's
    tool_output = json.dumps([m for m in result.messages if m["role"] == "tool"])
    assert "CODEX_HOME=" in tool_output
    assert "AGENTKIT_CODEX_" not in tool_output and secret not in tool_output
    assert files_containing(sandbox.root, secret) == []
    assert secret not in json.dumps(result.to_json())
