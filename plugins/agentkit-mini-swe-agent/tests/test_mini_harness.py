"""The real mini-swe-agent, offline, against agentkit's scripted model server.

Each test runs mini (from its portable runtime) inside a real sandbox whose
only way out is the forwarded model endpoint.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from agentkit_mini_swe_agent import MINI_SWE_AGENT_VERSION, MiniSweAgent, MiniSweAgentRuntime

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
from agentkit.testing.sandbox_fixtures import requires_bwrap

pytestmark = [pytest.mark.anyio, requires_bwrap]

API_KEY = "sk-agentkit-mini-5c8e2a7d1f3b"
SUBMIT = {"name": "bash", "arguments": {"command": "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"}}

WRITE_THEN_SUBMIT: dict[str, Any] = {
    "rules": [
        {
            "match": {"turn": 0},
            "reply": {
                "reasoning": "A bash command can write the file.",
                "content": "I will write the file.",
                "tool_calls": [
                    {
                        "name": "bash",
                        "arguments": {
                            "command": "printf 'hello from mini\\n' > /app/out.txt && cat out.txt"
                            " && env | grep -c API_KEY"
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
            "match": {"turn": 1},
            "reply": {
                "content": "Wrote /app/out.txt.",
                "tool_calls": [SUBMIT],
                "usage": {"prompt_tokens": 1650, "completion_tokens": 12},
            },
        },
    ]
}
#: The same, but the submission waits for /app/.go: the test creates it when it has
#: seen the first step's events, so mini is surely still running then.
GATED_SUBMIT = {
    "name": "bash",
    "arguments": {
        "command": "while [ ! -e /app/.go ]; do sleep 0.05; done; "
        "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"
    },
}
WRITE_THEN_GATED_SUBMIT: dict[str, Any] = {
    "rules": [
        WRITE_THEN_SUBMIT["rules"][0],
        {
            "match": {"turn": 1},
            "reply": {**WRITE_THEN_SUBMIT["rules"][1]["reply"], "tool_calls": [GATED_SUBMIT]},
        },
    ]
}


# run on its own: the harness opens a local sandbox with its runtime bound read-only
test_conformance = harness_conformance_test(
    "mini-swe-agent",
    script=WRITE_THEN_SUBMIT,
    options={"retry_attempts": 1},
    fixtures=["mini_install"],
)


def _server_error(result: Any) -> None:
    assert result.error is not None and "upstream exploded (scripted)" in result.error
    assert result.error_kind == "model_server_error"
    assert result.retryable
    assert result.raw["exit_status"] == "InternalServerError"
    errors = [e for e in result.events if e.type == "error"]
    assert errors and "upstream exploded (scripted)" in errors[-1].data["message"]
    # mini's standard error is Python's plain traceback, not Typer's rich one (with locals)
    [stderr] = [
        e.data["message"] for e in result.events if e.data.get("source", "").endswith("stderr")
    ]
    assert stderr.rstrip().endswith("upstream exploded (scripted)")
    assert "╭" not in stderr


# the failure path too: a 500 gives a failed, classified, conforming result with its message
test_conformance_on_a_server_error = harness_conformance_test(
    "mini-swe-agent",
    script={
        "default": {"status": 500, "message": "upstream exploded (scripted)", "retry_after": 0}
    },
    options={"retry_attempts": 1},
    fixtures=["mini_install"],
    expect_status="failed",
    check=_server_error,
)


def unique_task(prefix: str = "mini") -> Task:
    return new_task(prefix, "Write 'hello from mini' into /app/out.txt, then submit.")


def marker(task: Task) -> str:
    """What mini's command line carries for this task (``-c agentkit.task_id=...``)."""
    return f"agentkit.task_id={task.task_id}"


def harness(**options: Any) -> MiniSweAgent:
    options.setdefault("retry_attempts", 1)
    return MiniSweAgent(model="scripted-model", **options)


