"""A real agent program's ``agentkit export`` files loaded by the trainers' own packages.

opencode, mini-swe-agent, Claude Code and codex (the real programs, as their
plugins' tests run them) do the Harbor hello-world task through the model proxy
with token ids against the scripted model server, in three calls that make two
training sequences (a merged call, then a prefix break:
``agentkit.testing.programs.hello_world_token_script``). Claude Code (Anthropic
Messages) and codex (the Responses API) run in the proxy's translation mode
(``translate_to_chat``) against a server that serves chat completions only: the
way their calls get the server's exact ids and logprobs (Messages gives no ids,
the Responses endpoint's come without logprobs). The exports hold exactly the ids
and logprobs the server sent (``assert_exports_carry_the_server_tokens``), and
SkyRL, Tinker and verifiers load them: SkyRL validates the step-wise output and
makes its training batch of it, each Tinker line builds a ``tinker.Datum`` whose
tokens are the sequence's, verifiers' branches are the sequences, their messages
those the server was sent and its answers those the server sampled.

The programs run here, in the trainers session, rather than in the tests session
with their run directory handed over: a run directory left by another session
could be stale or missing, and a session must pass or fail on its own. The
session installs the Harbor, opencode, mini-swe-agent, Claude Code and codex
plugins and the programs (noxfile.py's ``trainers``).
"""

from __future__ import annotations

import json
import os
import shutil
import types
from pathlib import Path
from typing import Any, NamedTuple

import pytest

import agentkit.runs
from agentkit import AgentEnv
from agentkit.testing.model_server import ScriptedModelServer
from agentkit.testing.programs import (
    assert_exports_carry_the_server_tokens,
    harbor_rollout,
    hello_world_token_script,
    need_harbor_task,
)

pytestmark = pytest.mark.anyio

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "harbor"


class Program(NamedTuple):
    """How the test runs one program."""

    options: dict[str, Any]  # the harness's options
    script: dict[str, Any]  # hello_world_token_script's options
    variable: str  # the environment variable that points at the installed program
    translate: bool = False  # Messages or Responses calls served from chat completions


PROGRAMS: dict[str, Program] = {
    "opencode": Program({}, {"describe": True, "submit": None}, "AGENTKIT_OPENCODE_BIN"),
    "mini-swe-agent": Program(
        {"retry_attempts": 1},
        {"describe": False, "submit": "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"},
        "AGENTKIT_MINI_SWE_AGENT",
    ),
    "claude-code": Program(
        {},
        {"describe": True, "submit": None, "tool": "Bash"},
        "AGENTKIT_CLAUDE_CODE_BIN",
        translate=True,
    ),
    "codex": Program(
        {},
        {"describe": False, "submit": None, "tool": "exec_command", "command_key": "cmd"},
        "AGENTKIT_CODEX_BIN",
        translate=True,
    ),
}


def need(program: str) -> None:
    """Skip (fail under CI=true) when the program, bubblewrap or the Harbor task is missing."""
    need_harbor_task(EXAMPLES / "hello-world")
    variable = PROGRAMS[program].variable
    missing = [
        what
        for what, ok in (
            ("bubblewrap (bwrap)", shutil.which("bwrap") is not None),
            (f"{program} (${variable})", bool(os.environ.get(variable))),
        )
        if not ok
    ]
    if missing:
        message = f"not installed: {', '.join(missing)} (python3 -m nox -s trainers installs them)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)


