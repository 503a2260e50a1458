"""Model-call records for the training-export tests, and real runs that carry them.

Until the recording model proxy writes ``calls/<rollout_id>.jsonl`` for every
harness, the tests write those files themselves, as a run writes them
(``agentkit._calls.calls_json``: prompt ids delta-encoded).
The rollouts around them are real: ``agentkit run`` of a JSONL taskset with the chat
harness against the scripted model server.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import attrs

from agentkit._calls import ModelCall, calls_json
from agentkit._convert import unstructure
from agentkit.env import AgentEnv
from agentkit.rundir import CALLS_DIR
from agentkit.testing.model_server import ScriptedModelServer

__all__ = ["SCRIPT", "THINKING", "call", "make_run", "worked_example", "write_calls"]


def call(
    rollout_id: str,
    index: int,
    prompt: list[int] | None,
    completion: list[int] | None,
    logprobs: list[float] | None = None,
    *,
    parent: int | None = None,
    note: str | None = None,
    finish: str = "stop",
    messages: list[dict[str, Any]] | None = None,
    reply: dict[str, Any] | None = None,
    tools: list[dict[str, Any]] | None = None,
    status: int = 200,
    error: str | None = None,
    partial: list[int] | None = None,
) -> ModelCall:
    """One chat call with these token ids (None: the server returned none; ``note`` says why)."""
    request: dict[str, Any] = {
        "model": "m",
        "messages": messages or [{"role": "user", "content": "q"}],
    }
    if tools:
        request["tools"] = tools
    return ModelCall(
        rollout_id=rollout_id,
        index=index,
        protocol="chat",
        path="/v1/chat/completions",
        model="m",
        request=request,
        forwarded={"return_token_ids": True, "logprobs": True},
        status=status,
        error=error,
        response={"choices": [{"message": reply or {"role": "assistant", "content": "a"}}]},
        finish_reason=finish,
        prompt_token_ids=prompt,
        completion_token_ids=completion,
        completion_logprobs=logprobs,
        partial_token_ids=partial,
        token_source="server" if completion is not None else "none",
        token_note=note,
        parent=parent,
    )


def worked_example(rollout_id: str) -> list[ModelCall]:
    """The 3-call rollout of docs/training-data.md: a tool call, its result, then a prefix break.

    Call 1's prompt extends call 0's prompt and completion by the tool result (tokens
    4, 5); call 2's does not (the chat template dropped the earlier reasoning).
    """
    tool_call = {
        "id": "c1",
        "type": "function",
        "function": {"name": "calc", "arguments": '{"expr": "2+3"}'},
    }
    user = {"role": "user", "content": "What is 2+3? Use calc."}
    asked = {"role": "assistant", "content": None, "tool_calls": [tool_call]}
    result = {"role": "tool", "tool_call_id": "c1", "content": "5"}
    again = {"role": "user", "content": "ok?"}
    tools = [{"type": "function", "function": {"name": "calc", "parameters": {"type": "object"}}}]
    return [
        call(rollout_id, 0, [1, 2, 3], [10, 11], [-0.1, -0.2], finish="tool_calls",
             messages=[user], reply=asked, tools=tools),
        call(rollout_id, 1, [1, 2, 3, 10, 11, 4, 5], [12, 13], [-0.3, -0.4], finish="tool_calls",
             messages=[user, asked, result], reply=asked, tools=tools),
        call(rollout_id, 2, [1, 2, 3, 6, 7], [14, 15], [-0.5, -0.6],
             messages=[user, {"role": "assistant", "content": "5"}, again],
             reply={"role": "assistant", "content": "The answer is 5."}, tools=tools),
    ]  # fmt: skip


def write_calls(
    run_dir: Path, rollout_id: str, calls: list[ModelCall], *, full_ids: bool = False
) -> Path:
    """``RUN_DIR/calls/<rollout_id>.jsonl``, one line per call, as a run writes it: each
    with the run's ``run_id`` (from its manifest.json, when it has one and the call none)
    (``full_ids``: every prompt's whole list, as runs wrote them before delta encoding)."""
    path = run_dir / CALLS_DIR / f"{rollout_id}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    manifest = run_dir / "manifest.json"
    run_id = json.loads(manifest.read_text()).get("run_id") if manifest.exists() else None
    calls = [c if c.run_id is not None else attrs.evolve(c, run_id=run_id) for c in calls]
    lines = [unstructure(c) for c in calls] if full_ids else calls_json(calls)
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


#: The thinking before the ``add`` rollouts' tool call (vLLM's ``reasoning`` field).
THINKING = "Adding is what calc does."

#: The scripted model's answers: "2+3" is answered right (passes), "capital" wrongly.
SCRIPT = {
    "rules": [
        {"match": {"last_user_contains": "2+3"}, "reply": {"content": "5"}},
        {"match": {"last_user_contains": "France"}, "reply": {"content": "Lyon"}},
    ],
    "default": {"content": "ok"},
}


async def make_run(tmp_path: Path, model_server: ScriptedModelServer) -> Path:
    """A real run (chat harness, scripted model, 2 tasks x 2 rollouts) with a calls file
    per rollout: ``add`` rollouts the worked example, ``capital`` rollouts two calls that
    merge; the last rollout's second call returned no token ids. The ``add`` task's
    assistant turn, and its first call's answer, carry the model's thinking
    (``THINKING``) as ``reasoning``."""
    tasks = tmp_path / "tasks.jsonl"
    (user, asked, result) = worked_example("-")[1].request["messages"]
    rows = [
        # a transcript with a tool call (and the model's thinking before it, under the
        # name current vLLM gives it) and its result, which the chat harness answers
        {"id": "add", "input": [user, {**asked, "reasoning": THINKING}, result], "target": "5"},
        {"id": "capital", "input": "Capital of France?", "target": "Paris"},
    ]
    tasks.write_text("".join(json.dumps(r) + "\n" for r in rows))
    model_server.set_script(SCRIPT)
    env = AgentEnv.from_names(f"jsonl:{tasks}", "chat")
    run_dir = tmp_path / "run"
    await env.evaluate(
        rollouts_per_task=2, concurrency=2, model="m", base_url=model_server.base_url, out=run_dir
    )
    ids = [
        json.loads(x)["rollout_id"] for x in (run_dir / "rollouts.jsonl").read_text().splitlines()
    ]
    for n, rollout_id in enumerate(sorted(ids)):
        if rollout_id.startswith("add"):
            calls = worked_example(rollout_id)
            # the first answer carries the model's thinking, as vLLM's whole answer does
            message = {**calls[0].response["choices"][0]["message"], "reasoning": THINKING}
            calls[0] = attrs.evolve(calls[0], response={"choices": [{"message": message}]})
        else:
            base = 100 + n
            second = [base, 2, 20, 21, 9, base + 1] if n != len(ids) - 1 else None
            calls = [
                call(rollout_id, 0, [base, 2], [20, 21], [-1.0, -0.5], finish="tool_calls"),
                call(rollout_id, 1, [base, 2, 20, 21, 9], second and [base + 1],
                     second and [-0.25], note=None if second else "the server returned no "
                     "token ids (vLLM < 0.10.2 ignores return_token_ids)"),
            ]  # fmt: skip
        write_calls(run_dir, rollout_id, calls)
    return run_dir
