"""Real agent programs and the harnesses with tools, against the real vLLM, finish
their task with rewards of 1.

The session's vLLM serves the scripted model (``tests/servers/scripted_model.py``),
which answers each program's first call with one call of the program's own shell
tool (Fleet's ``set_room_status``) that does the task, and its next with a final
answer (the terminal harness's: ``submit``). opencode, mini-swe-agent, the terminal
and Fleet harnesses speak chat completions to vLLM; Claude Code (Anthropic
Messages) and codex (the Responses API) go through the proxy's translation mode
(``translate_to_chat``), which serves their calls from vLLM's chat completions.

Each run must hold what every run against a real server must: each call's
completion ids are the ones vLLM sampled (the script's answer, token for token,
and the end of the turn: the model is deterministic), as many as it counted, and
its prompt ids are vLLM's rendering of the body it was sent (what its
``/tokenize`` gives for that body); the reasoning vLLM split off reaches the
program (through the translation too); ``agentkit export`` writes files SkyRL,
Tinker and verifiers load; and the trainer's check holds on them.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import attrs
import httpx
import pytest
import scripted_model
from checks import (
    FORMATS,
    assert_a_forward_pass_reproduces,
    assert_complete_ids,
    assert_the_trainers_load,
    export,
)

import agentkit.runs
from agentkit.env import AgentEnv
from agentkit.testing.programs import need_harbor_task
from conftest import Server

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[2]
HARBOR = ROOT / "examples" / "harbor"
FLEET_TASKS = ROOT / "examples" / "fleet" / "tasks.json"


@attrs.frozen
class Program:
    """How a harness (named by its key in :data:`PROGRAMS`) runs: its ``taskset`` and
    ``task``, its options, the variable naming the installed program (None: agentkit's
    own harness), what it speaks when it goes through the translation (``messages``,
    ``responses``; None: chat completions), the script's tool it is known by, and how
    many calls it makes."""

    taskset: str
    task: str
    options: dict[str, Any]
    variable: str | None
    speaks: str | None
    tool: str
    calls: int


HELLO = f"harbor:{HARBOR}"
PROGRAMS = {
    "opencode": Program(HELLO, "hello-world", {}, "AGENTKIT_OPENCODE_BIN", None, "todowrite", 2),
    # its command's first output line, the submit word, ends its run: one call
    "mini-swe-agent": Program(HELLO, "hello-world", {"retry_attempts": 1},
                              "AGENTKIT_MINI_SWE_AGENT", None, "bash", 1),
    "claude-code": Program(HELLO, "hello-world", {}, "AGENTKIT_CLAUDE_CODE_BIN", "messages",
                           "Bash", 2),
    "codex": Program(HELLO, "hello-world", {}, "AGENTKIT_CODEX_BIN", "responses",
                     "exec_command", 2),
    "terminal": Program(HELLO, "hello-world", {"action_format": "tools"}, None, None, "shell", 2),
    "fleet-tool-call": Program(f"fleet:{FLEET_TASKS}", "room-202-back-in-service", {}, None,
                               None, "set_room_status", 2),
}  # fmt: skip


def need(program: Program, name: str) -> None:
    """Skip (fail under CI=true) when the program, bubblewrap or the task is missing."""
    if program.taskset == HELLO:
        need_harbor_task(HARBOR / "hello-world")
    missing = [] if shutil.which("bwrap") else ["bubblewrap (bwrap)"]
    if program.variable is not None and not os.environ.get(program.variable):
        missing.append(f"{name} (${program.variable})")
    if missing:
        message = f"not installed: {', '.join(missing)} (python3 -m nox -s servers installs them)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)


def _sent(call: Any) -> dict[str, Any]:
    """The chat completions body vLLM was sent for ``call``."""
    body = call.upstream_request if call.upstream_protocol else call.request
    assert isinstance(body, dict)
    return body


def _reasoning_read(run_dir: Path, rollout_id: str) -> list[str]:
    """The reasoning of each answer the harness reports it read (its ``model.response``
    events: a reasoning part's ``text``, or a reply's ``reasoning``), stripped."""
    out = []
    for step in agentkit.runs.open(run_dir).steps(rollout_id):
        if step.type != "model.response":
            continue
        data = step.data
        text = data.get("text") if data.get("kind") == "reasoning" else data.get("reasoning")
        if text:
            out.append(str(text).strip())
    return out


def _tokenize(vllm: Server, body: dict[str, Any]) -> list[int]:
    """vLLM's own rendering of a chat completions body (its ``/tokenize``): it is not
    the chat template's rendering of the body as it stands: vLLM parses assistant
    tool calls' argument strings into objects, and drops Claude Code's billing header
    line from system turns, before the template."""
    request = {k: body[k] for k in ("model", "messages", "tools") if body.get(k) is not None}
    # vLLM's chat completions take the old name of a message's reasoning (opencode
    # sends it back so), its /tokenize does not
    request["messages"] = [
        {("reasoning" if k == "reasoning_content" else k): v for k, v in m.items()}
        for m in request["messages"]
    ]
    answer = httpx.post(
        vllm.base_url.removesuffix("/v1") + "/tokenize",
        json={**request, "add_generation_prompt": True},
        timeout=300,
    )
    assert answer.status_code == 200, answer.text
    tokens: list[int] = answer.json()["tokens"]
    return tokens


def _first_difference(tokenizer: Any, served: list[int] | None, rendered: list[int]) -> str:
    """Where the recorded prompt ids first differ from ``/tokenize``'s, and the text there."""
    served = served or []
    at = next((n for n, (a, b) in enumerate(zip(served, rendered, strict=False)) if a != b), None)
    at = min(len(served), len(rendered)) if at is None else at
    return (
        f"the prompt's ids differ from token {at} of {len(served)} (recorded) / "
        f"{len(rendered)} (/tokenize): recorded "
        f"{tokenizer.decode(served[max(0, at - 5) : at + 20])!r}, "
        f"/tokenize {tokenizer.decode(rendered[max(0, at - 5) : at + 20])!r}"
    )


