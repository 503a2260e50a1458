"""The real opencode binary, offline, against agentkit's scripted model server.

Each test runs opencode inside a real sandbox (bubblewrap, or the host mode)
whose only way out is the forwarded model endpoint.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from agentkit_opencode import OPENCODE_VERSION, OpenCode, OpenCodeBinary

from agentkit import Event, Limits, RunContext, Task
from agentkit.testing.conformance import harness_conformance_test
from agentkit.testing.model_server import ScriptedModelServer
from agentkit.testing.programs import (
    bound_sandbox,
    cancel_when_running,
    cancel_while_the_model_is_called,
    files_containing,
    processes_with,
    time_out_while_the_model_is_called,
)
from agentkit.testing.programs import unique_task as new_task

pytestmark = pytest.mark.anyio

API_KEY = "sk-agentkit-test-6f1d2c9e8b7a"

WRITE_THEN_ANSWER: dict[str, Any] = {
    "rules": [
        {
            "match": {"after_tool": False},
            "reply": {
                "reasoning": "A bash command can write the file.",
                "content": "I will write the file.",
                "tool_calls": [
                    {
                        "name": "bash",
                        "arguments": {
                            "command": "printf 'hello from opencode\\n' > /app/out.txt"
                            " && cat out.txt",
                            "description": "Write out.txt",
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
            # the latency keeps opencode running while the first events are delivered
            "reply": {
                "content": "Wrote /app/out.txt.",
                "latency": 2.0,
                "usage": {"prompt_tokens": 1650, "completion_tokens": 12},
            },
        },
    ]
}


# run on its own: the harness opens a local sandbox with its binary bound read-only
test_conformance = harness_conformance_test(
    "opencode", script=WRITE_THEN_ANSWER, fixtures=["opencode_bin", "requires_bwrap"]
)


def unique_task(prefix: str = "oc") -> Task:
    return new_task(prefix, "Write 'hello from opencode' into /app/out.txt, then say what you did.")


@pytest.mark.model_script(WRITE_THEN_ANSWER)
async def test_bash_tool_writes_a_file_then_answers(
    model_server: ScriptedModelServer, sandbox_factory: Any, opencode_bin: OpenCodeBinary
) -> None:
    sandbox = await bound_sandbox(sandbox_factory, opencode_bin.mount_dirs, model_server)
    task = unique_task()
    marker = f"agentkit {task.task_id}"  # opencode's --title: in its command line
    live: list[tuple[str, bool]] = []

    def on_event(event: Event) -> None:
        if event.type in ("tool.result", "harness.end"):
            live.append((event.type, bool(processes_with(marker))))

    model_server.set_api_key(API_KEY)  # any other key: a 401
    context = RunContext(base_url=model_server.base_url, api_key=API_KEY, sandbox=sandbox)
    result = await OpenCode(model="scripted-model").run(task, context, on_event=on_event)

    assert result.status == "completed", result.error
    assert (Path(sandbox.host_path("/app/out.txt"))).read_text() == "hello from opencode\n"
    assert result.output == "Wrote /app/out.txt."
    # on_event saw the tool result while opencode was still running
    assert live == [("tool.result", True), ("harness.end", False)]
    assert not processes_with(marker)

    messages = result.messages
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "assistant"]
    assert messages[0]["content"] == task.input
    call = messages[1]["tool_calls"][0]
    assert call["function"]["name"] == "bash"
    assert json.loads(call["function"]["arguments"])["description"] == "Write out.txt"
    assert messages[1]["reasoning_content"] == "A bash command can write the file."
    assert messages[2] == {
        "role": "tool",
        "tool_call_id": call["id"],
        "content": "hello from opencode\n",
    }

    # usage is exactly what the scripted server reported
    assert result.usage.input_tokens == 1500 + 1650
    assert result.usage.cached_tokens == 300
    assert result.usage.output_tokens == 40 + 12
    assert result.usage.reasoning_tokens == 9
    assert result.usage.requests == 2

    assert result.raw["opencode_version"] == OPENCODE_VERSION
    assert result.raw["session_id"].startswith("ses_")
    assert result.raw["binary_staged"] is False
    types = [e.type for e in result.events]
    assert types[0] == "harness.start" and types[-1] == "harness.end"
    assert {"model.request", "model.response", "tool.call", "tool.result"} <= set(types)
    tool_result = next(e for e in result.events if e.type == "tool.result")
    assert tool_result.data["exit_code"] == 0

    # the model got the prompt verbatim (stdin, no added quotes) and the key as a bearer token
    chats = model_server.chat_requests
    assert len(chats) == 2 and all(r.api_key_sent for r in chats)
    first_user = [m for m in chats[0].body["messages"] if m["role"] == "user"][-1]
    text = first_user["content"]
    text = text if isinstance(text, str) else "".join(p.get("text", "") for p in text)
    assert text.strip() == task.input

    # the key is nowhere: not in the result, not in the sandbox's files (opencode's db and log)
    assert API_KEY not in json.dumps(result.to_json())
    assert files_containing(sandbox.root, API_KEY) == []
    assert files_containing(sandbox.host_path("/logs/agent/opencode"), "ses_")  # its data is there


@pytest.mark.usefixtures("requires_bwrap")
@pytest.mark.model_script({"default": {"content": "Hi from the scripted model."}})
async def test_standalone_run_opens_its_own_sandbox(
    model_server: ScriptedModelServer, opencode_bin: OpenCodeBinary
) -> None:
    task = unique_task("standalone")
    harness = OpenCode(model="scripted-model", binary=str(opencode_bin.path))
    result = await harness.run(task, RunContext(base_url=model_server.base_url))
    assert result.status == "completed", result.error
    assert result.output == "Hi from the scripted model."
    assert result.raw["opencode_version"] == OPENCODE_VERSION
    assert not processes_with(f"agentkit {task.task_id}")
    # without an API key no Authorization header is sent
    [request] = model_server.chat_requests
    assert not {"authorization", "x-api-key", "api-key"} & set(request.headers)


@pytest.mark.model_script(
    {"default": {"status": 500, "message": "upstream exploded (scripted)", "retry_after": 0}}
)
async def test_model_server_error_fails_with_its_message(
    model_server: ScriptedModelServer, sandbox_factory: Any, opencode_bin: OpenCodeBinary
) -> None:
    sandbox = await bound_sandbox(sandbox_factory, opencode_bin.mount_dirs, model_server)
    model_server.set_api_key(API_KEY)  # any other key: a 401
    context = RunContext(base_url=model_server.base_url, api_key=API_KEY, sandbox=sandbox)
    result = await OpenCode(model="scripted-model").run(unique_task(), context)
    assert result.status == "failed"
    assert result.error == "upstream exploded (scripted)"
    assert result.error_kind == "model_server_error"
    assert result.retryable
    errors = [e for e in result.events if e.type == "error"]
    assert errors and errors[0].data["status_code"] == 500
    # opencode retried on its own (retry-after: 0) before giving up
    assert len(model_server.chat_requests) > 1


@pytest.mark.model_script({"default": {"fail": "rate_limit"}})
async def test_rate_limit_is_classified(
    model_server: ScriptedModelServer, sandbox_factory: Any, opencode_bin: OpenCodeBinary
) -> None:
    sandbox = await bound_sandbox(sandbox_factory, opencode_bin.mount_dirs, model_server)
    context = RunContext(base_url=model_server.base_url, sandbox=sandbox)
    result = await OpenCode(model="scripted-model").run(unique_task(), context)
    assert result.status == "failed"
    assert result.error_kind == "model_rate_limit"
    assert result.error is not None and "Rate limit reached" in result.error


#: The harness's own timeout in the hanging-model test: well past opencode's start-up
#: (a few seconds here), so that opencode is waiting for the model when it fires.
HANG_TIMEOUT = 20


async def test_a_hanging_agent_times_out_and_nothing_is_left(
    model_server: ScriptedModelServer, sandbox_factory: Any, opencode_bin: OpenCodeBinary
) -> None:
    """Opencode's request reached the model, which never answers (the server holds it
    back): opencode's own timeout ends the run while it waits, and nothing is left."""
    sandbox = await bound_sandbox(sandbox_factory, opencode_bin.mount_dirs, model_server)
    task = unique_task("hang")
    context = RunContext(
        base_url=model_server.base_url, sandbox=sandbox, limits=Limits(timeout_sec=600)
    )
    harness = OpenCode(model="scripted-model", timeout=HANG_TIMEOUT)
    result = await time_out_while_the_model_is_called(
        lambda: harness.run(task, context),
        model_server,
        str(task.input),
        timeout=HANG_TIMEOUT,
        within=HANG_TIMEOUT + 120,
    )
    # the sandbox is still open: the harness itself killed opencode's whole tree
    assert not processes_with(f"agentkit {task.task_id}")
    assert result.events[-1].type == "harness.end"


