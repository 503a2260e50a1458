"""The Fleet Tinker trainer's rollout loop on agentkit's step API, offline.

Fleet's Tinker trainer (SkyRL ``integrations/fleet/entrypoints/main_fleet_tinker.py``)
collects each rollout like this: tokenise the chat history, sample from the
policy, hand the decoded text to the environment's ``step``, append the
observation's tokens with loss mask 0, until ``done``; then GRPO advantages
normalised across the batch, and the DAPO filter that masks responses cut off
by the length limit. This script runs that loop with agentkit's Fleet episodes
(the bundled bookings environment) and the scripted model server standing in
for Tinker's sampler, and agentkit.training for the batch:

    python examples/fleet/tinker_loop.py          # needs agentkit-fleet and bubblewrap

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

from agentkit import Limits, RunContext, training
from agentkit.registry import resolve_harness, resolve_taskset
from agentkit.testing import tokens
from agentkit.testing.model_server import ScriptedModelServer

HERE = Path(__file__).resolve().parent
TASKS = ["cancel-grace-march", "room-202-back-in-service", "register-barbara"]
SAMPLES_PER_TASK = 2
MAX_TURNS = 6
MAX_SEQUENCE_LENGTH = 32768


class StandInTokenizer:
    """The scripted server's tokenizer with its chat template (``<|role|>``, the text and a
    line end per message, then ``<|assistant|>``; an assistant's text ends with the
    end-of-turn marker the model sampled), as ``transformers`` tokenizers offer it."""

    def encode(self, text: str) -> list[int]:
        return tokens.encode(text)

    def decode(self, ids: list[int]) -> str:
        return tokens.decode(ids)

    def apply_chat_template(self, messages: list[dict[str, Any]]) -> list[int]:
        ids: list[int] = []
        for m in messages:
            content = str(m.get("content") or "")
            texts = [f"<|{m['role']}|>", content, "\n"]
            if m["role"] == "assistant":
                texts.insert(2, tokens.END_OF_TURN)
            for text in texts:
                ids += tokens.encode(text)
        return ids + tokens.encode("<|assistant|>")

    def parse_response(self, ids: list[int]) -> str:
        """The text of a sampled turn, without its end-of-turn marker (as Tinker's
        renderers parse a response)."""
        return self.decode(ids).removesuffix(tokens.END_OF_TURN)


def policy_script() -> dict[str, Any]:
    """The first sample of every task plays the solution; the second sample of the
    first two tasks gives up at once (so their groups' rewards differ)."""
    solutions = json.loads((HERE / "solutions.json").read_text())
    prompts = {t.item_id: t.input for t in resolve_taskset(f"fleet:{HERE / 'tasks.json'}")}
    rules: list[dict[str, Any]] = []
    for key in TASKS:
        match = {"any_message_contains": prompts[key]}
        for turn, action in enumerate(solutions[key]):
            rule: dict[str, Any] = {"match": {**match, "turn": turn}, "reply": {"content": action}}
            if turn == 0 and key != "register-barbara":
                rule["times"] = 1  # the second sample's first turn falls through
            rules.append(rule)
        rules.append({"match": {**match, "turn": 0}, "reply": {"content": "Nothing to do. <done>"}})
    return {"rules": rules, "default": {"content": "<done>"}}


class Sampler:
    """Tinker's ``sample_async`` stood in for by an OpenAI-compatible server that returns
    token ids and logprobs (vLLM's fields), checked against our own tokenisation."""

    def __init__(self, base_url: str, tokenizer: StandInTokenizer) -> None:
        self.client = httpx.AsyncClient(base_url=base_url, timeout=60)
        self.tokenizer = tokenizer

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
    harness: Any, task: Any, sampler: Sampler, tokenizer: StandInTokenizer, index: int
) -> training.TrainingRecord:
    """One rollout, as main_fleet_tinker.py's collect_fleet_rollout builds it."""
    episode = harness.episode(task, RunContext(limits=Limits(max_turns=MAX_TURNS)))
    chat_history, _metadata = await episode.init()
    prompt_ids = tokenizer.apply_chat_template(chat_history)
    response_ids: list[int] = []
    logprobs: list[float] = []
    loss_mask: list[int] = []
    reward, done, stop_reason = 0.0, False, "stop"
    try:
        while not done:
            input_ids = tokenizer.apply_chat_template(episode.chat_history)
            output_ids, output_logprobs, stop_reason = await sampler.sample(
                episode.chat_history, input_ids
            )
            response_ids += output_ids  # the model's tokens: trained on
            logprobs += output_logprobs
            loss_mask += [1] * len(output_ids)
            out = await episode.step(tokenizer.parse_response(output_ids))
            reward, done = out["reward"], out["done"]
            if out["observations"] and not done:
                # the tokens the next prompt adds: the observation and the chat template's
                # markers around it, masked out. (The Tinker loop appends the observation's
                # own tokens only, and the last observation too; here the sequence is what
                # the model saw, and it ends with the model's last token, as in SkyRL's
                # generator.)
                before = input_ids + output_ids
                after = tokenizer.apply_chat_template(episode.chat_history)
                between = after[len(before) :]
                assert out["observations"][0]["content"] in tokenizer.decode(between)
                response_ids += between
                logprobs += [0.0] * len(between)
                loss_mask += [0] * len(between)
    finally:
        await episode.close()
    return training.TrainingRecord(
        rollout_id=f"{task.item_id}-{index}",
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
    taskset = resolve_taskset(f"fleet:{HERE / 'tasks.json'}")
    harness = resolve_harness("fleet-tool-call", provider="local")
    with ScriptedModelServer(policy_script()) as server:
        sampler = Sampler(server.base_url, tokenizer)
        try:
            records = []
            for key in TASKS:
                task = taskset.get_task(f"fleet:{key}")
                for i in range(SAMPLES_PER_TASK):
                    records.append(await collect_rollout(harness, task, sampler, tokenizer, i))
        finally:
            await sampler.close()
    # compute_advantages_grpo(normalize=True), the DAPO filter, truncation. The stand-in
    # tokenizer has no EOS token, so the filter keys on the stop reason; with a real
    # tokenizer, as the Tinker loop: filter_overlong(records, eos_token_id=tok.eos_token_id)
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
            f"{r.rollout_id:32} reward={r.reward:.1f} advantage={r.advantage or 0.0:+.3f} "
            f"model_tokens={sum(mask)} observation_tokens={len(mask) - sum(mask)}"
        )
    return {"rollouts": rows}


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main())))