@pytest.mark.model_script(WRITE_THEN_GATED_SUBMIT)
async def test_bash_tool_writes_a_file_then_submits(
    model_server: ScriptedModelServer, sandbox_factory: Any, mini_runtime: MiniSweAgentRuntime
) -> None:
    sandbox = await bound_sandbox(sandbox_factory, mini_runtime.mount_dirs, model_server)
    task = unique_task()
    live: list[tuple[str, bool]] = []

    def on_event(event: Event) -> None:
        if event.type in ("tool.result", "harness.end"):
            live.append((event.type, bool(processes_with(marker(task)))))
        if event.type == "tool.result" and not (gate := sandbox.host_path("/app/.go")).exists():
            gate.touch()  # let mini submit: its first step reached us while it ran

    model_server.set_api_key(API_KEY)  # any other key: a 401
    context = RunContext(base_url=model_server.base_url, api_key=API_KEY, sandbox=sandbox)
    result = await harness().run(task, context, on_event=on_event)

    assert result.status == "completed", result.error
    assert sandbox.host_path("/app/out.txt").read_text() == "hello from mini\n"
    assert result.output == "Wrote /app/out.txt."
    # on_event saw the first tool result while mini was still running
    assert live[0] == ("tool.result", True)
    assert live[-1] == ("harness.end", False)
    assert not processes_with(marker(task))

    messages = result.messages
    assert [m["role"] for m in messages] == [
        "system",
        "user",
        "assistant",
        "tool",
        "assistant",
        "tool",
    ]
    assert task.input in messages[1]["content"]  # inside mini's instance template
    call = messages[2]["tool_calls"][0]
    assert call["function"]["name"] == "bash"
    assert "/app/out.txt" in json.loads(call["function"]["arguments"])["command"]
    assert messages[2]["reasoning_content"] == "A bash command can write the file."
    assert messages[3]["tool_call_id"] == call["id"]
    # the bash output, as mini's observation template showed it to the model;
    # the API key is not in the environment of the agent's commands (grep -c: 0)
    observation = json.loads(messages[3]["content"])
    assert observation == {"returncode": 1, "output": "hello from mini\n0\n"}

    # usage is exactly what the scripted server reported
    assert result.usage.input_tokens == 1500 + 1650
    assert result.usage.cached_tokens == 300
    assert result.usage.output_tokens == 40 + 12
    assert result.usage.reasoning_tokens == 9
    assert result.usage.requests == 2

    assert result.raw["mini_swe_agent_version"] == MINI_SWE_AGENT_VERSION
    assert result.raw["session_id"] is None  # mini has none; the trajectory is its record
    assert result.raw["exit_status"] == "Submitted"
    assert (result.raw["turns"], result.raw["tool_calls"]) == (2, 2)
    types = [e.type for e in result.events]
    assert types[0] == "harness.start" and types[-1] == "harness.end"
    assert {"model.response", "tool.call", "tool.result"} <= set(types)
    first = next(e for e in result.events if e.type == "tool.result")
    assert (first.data["status"], first.data["exit_code"]) == ("completed", 1)
    assert first.data["output"] == "hello from mini\n0\n"

    # the model got the key as a bearer token, one non-streamed call per step, with mini's
    # one bash tool and our sampling settings
    chats = model_server.chat_requests
    assert len(chats) == 2 and all(r.api_key_sent for r in chats)
    assert chats[0].body["model"] == "scripted-model"
    assert [t["function"]["name"] for t in chats[0].body["tools"]] == ["bash"]

    # the key is nowhere: not in the result, not in the sandbox's files (mini's config,
    # trajectory), and mini's trajectory is kept with the rollout
    assert API_KEY not in json.dumps(result.to_json())
    assert files_containing(sandbox.root, API_KEY) == []
    trajectory = json.loads(sandbox.host_path(result.raw["trajectory"]).read_text())
    assert trajectory["info"]["exit_status"] == "Submitted"


@pytest.mark.model_script({"default": {"fail": "rate_limit"}})
async def test_rate_limit_fails_with_its_message(
    model_server: ScriptedModelServer, sandbox_factory: Any, mini_runtime: MiniSweAgentRuntime
) -> None:
    sandbox = await bound_sandbox(sandbox_factory, mini_runtime.mount_dirs, model_server)
    context = RunContext(base_url=model_server.base_url, sandbox=sandbox)
    result = await harness().run(unique_task("429"), context)
    assert result.status == "failed"
    assert result.error_kind == "model_rate_limit"
    assert result.error is not None and "Rate limit reached" in result.error
    assert result.raw["exit_status"] == "RateLimitError"
    # no key in the run: a placeholder is sent (litellm's client insists on one)
    chats = model_server.chat_requests
    assert chats and all(r.headers.get("authorization") == "[redacted]" for r in chats)


#: The harness's own timeout in the hanging-model test: well past mini's start-up
#: (mostly importing litellm: several seconds here), so that mini is waiting for the
#: model when it fires.
HANG_TIMEOUT = 30