async def test_a_run_cancelled_while_opencode_waits_for_the_model_leaves_nothing(
    model_server: ScriptedModelServer, sandbox_factory: Any, opencode_bin: OpenCodeBinary
) -> None:
    """Opencode's request reached the model, whose answer is held back; the run is then
    cancelled as a runner's timeout does: opencode's whole tree is killed."""
    sandbox = await bound_sandbox(sandbox_factory, opencode_bin.mount_dirs, model_server)
    task = unique_task("hang")
    context = RunContext(base_url=model_server.base_url, sandbox=sandbox)
    harness = OpenCode(model="scripted-model")
    received = await cancel_while_the_model_is_called(
        lambda: harness.run(task, context), model_server, str(task.input), within=120
    )
    assert all(r.api == "chat" for r in received)
    assert not processes_with(f"agentkit {task.task_id}")


SLEEPING_TOOL = {
    "rules": [
        {
            "match": {"after_tool": False},
            "reply": {
                "tool_calls": [
                    {
                        "name": "bash",
                        "arguments": {"command": "sleep 987.654321", "description": "wait"},
                    }
                ]
            },
        }
    ],
    "default": {"content": "done"},
}


@pytest.mark.model_script(SLEEPING_TOOL)
async def test_cancelling_a_run_kills_the_tools_opencode_started(
    model_server: ScriptedModelServer, sandbox_factory: Any, opencode_bin: OpenCodeBinary
) -> None:
    """A runner timeout cancels run(): opencode and the commands it started are killed."""
    sandbox = await bound_sandbox(sandbox_factory, opencode_bin.mount_dirs, model_server)
    task = unique_task("sleep")
    context = RunContext(base_url=model_server.base_url, sandbox=sandbox)
    # cancelled once the bash tool's sleep is running inside opencode
    harness = OpenCode(model="scripted-model")
    await cancel_when_running(lambda: harness.run(task, context), "sleep 987.654321", within=60)
    assert not processes_with("987.654321")
    assert not processes_with(f"agentkit {task.task_id}")


