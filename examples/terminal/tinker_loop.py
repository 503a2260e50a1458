"""A Tinker-style training loop on Harbor tasks, turn by turn, offline.

The loop of a Tinker trainer (as ``examples/fleet/tinker_loop.py`` runs it for
Fleet tasks), with the terminal harness's episodes on the Harbor example
tasks: tokenise the chat history, sample from the policy, hand the decoded
text to the episode's ``step`` (its ``<tool_call>`` blocks run in the task's
sandbox), append the observation's tokens with loss mask 0, until ``done``;
the reward is the task's own grading (Harbor's verifier, ``tests/test.sh``
in the episode's sandbox). Then GRPO advantages normalised across the batch
and the DAPO filter, with agentkit.training. The scripted model server stands
in for Tinker's sampler, and the sandbox is the local one on the host's
userland (``-S image=host``), so it runs anywhere bubblewrap does:

    python examples/terminal/tinker_loop.py   # needs agentkit-terminal, agentkit-harbor, bwrap

The tokenizer is the scripted server's stand-in (agentkit.testing.tokens and
the chat template below); with Tinker you would use the model's tokenizer and
``sampling_client.sample_async``. The last line printed is a JSON summary.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx

import agentkit
from agentkit import Limits, RunContext, training
from agentkit.registry import resolve_harness, resolve_taskset
from agentkit.testing import tokens
from agentkit.testing.model_server import ScriptedModelServer

HERE = Path(__file__).resolve().parent
TASKSET = f"harbor:{HERE.parent / 'harbor'}"
TASKS = ["hello-world", "wrong-on-purpose", "word-stats"]
SAMPLES_PER_TASK = 2
MAX_TURNS = 6
MAX_SEQUENCE_LENGTH = 32768


class StandInTokenizer:
    """The scripted server's tokenizer with its chat template (``<|role|>``, the text and a
    line end per message, an assistant's text followed by the end-of-turn token it was
    sampled with; then ``<|assistant|>``), as ``transformers`` tokenizers offer it."""

    def encode(self, text: str) -> list[int]:
        return tokens.encode(text)

    def decode(self, ids: list[int]) -> str:
        return tokens.decode(ids)

    def apply_chat_template(self, messages: list[dict[str, Any]]) -> list[int]:
        ids: list[int] = []
        for m in messages:
            end = [tokens.END_OF_TURN] if m["role"] == "assistant" else []
            for text in (f"<|{m['role']}|>", str(m.get("content") or ""), *end, "\n"):
                ids += tokens.encode(text)
        return ids + tokens.encode("<|assistant|>")


def call(name: str, arguments: dict[str, Any]) -> str:
    """A tool call in the terminal harness's text format."""
    return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"


def policy_script(taskset: Any) -> dict[str, Any]:
    """The first sample of every task plays the solution (a command, then submit); the
    second sample of the first two tasks goes wrong (a wrong greeting; giving up at once),
    so their groups' rewards differ."""
    solutions = json.loads((HERE / "solutions.json").read_text())
    wrong = {
        "hello-world": [call("shell", {"command": "echo 'Hello' > /app/hello.txt"})],
        "wrong-on-purpose": [],
    }
    rules: list[dict[str, Any]] = []
    for key in TASKS:
        match = {"any_message_contains": str(taskset.get_task(f"harbor:{key}").input)}
        first, *rest = solutions[key]
        rule: dict[str, Any] = {"match": {**match, "turn": 0}, "reply": {"content": first}}
        if key in wrong:
            rule["times"] = 1  # the second sample's first turn falls through
        rules.append(rule)
        if key in wrong:
            actions = [*wrong[key], call("submit", {})]
            rules += [
                {"match": {**match, "turn": turn}, "reply": {"content": action}, "times": 1}
                for turn, action in enumerate(actions)
            ]
        rules += [
            {"match": {**match, "turn": turn}, "reply": {"content": action}}
            for turn, action in enumerate(rest, start=1)
        ]
    return {"rules": rules, "default": {"content": call("submit", {})}}