async def test_hanging_model_times_out_and_nothing_is_left(
    model_server: ScriptedModelServer, sandbox_factory: Any, mini_runtime: MiniSweAgentRuntime
) -> None:
    """Mini's request reached the model, which never answers (the server holds it
    back): mini's own timeout ends the run while it waits, and nothing is left."""
    sandbox = await bound_sandbox(sandbox_factory, mini_runtime.mount_dirs, model_server)
    task = unique_task("hang")
    context = RunContext(
        base_url=model_server.base_url, sandbox=sandbox, limits=Limits(timeout_sec=600)
    )
    seen: list[Event] = []
    mini = harness(timeout=HANG_TIMEOUT)
    result = await time_out_while_the_model_is_called(
        lambda: mini.run(task, context, seen.append),
        model_server,
        str(task.input),
        timeout=HANG_TIMEOUT,
        within=HANG_TIMEOUT + 120,
    )
    # the sandbox is still open: the harness itself killed mini's whole tree
    assert not processes_with(marker(task))
    assert result.events[-1].type == "harness.end"
    assert seen == result.events


async def test_a_run_cancelled_while_mini_waits_for_the_model_leaves_nothing(
    model_server: ScriptedModelServer, sandbox_factory: Any, mini_runtime: MiniSweAgentRuntime
) -> None:
    """Mini's request reached the model, whose answer is held back; the run is then
    cancelled as a runner's timeout does: mini's whole tree is killed."""
    sandbox = await bound_sandbox(sandbox_factory, mini_runtime.mount_dirs, model_server)
    task = unique_task("hang")
    context = RunContext(base_url=model_server.base_url, sandbox=sandbox)
    mini = harness()
    received = await cancel_while_the_model_is_called(
        lambda: mini.run(task, context), model_server, str(task.input), within=240
    )
    assert all(r.api == "chat" for r in received)
    assert not processes_with(marker(task))


SLEEPING_TOOL = {
    "rules": [
        {
            "match": {"turn": 0},
            "reply": {
                "tool_calls": [{"name": "bash", "arguments": {"command": "sleep 987.654321"}}]
            },
        }
    ],
    "default": {"tool_calls": [SUBMIT]},
}


@pytest.mark.model_script(SLEEPING_TOOL)
async def test_cancelling_a_run_kills_the_commands_mini_started(
    model_server: ScriptedModelServer, sandbox_factory: Any, mini_runtime: MiniSweAgentRuntime
) -> None:
    """A runner timeout cancels run(): mini and the commands it started (in sessions of
    their own) are killed."""
    sandbox = await bound_sandbox(sandbox_factory, mini_runtime.mount_dirs, model_server)
    task = unique_task("sleep")
    context = RunContext(base_url=model_server.base_url, sandbox=sandbox)
    # cancelled once the bash tool's sleep is running under mini
    mini = harness(command_timeout=3600)
    await cancel_when_running(lambda: mini.run(task, context), "sleep 987.654321", within=240)
    assert not processes_with("987.654321")
    assert not processes_with(marker(task))


ENDLESS_TOOLS = {
    "default": {"tool_calls": [{"name": "bash", "arguments": {"command": "echo again"}}]}
}


@pytest.mark.model_script(ENDLESS_TOOLS)
async def test_max_turns_and_sampling_arguments_reach_mini(
    model_server: ScriptedModelServer, sandbox_factory: Any, mini_runtime: MiniSweAgentRuntime
) -> None:
    sandbox = await bound_sandbox(sandbox_factory, mini_runtime.mount_dirs, model_server)
    context = RunContext(
        base_url=model_server.base_url,
        sandbox=sandbox,
        limits=Limits(max_turns=2),
        sampling_args={"temperature": 0.3, "top_p": 0.9},
    )
    result = await harness().run(unique_task("loop"), context)
    # the model never submits: mini stops before its third call
    assert result.status == "timeout"
    assert result.error_kind == "max_turns"
    assert result.raw["exit_status"] == "LimitsExceeded"
    assert (result.raw["turns"], result.raw["tool_calls"]) == (2, 2)
    bodies = [r.body for r in model_server.chat_requests]
    assert len(bodies) == 2
    assert all(b["temperature"] == 0.3 and b["top_p"] == 0.9 for b in bodies)