RELATIVE_WRITE = {
    "rules": [
        {
            "match": {"after_tool": False},
            "reply": {
                "tool_calls": [
                    {
                        "name": "bash",
                        # host mode runs agent commands unisolated: stay in the workdir
                        "arguments": {"command": "printf 'hi\\n' > out.txt", "description": "w"},
                    }
                ]
            },
        }
    ],
    "default": {"content": "Wrote out.txt."},
}


@pytest.mark.model_script(RELATIVE_WRITE)
async def test_host_sandbox_keeps_opencode_files_in_the_rollout(
    model_server: ScriptedModelServer, sandbox_factory: Any, opencode_bin: OpenCodeBinary
) -> None:
    sandbox = await sandbox_factory("host", model_endpoint=model_server.base_url)
    model_server.set_api_key(API_KEY)  # any other key: a 401
    context = RunContext(base_url=model_server.base_url, api_key=API_KEY, sandbox=sandbox)
    result = await OpenCode(model="scripted-model").run(unique_task("host"), context)
    assert result.status == "completed", result.error
    assert (sandbox.fs_root / "app" / "out.txt").read_text() == "hi\n"
    assert (sandbox.fs_root / "logs" / "agent" / "opencode" / "data" / "opencode").is_dir()
    assert files_containing(sandbox.root, API_KEY) == []


@pytest.mark.model_script({"default": {"content": "copied"}})
async def test_binary_is_copied_into_a_sandbox_that_cannot_see_it(
    model_server: ScriptedModelServer, sandbox_factory: Any, opencode_bin: OpenCodeBinary
) -> None:
    sandbox = await sandbox_factory("local", model_endpoint=model_server.base_url)
    context = RunContext(base_url=model_server.base_url, sandbox=sandbox)
    result = await OpenCode(model="scripted-model").run(unique_task("staged"), context)
    assert result.status == "completed", result.error
    assert result.raw["binary_staged"] is True
    assert not sandbox.host_path("/tmp/.agentkit-opencode/opencode").exists()


SEARCH_TOOLS = {
    "rules": [
        {
            "match": {"turn": 0},
            "reply": {
                "tool_calls": [
                    {"name": "grep", "arguments": {"pattern": "needle", "path": "/app"}},
                    {"name": "glob", "arguments": {"pattern": "**/*.txt", "path": "/app"}},
                ]
            },
        }
    ],
    "default": {"content": "found it"},
}


@pytest.mark.model_script(SEARCH_TOOLS)
async def test_grep_and_glob_tools_work_offline_when_ripgrep_exists(
    model_server: ScriptedModelServer, sandbox_factory: Any, opencode_bin: OpenCodeBinary
) -> None:
    sandbox = await bound_sandbox(sandbox_factory, opencode_bin.mount_dirs, model_server)
    await sandbox.exec("mkdir -p /app/docs && echo 'a needle here' > /app/docs/hay.txt")
    context = RunContext(base_url=model_server.base_url, sandbox=sandbox)
    result = await OpenCode(model="scripted-model").run(unique_task("search"), context)
    assert result.status == "completed", result.error
    outcomes = {e.data["name"]: e.data for e in result.events if e.type == "tool.result"}
    warned = [e for e in result.events if e.type == "log" and "ripgrep" in e.data["message"]]
    if shutil.which("rg") is None:
        # opencode would download ripgrep; offline it cannot, and the run says so
        assert warned and outcomes["grep"]["status"] == "error"
        return
    assert not warned
    assert outcomes["grep"]["status"] == "completed"
    assert "/app/docs/hay.txt" in outcomes["grep"]["output"]
    assert outcomes["glob"]["output"].strip() == "/app/docs/hay.txt"