class Sampler:
    """Tinker's ``sample_async`` stood in for by an OpenAI-compatible server that returns
    token ids and logprobs (vLLM's fields), checked against our own tokenisation."""

    def __init__(self, base_url: str) -> None:
        self.client = httpx.AsyncClient(base_url=base_url, timeout=60)

    async def sample(
        self, chat_history: list[dict[str, Any]], input_ids: list[int]
    ) -> tuple[list[int], list[float], str]:
        response = await self.client.post(
            "/chat/completions",
            json={
                "model": "policy",
                "messages": chat_history,
                "return_token_ids": True,
                "logprobs": True,
            },
        )
        response.raise_for_status()
        data = response.json()
        assert data["prompt_token_ids"] == input_ids, "the sampler saw other tokens"
        choice = data["choices"][0]
        logprobs = [c["logprob"] for c in choice["logprobs"]["content"]]
        return choice["token_ids"], logprobs, choice["finish_reason"]

    async def close(self) -> None:
        await self.client.aclose()


async def collect_rollout(
    harness: Any,
    taskset: Any,
    task: Any,
    sampler: Sampler,
    tokenizer: StandInTokenizer,
    index: int,
) -> training.TrainingRecord:
    """One rollout: sample, step, until done; the model's tokens with loss mask 1."""
    context = RunContext(rollout_id=f"{task.item_id}-{index}", limits=Limits(max_turns=MAX_TURNS))
    # the terminal harness takes the taskset: its sandbox comes from the task's execution
    # hints, its reward from the taskset's grading
    episode = agentkit.open_episode(harness, task, context, taskset=taskset)
    chat_history, _metadata = await episode.init()
    prompt_ids = tokenizer.apply_chat_template(chat_history)
    response_ids: list[int] = []
    logprobs: list[float] = []
    loss_mask: list[int] = []
    reward, done, stop_reason = 0.0, False, "stop"
    try:
        while not done:
            input_ids = tokenizer.apply_chat_template(chat_history)
            output_ids, output_logprobs, stop_reason = await sampler.sample(chat_history, input_ids)
            response_ids += output_ids  # the model's tokens: trained on
            logprobs += output_logprobs
            loss_mask += [1] * len(output_ids)
            action = tokenizer.decode(output_ids)
            out = await episode.step(action)
            reward, done = out["reward"], out["done"]
            chat_history = [*chat_history, {"role": "assistant", "content": action}]
            chat_history += out["observations"]
            if not done:
                # the tokens the next prompt adds (the observation and the chat template's
                # markers around it), masked out; the sequence ends with the model's last
                # token, as in SkyRL's generator
                before = input_ids + output_ids
                between = tokenizer.apply_chat_template(chat_history)[len(before) :]
                response_ids += between
                logprobs += [0.0] * len(between)
                loss_mask += [0] * len(between)
    finally:
        await episode.close()
    return training.TrainingRecord(
        rollout_id=context.rollout_id,
        task_id=task.task_id,
        example_id=task.item_id,
        rollout_index=index,
        group=0,
        status="completed",
        reward=reward,
        stop_reason=stop_reason,
        prompt_token_ids=prompt_ids,
        completion_token_ids=response_ids,
        completion_mask=loss_mask,
        completion_logprobs=logprobs,
    )


async def main() -> dict[str, Any]:
    tokenizer = StandInTokenizer()
    taskset = resolve_taskset(TASKSET)
    harness = resolve_harness("terminal", sandbox_options={"image": "host"})
    with ScriptedModelServer(policy_script(taskset)) as server:
        sampler = Sampler(server.base_url)
        try:
            records = []
            for key in TASKS:
                task = taskset.get_task(f"harbor:{key}")
                for i in range(SAMPLES_PER_TASK):
                    records.append(
                        await collect_rollout(harness, taskset, task, sampler, tokenizer, i)
                    )
        finally:
            await sampler.close()
    # GRPO advantages normalised across the batch, the DAPO filter, truncation. The
    # stand-in tokenizer has no EOS token, so the filter keys on the stop reason.
    records = training.assign_advantages(records, normalize="batch")
    records = training.filter_overlong(records)
    records = training.truncate_all(records, MAX_SEQUENCE_LENGTH)
    rows = []
    for r in records:
        mask = r.completion_mask or []
        rows.append(
            {
                "rollout": r.rollout_id,
                "reward": r.reward,
                "advantage": round(r.advantage or 0.0, 6),
                "prompt_tokens": len(r.prompt_token_ids or []),
                "model_tokens": sum(mask),
                "observation_tokens": len(mask) - sum(mask),
                "overlong": r.overlong,
            }
        )
        print(
            f"{r.rollout_id:24} reward={r.reward:.1f} advantage={r.advantage or 0.0:+.3f} "
            f"model_tokens={sum(mask)} observation_tokens={len(mask) - sum(mask)}"
        )
    return {"rollouts": rows}


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main())))