@pytest.mark.parametrize("program", sorted(PROGRAMS))
async def test_the_trainers_load_a_real_programs_export(
    program: str, model_server: ScriptedModelServer, tmp_path: Path
) -> None:
    import tinker
    import verifiers.v1 as vf
    from skyrl.train.dataset.preprocess import convert_prompts_responses_to_batch_tensors
    from skyrl.train.generators.base import TrajectoryID
    from skyrl.train.utils.trainer_utils import validate_generator_output

    need(program)
    options, script, _, translate = PROGRAMS[program]
    model_server.set_script(hello_world_token_script(**script))
    if translate:
        model_server.set_apis({"chat"})  # /v1/messages, /v1/responses: 404, as without them
    env = AgentEnv.from_names(f"harbor:{EXAMPLES}", program, **options)
    [hello] = [t.task_id for t in env.taskset if t.task_id.endswith(":hello-world")]
    run_dir = tmp_path / "run"
    rollout = await harbor_rollout(
        env, hello, server=model_server, out=run_dir, sandbox_options={"image": "host"},
        token_ids=True, translate_to_chat=translate,
    )  # fmt: skip
    assert rollout.rewards["core.reward"] == 1.0
    calls = agentkit.runs.open(run_dir).calls(rollout.rollout_id)
    if translate:
        assert {c.upstream_protocol for c in calls} == {"chat"}
        assert {r.api for r in model_server.model_requests} == {"chat"}
    sequences = assert_exports_carry_the_server_tokens(run_dir, rollout.rollout_id, model_server)
    assert sequences == [[0, 1], [2]]

    output = json.loads((run_dir / "export.skyrl").read_text())
    pairs = zip(output["prompt_token_ids"], output["response_ids"], strict=True)
    tokens = [prompt + response for prompt, response in pairs]
    output["trajectory_ids"] = [TrajectoryID(**t) for t in output["trajectory_ids"]]
    validate_generator_output(1, output, step_wise=True)  # 1 rollout, 2 sequences
    assert output["is_last_step"] == [False, True]
    # the batch SkyRL's trainer makes of it (the reward on each response's last token)
    rewards = [
        [0.0] * (len(r) - 1) + [w]
        for r, w in zip(output["response_ids"], output["rewards"], strict=True)
    ]
    tensors = convert_prompts_responses_to_batch_tensors(
        types.SimpleNamespace(pad_token_id=0), output["prompt_token_ids"],
        output["response_ids"], rewards, output["loss_masks"], output["rollout_logprobs"],
    )  # fmt: skip
    assert tensors[0].shape[0] == 2

    lines = [json.loads(x) for x in (run_dir / "export.tinker").read_text().splitlines()]
    datums = [
        tinker.Datum(
            model_input=tinker.ModelInput.model_validate(line["model_input"]),
            loss_fn_inputs={k: tinker.TensorData(**v) for k, v in line["loss_fn_inputs"].items()},
        )
        for line in lines
    ]
    assert [d.model_input.to_ints() for d in datums] == [t[:-1] for t in tokens]
    assert [d.loss_fn_inputs["target_tokens"].tolist() for d in datums] == [t[1:] for t in tokens]
    # (Tinker's forward-backward request is made of datums in test_load_exports.py: its
    # wire format holds int32 ids, and the scripted server's stand-in tokenizer gives a
    # 4-byte piece of non-ASCII text, as in these programs' prompts, an id above that)

    (line,) = (run_dir / "export.verifiers").read_text().splitlines()
    trace = vf.WireTrace.model_validate_json(line)
    assert [b.token_ids for b in trace.branches] == tokens
    assert trace.reward == 1.0
    # verifiers' messages: each call's new input messages are those the server was sent
    # (for a translated call, the chat request the proxy made of it), each answer the
    # text and tool calls the server sampled
    replies = [rule["reply"] for rule in hello_world_token_script(**script)["rules"]]
    for branch, its_calls in zip(trace.branches, sequences, strict=True):
        asked = [(n.message.role, text(n.message.content)) for n in branch.nodes if not n.sampled]
        assert asked == [m for i in its_calls for m in new_messages(model_server, i)]
        answers = [n.message for n in branch.nodes if n.sampled]
        assert [(a.content, [c.name for c in a.tool_calls or []]) for a in answers] == [
            (replies[i]["content"], [c["name"] for c in replies[i].get("tool_calls", [])])
            for i in its_calls
        ]


def text(content: Any) -> str:
    """A message's content as text (a string, or its parts' texts)."""
    if isinstance(content, str):
        return content
    return "".join(p["text"] if isinstance(p, dict) else p.text for p in content or [])


def new_messages(server: ScriptedModelServer, index: int) -> list[tuple[str, str]]:
    """(role, text) of the messages model request ``index`` sent after its last
    assistant message, as verifiers roles (``developer`` is ``system``)."""
    messages = server.model_requests[index].body["messages"]
    last = max((i for i, m in enumerate(messages) if m["role"] == "assistant"), default=-1)
    roles = {"developer": "system"}
    return [(roles.get(m["role"], m["role"]), text(m["content"])) for m in messages[last + 1 :]]