@pytest.mark.parametrize("name", sorted(PROGRAMS))
async def test_a_program_finishes_its_task_against_vllm_and_its_tokens_hold(
    name: str, vllm: Server, tmp_path: Path
) -> None:
    from transformers import AutoTokenizer  # deferred: the servers session's

    program = PROGRAMS[name]
    need(program, name)
    env = AgentEnv.from_names(program.taskset, name, **program.options)
    [task_id] = [t.task_id for t in env.taskset if t.task_id.endswith(f":{program.task}")]
    run_dir = tmp_path / "run"
    sandbox = {"image": "host"} if program.taskset == HELLO else {}
    results = await env.evaluate(
        task_ids=[task_id], model=vllm.model, base_url=vllm.base_url, out=run_dir,
        token_ids=True, translate_to_chat=program.speaks is not None, sandbox_options=sandbox,
    )  # fmt: skip
    [rollout] = results.rollouts
    assert rollout.ok, (rollout.status, rollout.error, rollout.scoring_errors)
    assert rollout.reward == 1.0, rollout.rewards
    assert rollout.calls_without_tokens == []

    calls = assert_complete_ids(run_dir)
    assert len(calls) == program.calls, [c.response for c in calls]
    tokenizer = AutoTokenizer.from_pretrained(vllm.model_dir)
    for call in calls:
        sent = _sent(call)
        if program.speaks is not None:
            assert (call.protocol, call.upstream_protocol) == (program.speaks, "chat")
        # the prompt's ids are vLLM's rendering of what it was sent (its /tokenize)
        rendered = _tokenize(vllm, sent)
        assert call.prompt_token_ids == rendered, _first_difference(
            tokenizer, call.prompt_token_ids, rendered
        )
        # the completion's ids are the script's answer, token for token, and its end
        said = scripted_model.answer(program.tool, after_result=call.index > 0)
        expected = [*tokenizer(said, add_special_tokens=False)["input_ids"], tokenizer.eos_token_id]
        assert call.completion_token_ids == expected, (
            f"call {call.index}: {tokenizer.decode(call.completion_token_ids or [])!r}"
        )

    # the reasoning vLLM split off, of every answer, reached the program: what the
    # harness reports it read (the program's own output for opencode, Claude Code and
    # codex; the chat reply for the others), not what the proxy recorded
    said = _reasoning_read(run_dir, rollout.rollout_id)
    assert said == [scripted_model.REASONING] * program.calls, said

    files = {fmt: export(run_dir, fmt) for fmt in FORMATS}
    assert_the_trainers_load(files)
    assert assert_a_forward_pass_reproduces(vllm.model_dir, files, calls) > 0