@pytest.mark.model_script(
    {"default": {"status": 400, "message": f"invalid api key {API_KEY} (echoed by a proxy)"}}
)
async def test_a_key_echoed_by_the_server_is_scrubbed_from_minis_files(
    model_server: ScriptedModelServer, sandbox_factory: Any, mini_runtime: MiniSweAgentRuntime
) -> None:
    """mini keeps the error in its trajectory under /logs/agent: a failed rollout's
    directory is kept, so the key must not stay there."""
    sandbox = await bound_sandbox(sandbox_factory, mini_runtime.mount_dirs, model_server)
    model_server.set_api_key(API_KEY)  # any other key: a 401
    context = RunContext(base_url=model_server.base_url, api_key=API_KEY, sandbox=sandbox)
    result = await harness().run(unique_task("echo"), context)
    assert result.status == "failed"
    assert result.error_kind == "model_request_error"
    assert result.error is not None and "invalid api key ***" in result.error
    assert API_KEY not in json.dumps(result.to_json())
    kept = Path(sandbox.host_path("/logs/agent/mini-swe-agent"))
    assert files_containing(kept, "echoed by a proxy")
    assert files_containing(sandbox.root, API_KEY) == []


@pytest.mark.model_script({"default": {"tool_calls": [SUBMIT], "content": "Nothing to do."}})
async def test_config_option_is_merged_over_the_generated_one(
    model_server: ScriptedModelServer, sandbox_factory: Any, mini_runtime: MiniSweAgentRuntime
) -> None:
    sandbox = await bound_sandbox(sandbox_factory, mini_runtime.mount_dirs, model_server)
    context = RunContext(base_url=model_server.base_url, sandbox=sandbox)
    extra = {"agent": {"system_template": "You are MINI-REVIEWER-4411."}}
    result = await harness(config=extra, cost_limit=0).run(unique_task("cfg"), context)
    assert result.status == "completed", result.error
    assert result.output == "Nothing to do."
    [request] = model_server.chat_requests
    system = request.body["messages"][0]
    assert system == {"role": "system", "content": "You are MINI-REVIEWER-4411."}
    assert request.body["model"] == "scripted-model"  # our model settings survived the merge


RELATIVE_WRITE = {
    "rules": [
        {
            "match": {"turn": 0},
            # host mode runs agent commands unisolated: stay in the workdir
            "reply": {
                "tool_calls": [{"name": "bash", "arguments": {"command": "echo hi > out.txt"}}]
            },
        }
    ],
    "default": {"content": "Wrote out.txt.", "tool_calls": [SUBMIT]},
}


@pytest.mark.model_script(RELATIVE_WRITE)
async def test_host_sandbox_keeps_minis_files_in_the_rollout(
    model_server: ScriptedModelServer, sandbox_factory: Any, mini_runtime: MiniSweAgentRuntime
) -> None:
    sandbox = await sandbox_factory("host", model_endpoint=model_server.base_url)
    model_server.set_api_key(API_KEY)  # any other key: a 401
    context = RunContext(base_url=model_server.base_url, api_key=API_KEY, sandbox=sandbox)
    result = await harness().run(unique_task("host"), context)
    assert result.status == "completed", result.error
    assert (sandbox.fs_root / "app" / "out.txt").read_text() == "hi\n"
    kept = sandbox.fs_root / "logs" / "agent" / "mini-swe-agent"
    assert {"config.yaml", "trajectory.json", "global"} <= {p.name for p in kept.iterdir()}
    assert files_containing(sandbox.root, API_KEY) == []


@pytest.mark.model_script(ENDLESS_TOOLS)
async def test_headers_reach_the_model_and_a_token_limit_stops_mini(
    model_server: ScriptedModelServer, sandbox_factory: Any, mini_runtime: MiniSweAgentRuntime
) -> None:
    sandbox = await bound_sandbox(sandbox_factory, mini_runtime.mount_dirs, model_server)
    secret = "hdr-secret-5e1b9c7a3d"
    task = unique_task("limit")
    context = RunContext(
        base_url=model_server.base_url,
        sandbox=sandbox,
        headers={"X-Run-Tag": "mini-run-7", "X-Api-Key": secret},
        limits=Limits(token_limit=50),
    )
    result = await harness().run(task, context)
    # the first step already spent more than 50 tokens: mini is stopped after it
    assert result.status == "timeout"
    assert result.error_kind == "token_limit"
    assert result.raw["turns"] >= 1
    assert not processes_with(marker(task))
    headers = model_server.chat_requests[0].headers
    assert headers["x-run-tag"] == "mini-run-7"
    assert headers["x-api-key"] == "[redacted]"  # sent (the server's log hides its value)
    # the secret header is in no file and no part of the result
    assert secret not in json.dumps(result.to_json())
    assert files_containing(sandbox.root, secret) == []