ENDLESS_TOOLS = {
    "rules": [
        {
            "match": {"has_tools": True},
            "reply": {
                "tool_calls": [
                    {"name": "bash", "arguments": {"command": "echo again", "description": "loop"}}
                ]
            },
        }
    ]
}


@pytest.mark.model_script(ENDLESS_TOOLS)
async def test_max_turns_and_sampling_arguments_reach_opencode(
    model_server: ScriptedModelServer, sandbox_factory: Any, opencode_bin: OpenCodeBinary
) -> None:
    sandbox = await bound_sandbox(sandbox_factory, opencode_bin.mount_dirs, model_server)
    context = RunContext(
        base_url=model_server.base_url,
        sandbox=sandbox,
        limits=Limits(max_turns=2, max_tokens=321),
        sampling_args={"temperature": 0.3, "top_p": 0.9, "seed": 11, "top_k": 5},
        headers={"X-Team": "evals"},
    )
    result = await OpenCode(model="scripted-model").run(unique_task("loop"), context)
    # the model never stops calling tools: opencode is stopped as its third call begins
    assert result.status == "timeout"
    assert result.error_kind == "max_turns"
    assert result.raw["turns"] == 3
    assert result.raw["tool_calls"] == 2
    bodies = [r.body for r in model_server.chat_requests]
    assert 3 <= len(bodies) <= 4
    assert all(b["temperature"] == 0.3 and b["top_p"] == 0.9 for b in bodies)
    # --seed, -M top_k=5, --max-tokens and --header reach every request too
    assert all(b["seed"] == 11 and b["top_k"] == 5 for b in bodies), bodies[0]
    assert all(b.get("max_tokens", b.get("max_completion_tokens")) == 321 for b in bodies)
    assert all(r.headers.get("x-team") == "evals" for r in model_server.chat_requests)


@pytest.mark.model_script({"default": {"content": "Reviewed."}})
async def test_agent_variant_and_extra_config_reach_opencode(
    model_server: ScriptedModelServer, sandbox_factory: Any, opencode_bin: OpenCodeBinary
) -> None:
    """``agent`` and ``variant`` pick what the extra ``config`` (merged over ours) defines."""
    sandbox = await bound_sandbox(sandbox_factory, opencode_bin.mount_dirs, model_server)
    context = RunContext(base_url=model_server.base_url, sandbox=sandbox)
    extra = {
        "agent": {"reviewer": {"mode": "primary", "prompt": "You are REVIEWER-7731."}},
        "provider": {
            "agentkit": {
                "models": {"scripted-model": {"variants": {"high": {"reasoningEffort": "high"}}}}
            }
        },
    }
    harness = OpenCode(model="scripted-model", agent="reviewer", variant="high", config=extra)
    result = await harness.run(unique_task("agent"), context)
    assert result.status == "completed", result.error
    assert result.output == "Reviewed."
    [request] = model_server.chat_requests
    system = request.body["messages"][0]
    assert system["role"] == "system" and "You are REVIEWER-7731." in system["content"]
    assert request.body["reasoning_effort"] == "high"  # the variant's option
    assert request.body["model"] == "scripted-model"  # our provider survived the merge


@pytest.mark.model_script(
    {"default": {"status": 400, "message": f"invalid api key {API_KEY} (echoed by a proxy)"}}
)
async def test_a_key_echoed_by_the_server_is_scrubbed_from_opencodes_files(
    model_server: ScriptedModelServer, sandbox_factory: Any, opencode_bin: OpenCodeBinary
) -> None:
    """opencode stores the error body in its database under /logs/agent: a failed
    rollout's directory is kept, so the key must not stay there."""
    sandbox = await bound_sandbox(sandbox_factory, opencode_bin.mount_dirs, model_server)
    model_server.set_api_key(API_KEY)  # any other key: a 401
    context = RunContext(base_url=model_server.base_url, api_key=API_KEY, sandbox=sandbox)
    result = await OpenCode(model="scripted-model").run(unique_task("echo"), context)
    assert result.status == "failed"
    assert result.error == "invalid api key *** (echoed by a proxy)"
    assert API_KEY not in json.dumps(result.to_json())
    assert files_containing(sandbox.host_path("/logs/agent/opencode"), "echoed by a proxy")
    assert files_containing(sandbox.root, API_KEY) == []
