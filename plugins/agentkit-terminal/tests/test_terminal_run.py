"""The terminal harness's ``run()`` on the Harbor example tasks: the scripted model server
on loopback, real bubblewrap sandboxes (the host's userland), Harbor's own grading."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from agentkit_harbor import HarborTaskset
from agentkit_terminal import TerminalHarness
from agentkit_terminal.prompt import NO_CALL_TOOLS, SUBMITTED_TEXT, TOOLS
from terminal_helpers import (
    EXAMPLES,
    HARBOR,
    HELLO,
    HELLO_WRONG,
    HOST,
    SUBMIT,
    harbor_task,
    hints_of,
    needs_bwrap,
    script,
    shell,
    text_call,
)

from agentkit import AgentEnv, HarnessResult, RunContext, registry
from agentkit.env import EvalResults, RolloutRecord
from agentkit.testing.conformance import harness_conformance_test
from agentkit.testing.model_server import ScriptedModelServer
from agentkit.testing.programs import agentkit_run

pytestmark = [pytest.mark.anyio, needs_bwrap]


def _submitted(result: HarnessResult) -> None:
    assert result.raw["done_reason"] == "submitted"
    assert [m["role"] for m in result.messages] == [
        "system", "user", "assistant", "tool", "assistant", "tool",
    ]  # fmt: skip


#: The text-format reply that writes hello-world's file (relative to the working directory).
TEXT_WRITE = "First the file.\n" + text_call(
    "shell", {"command": "printf 'Hello, world!\\n' > hello.txt"}
)


# in a local sandbox made from the task's hints (on the host userland), as the runner would
test_conformance = harness_conformance_test(
    "terminal",
    task=harbor_task,
    script=script(*HELLO),
    sandbox="local",
    hints=hints_of,
    sandbox_options=HOST,
    check=_submitted,
)


async def evaluate(
    server: ScriptedModelServer,
    tmp_path: Path,
    task: str = "hello-world",
    *,
    harness: TerminalHarness | None = None,
    **options: Any,
) -> tuple[RolloutRecord, EvalResults]:
    env = AgentEnv(HarborTaskset(str(HARBOR)), harness or TerminalHarness())
    results = await env.evaluate(
        task_ids=[f"harbor:{task}"],
        model="scripted-model",
        base_url=server.base_url,
        sandbox_options=HOST,
        out=tmp_path / "run",
        max_retries=0,
        **options,
    )
    [rollout] = results.rollouts
    return rollout, results


async def test_a_solving_script_scores_1_and_a_wrong_one_0(
    model_server: ScriptedModelServer, tmp_path: Path
) -> None:
    model_server.set_script(script(*HELLO))
    rollout, _ = await evaluate(model_server, tmp_path / "right")
    assert rollout.status == "completed", rollout.error
    assert rollout.rewards["core.reward"] == 1.0 and rollout.reward == 1.0
    assert rollout.raw["done_reason"] == "submitted"
    assert (rollout.raw["turns"], rollout.raw["tool_calls"], rollout.raw["commands"]) == (2, 2, 1)
    assert rollout.rewards["harness.turns"] == 2.0
    tool = rollout.messages[3]
    assert (
        tool["role"] == "tool"
        and tool["tool_call_id"] == rollout.messages[2]["tool_calls"][0]["id"]
    )
    assert tool["content"] == "Exit code: 0\nOutput: (none)"
    assert rollout.messages[5]["content"] == SUBMITTED_TEXT
    # the model was offered the two tools, natively
    first = model_server.chat_requests[0].body
    assert first is not None and first["tools"] == TOOLS

    model_server.set_script(script(*HELLO_WRONG))
    rollout, _ = await evaluate(model_server, tmp_path / "wrong")
    assert rollout.status == "completed", rollout.error
    assert rollout.rewards["core.reward"] == 0.0


async def test_token_ids_are_recorded_as_the_chat_harness_records_them(
    model_server: ScriptedModelServer, tmp_path: Path
) -> None:
    # the text format: each prompt extends the last prompt and reply, token for token
    model_server.set_script(script(TEXT_WRITE, text_call("submit", {})))
    harness = TerminalHarness(token_ids=True, action_format="text")
    rollout, _ = await evaluate(model_server, tmp_path / "text", harness=harness)
    assert rollout.rewards["core.reward"] == 1.0
    raw = rollout.raw
    assert raw["prompt_token_ids"] and raw["completion_token_ids"]
    mask = raw["completion_mask"]
    # the model's two replies (1) and, between them, the tool result the next prompt adds (0)
    assert len(mask) == len(raw["completion_token_ids"]) == len(raw["completion_logprobs"])
    assert mask[0] == 1 and mask[-1] == 1 and 0 in mask
    assert raw["finish_reasons"] == ["stop", "stop"] and raw["stop_reason"] == "stop"
    assert all(r.body and r.body["return_token_ids"] for r in model_server.chat_requests)

    # native calls: the scripted server's template shows a call as it was sampled (its
    # arguments' tokens), so the prompts extend the replies too
    model_server.set_script(script(*HELLO))
    harness = TerminalHarness(token_ids=True)
    rollout, _ = await evaluate(model_server, tmp_path / "tools", harness=harness)
    assert rollout.raw["prompt_token_ids"] and 0 in rollout.raw["completion_mask"]

    # a reply whose reasoning the next prompt leaves out (as chat templates drop it): the
    # prompts do not extend the replies, and a note says so, as the chat harness records it
    thinking = script(*HELLO)
    thinking["rules"][0]["reply"]["reasoning"] = "First write the file."
    model_server.set_script(thinking)
    rollout, _ = await evaluate(model_server, tmp_path / "thinking", harness=harness)
    assert "prompt_token_ids" not in rollout.raw
    assert "does not extend the previous prompt" in rollout.raw["token_ids_note"]


async def test_long_output_is_cut_to_its_head_and_tail(
    model_server: ScriptedModelServer, tmp_path: Path
) -> None:
    total = len("".join(f"{i}\n" for i in range(1, 100001)).encode())
    model_server.set_script(script([shell("seq 1 100000")], [SUBMIT]))
    rollout, _ = await evaluate(model_server, tmp_path, harness=TerminalHarness(output_limit=1000))
    content = rollout.messages[3]["content"]
    head, _, tail = content.partition(f"\n[... {total - 1000} bytes of output omitted ...]\n")
    assert head.startswith("Exit code: 0\nOutput:\n1\n2\n3\n")
    assert len(head.encode()) == len("Exit code: 0\nOutput:\n") + 500
    assert tail.endswith("99999\n100000") and len(tail.encode()) == 500 - 1  # the line end
    assert "500\n" not in tail and "99990" in tail


async def test_replies_without_a_readable_call_get_the_format_and_count(
    model_server: ScriptedModelServer, tmp_path: Path
) -> None:
    model_server.set_script(
        script(
            "I think I should write the file.",
            [{"name": "python", "arguments": {"code": "print(1)"}}],
            [{"name": "shell", "arguments": {"cmd": "ls"}}],
            *HELLO,
        )
    )
    rollout, _ = await evaluate(model_server, tmp_path)
    assert rollout.status == "completed", rollout.error
    assert rollout.rewards["core.reward"] == 1.0
    assert rollout.raw["parse_errors"] == 3 and rollout.rewards["harness.parse_errors"] == 3.0
    observations = [m["content"] for m in rollout.messages if m["role"] in ("user", "tool")][1:]
    assert observations[0] == NO_CALL_TOOLS
    assert observations[1] == "Error: unknown tool 'python'; the tools are shell and submit"
    assert observations[2].startswith('Error: shell needs "command", a non-empty string')


async def test_too_many_unreadable_replies_end_the_rollout_which_is_still_scored(
    model_server: ScriptedModelServer, tmp_path: Path
) -> None:
    model_server.set_script(script(default={"content": "Just chatting."}))
    harness = TerminalHarness(max_parse_errors=2)
    rollout, _ = await evaluate(model_server, tmp_path, harness=harness)
    assert (rollout.status, rollout.error_kind) == ("failed", "parse_errors")
    assert rollout.raw["turns"] == 2 and rollout.raw["done_reason"] == "parse_errors"
    assert rollout.rewards["core.reward"] == 0.0 and not rollout.scoring_errors


async def test_max_turns_ends_the_rollout_which_is_still_scored(
    model_server: ScriptedModelServer, tmp_path: Path
) -> None:
    model_server.set_script(script(default={"tool_calls": [shell("ls")]}))
    rollout, _ = await evaluate(model_server, tmp_path, max_turns=3)
    assert (rollout.status, rollout.error_kind) == ("timeout", "max_turns")
    assert rollout.raw["turns"] == 3 and len(model_server.chat_requests) == 3
    assert rollout.rewards["core.reward"] == 0.0 and not rollout.scoring_errors


async def test_a_command_past_its_timeout_is_killed_and_said_so(
    model_server: ScriptedModelServer, tmp_path: Path
) -> None:
    model_server.set_script(script([shell("echo started; sleep 300", timeout=1)], *HELLO))
    rollout, _ = await evaluate(model_server, tmp_path)
    assert rollout.rewards["core.reward"] == 1.0
    assert rollout.messages[3]["content"] == (
        "The command timed out after 1 s and was killed.\nOutput:\nstarted"
    )


async def test_the_time_limit_ends_the_episode(
    model_server: ScriptedModelServer, tmp_path: Path
) -> None:
    # the command asks for 600 s; the episode's 5 s bound it (5: room for the model call)
    model_server.set_script(
        script([shell("sleep 300", timeout=600)], default={"tool_calls": [shell("ls")]})
    )
    rollout, _ = await evaluate(model_server, tmp_path, harness=TerminalHarness(timeout=5))
    assert (rollout.status, rollout.error_kind) == ("timeout", "timeout")
    assert rollout.raw["done_reason"] == "timeout" and rollout.raw["turns"] == 1
    assert rollout.messages[3]["content"].startswith("The command timed out after ")
    assert rollout.rewards["core.reward"] == 0.0


async def test_the_text_format_through_run(
    model_server: ScriptedModelServer, tmp_path: Path
) -> None:
    model_server.set_script(script(TEXT_WRITE, text_call("submit", {})))
    harness = TerminalHarness(action_format="text")
    rollout, _ = await evaluate(model_server, tmp_path, harness=harness)
    assert rollout.rewards["core.reward"] == 1.0
    assert [m["role"] for m in rollout.messages] == [
        "system", "user", "assistant", "user", "assistant", "user",
    ]  # fmt: skip
    assert rollout.messages[3]["content"] == (
        "<tool_response>\nExit code: 0\nOutput: (none)\n</tool_response>"
    )
    assert "<tool_call>" in rollout.messages[0]["content"]
    assert model_server.chat_requests[0].body is not None
    assert "tools" not in model_server.chat_requests[0].body


async def test_without_a_model_or_a_sandbox_the_result_says_so(
    model_server: ScriptedModelServer,
) -> None:
    task = harbor_task()
    result = await TerminalHarness().run(task, RunContext(base_url=model_server.base_url))
    assert (result.status, result.error_kind) == ("failed", "harness_setup")
    result = await TerminalHarness().run(
        task, RunContext(model="m", base_url=model_server.base_url)
    )
    assert (result.status, result.error_kind) == ("failed", "sandbox_missing")
    assert "needs" not in (result.error or "") or "sandbox" in (result.error or "")
    assert model_server.requests == []


def test_the_harness_is_registered_and_checks_its_options() -> None:
    harness = registry.resolve_harness("terminal", max_turns=7, sandbox_options=HOST)
    assert isinstance(harness, TerminalHarness) and harness.max_turns == 7
    info = {p.name: p for p in registry.plugins()}["terminal"]
    assert info.distribution == "agentkit-terminal"
    assert info.registers == {"harness": ["terminal"]}
    with pytest.raises(Exception, match="max_turns must be at least 1"):
        TerminalHarness(max_turns=0)
    with pytest.raises(Exception, match="action_format must be auto, tools or text"):
        TerminalHarness(action_format="xml")  # type: ignore[arg-type]


def test_agentkit_run_with_a_scripted_model(tmp_path: Path) -> None:
    out = tmp_path / "run"
    proc, record = agentkit_run(
        f"harbor:{HARBOR}",
        "terminal",
        "--model",
        f"scripted:{EXAMPLES / 'harbor_script.json'}",
        "-S",
        "image=host",
        "--task",
        "harbor:word-stats",
        "--out",
        str(out),
    )
    assert record["status"] == "completed" and record["reward"] == 1.0
    assert record["rewards"]["core.words"] == 1.0
    assert "harbor:word-stats" in proc.stdout


def test_the_example_script_solves_every_single_step_example_task(tmp_path: Path) -> None:
    tasks = ["hello-world", "word-stats", "wrong-on-purpose", "too-slow"]
    selected = [a for t in tasks for a in ("--task", f"harbor:{t}")]
    done = subprocess.run(
        [sys.executable, "-m", "agentkit", "run", f"harbor:{HARBOR}", "terminal", "--model",
         f"scripted:{EXAMPLES / 'harbor_script.json'}", "-S", "image=host", *selected,
         "--out", str(tmp_path / "run")],
        capture_output=True, text=True, timeout=280, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    lines = (tmp_path / "run" / "rollouts.jsonl").read_text().splitlines()
    rewards = {r["task_id"]: r["reward"] for r in map(json.loads, lines)}
    assert rewards == {f"harbor:{t}": 1.0 for t in tasks}
