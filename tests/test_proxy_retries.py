"""A call that breaks off is never trained, and the agent's retry of the same prompt continues
the sequence as if it had not happened: a real run through the model proxy, the scripted
server's failure injection (a stream that breaks after its first chunks), then
``agentkit export`` of that run.

The agent is the test's own (as many agent programs do, it retries a call whose stream
broke): once retrying the same messages, once keeping what it got and going on from it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from agentkit import HarnessResult, ListTaskset, RunContext, Task
from agentkit.env import AgentEnv
from agentkit.runs import open as open_run
from agentkit.testing.model_server import ScriptedModelServer

pytestmark = pytest.mark.anyio

SCRIPT = {
    "rules": [
        {  # the first answer breaks off after two chunks ("a long a": two tokens)
            "match": {"turn": 0},
            "times": 1,
            "reply": {"content": "a long answer " * 4, "fail": "broken_stream"},
        }
    ],
    "default": {"content": "the answer is 42"},
}


class RetryingAgent:
    """Two turns of streamed chat; a call whose stream breaks is tried again, with the
    same messages, or (``keep_partial``) with what arrived kept as the assistant's turn
    and a request to go on."""

    def __init__(self, keep_partial: bool) -> None:
        self.keep_partial = keep_partial

    async def run(
        self, task: Task, context: RunContext | None = None, on_event: Any = None
    ) -> HarnessResult:
        assert context is not None and context.base_url is not None
        messages: list[dict[str, Any]] = [{"role": "user", "content": str(task.input)}]
        async with openai.AsyncOpenAI(
            base_url=context.base_url, api_key=context.api_key, max_retries=0
        ) as client:
            for turn in range(2):
                text = await self._call(client, messages, str(context.model))
                messages += [
                    {"role": "assistant", "content": text},
                    {"role": "user", "content": f"and then? ({turn})"},
                ]
        return HarnessResult(status="completed", output=text, messages=messages)

    async def _call(
        self, client: openai.AsyncOpenAI, messages: list[dict[str, Any]], model: str
    ) -> str:
        for _ in range(3):
            text = ""
            try:
                stream = await client.chat.completions.create(
                    model=model,
                    messages=messages,  # type: ignore[arg-type]
                    stream=True,
                )
                async for chunk in stream:
                    if chunk.choices:
                        text += chunk.choices[0].delta.content or ""
                return text
            except (openai.APIError, httpx.TransportError):
                if self.keep_partial and text:
                    messages += [
                        {"role": "assistant", "content": text},
                        {"role": "user", "content": "go on"},
                    ]
        raise RuntimeError("the model failed three times")


def agentkit_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agentkit", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.mark.parametrize("keep_partial", [False, True], ids=["retried", "kept"])
async def test_a_broken_call_is_not_trained_and_its_retry_continues_the_sequence(
    tmp_path: Path, model_server: ScriptedModelServer, keep_partial: bool
) -> None:
    model_server.set_script(SCRIPT)
    taskset = ListTaskset("t", [Task(task_id="t:1", input="what is it?")])
    env = AgentEnv(taskset, RetryingAgent(keep_partial), contributors=())
    run = tmp_path / "run"
    results = await env.evaluate(
        model="scripted-model", base_url=model_server.base_url, out=run, token_ids=True
    )
    [rollout] = results.rollouts
    assert rollout.status == "completed"
    calls = open_run(run).calls(rollout.rollout_id)
    # call 0 broke off after two tokens; they are kept apart, never as its completion
    broken = calls[0]
    assert broken.error is not None and broken.error.startswith("the answer broke off")
    assert broken.completion_token_ids is None and broken.partial_token_ids is not None
    assert len(broken.partial_token_ids) == 2
    assert all(c.has_tokens for c in calls[1:])

    out = tmp_path / "skyrl.json"
    exported = agentkit_cli("export", str(run), "--format", "jsonl", "--out", str(out))
    assert exported.returncode == 0, exported.stderr
    records = [json.loads(line) for line in out.read_text().splitlines()]
    partial = broken.partial_token_ids
    if not keep_partial:
        # the retry (call 1) has call 0's prompt: it starts the rollout's one sequence,
        # call 2 extends it; the broken call is in none, and the rollout is complete
        assert [r["calls"] for r in records] == [[1, 2]]
        [record] = records
        assert record["sequence_start"] == "first" and record["token_issues"] == []
        assert "incomplete" not in exported.stdout + exported.stderr
        assert calls[1].prompt_token_ids == broken.prompt_token_ids
    else:
        # the agent went on from what it got: the two sampled tokens are in call 1's
        # prompt, not trained as the policy's: the rollout is incomplete, saying why
        [record] = records
        assert record["calls"] == [1, 2]
        assert calls[1].prompt_token_ids[: len(broken.prompt_token_ids) + 2] == (
            broken.prompt_token_ids + partial
        )
        [issue] = record["token_issues"]
        assert issue["call"] == 0
        assert (
            "the 2 tokens it had sampled reached the agent's next prompt (call 1)"
            in (issue["reason"])
        )
        assert "1 of 1 rollouts have incomplete token ids" in exported.stderr
        shown = agentkit_cli("show", str(run), "--rollout", rollout.rollout_id)
        assert "Token ids: incomplete (3 calls, 1 sequences): 1 calls not trained" in (shown.stdout)
    # no partial token is ever a trained (mask 1) token of the export
    completion, mask = record["completion_token_ids"], record["completion_mask"]
    trained = [t for t, m in zip(completion, mask, strict=True) if m == 1]
    assert trained == calls[1].completion_token_ids + calls[2].completion_token_ids
