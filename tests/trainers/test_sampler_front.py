"""The chat-completions front over a token-in/token-out sampler (agentkit_tinker.SamplerFront).

The tokenizer is a real one, made on the spot offline: the tiny Qwen2-style
model directory of tests/servers (a byte-level BPE tokenizer with a ChatML
template and Hermes tool calls), loaded by ``transformers``. The sampler is
deterministic and in-process: it answers scripted texts as token ids of that
tokenizer, with logprobs, and keeps every prompt it was given. Three checks:

- the OpenAI client (a real one, over loopback) gets a tool call parsed from the
  ``<tool_call>`` block, then, with the tool's result in the conversation, a
  plain answer; the sampler's prompts are the chat template's rendering of each
  conversation, exactly;
- a rollout of the rollout service through the front (the chat harness, the
  model proxy, token ids on) records the sampler's ids and logprobs exactly, by
  construction, and the prompt ids the template rendered;
- :class:`agentkit_tinker.TinkerSampler` speaks Tinker's own types: the request is
  a ``tinker.ModelInput`` with ``tinker.SamplingParams``, the answer a
  ``tinker.SampleResponse`` of ``SampledSequence``s (no call to Tinker's service).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import anyio
import attrs
import pytest
from agentkit_tinker import Sampled, SamplerFront, SamplingRequest, TinkerSampler

from agentkit.env import AgentEnv, RunOptions
from agentkit.service import RolloutService

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "servers"))

pytestmark = pytest.mark.anyio

HANG = 120

CALC = {
    "type": "function",
    "function": {
        "name": "calc",
        "description": "Evaluate an arithmetic expression.",
        "parameters": {"type": "object", "properties": {"expr": {"type": "string"}}},
    },
}


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory: pytest.TempPathFactory) -> Any:
    import tiny_models  # tests/servers: the tiny model maker
    from transformers import AutoTokenizer

    directory = tiny_models.build(tiny_models.RANDOM, tmp_path_factory.mktemp("models"))
    return AutoTokenizer.from_pretrained(directory)


@attrs.define
class ScriptedSampler:
    """Answers ``texts`` in turn, as the tokenizer's ids and the end of turn; logprobs
    -1/(n+2) of each n-th token; keeps every request."""

    tokenizer: Any
    texts: list[str]
    requests: list[SamplingRequest] = attrs.field(factory=list)
    answers: list[Sampled] = attrs.field(factory=list)

    async def sample(self, request: SamplingRequest) -> Sampled:
        self.requests.append(request)
        text = self.texts[min(len(self.requests), len(self.texts)) - 1]
        ids = self.tokenizer.encode(text, add_special_tokens=False) + request.stop_token_ids
        answer = Sampled(
            token_ids=ids,
            logprobs=[-1.0 / (n + 2) for n in range(len(ids))],
            finish_reason="stop",
        )
        self.answers.append(answer)
        return answer


def rendered(tokenizer: Any, messages: list[dict[str, Any]], tools: Any = None) -> list[int]:
    ids = tokenizer.apply_chat_template(messages, tools=tools, add_generation_prompt=True)
    return list(ids["input_ids"] if isinstance(ids, Mapping) else ids)  # a BatchEncoding


async def test_openai_client_gets_tool_calls_and_the_sampler_the_rendered_prompts(
    tokenizer: Any,
) -> None:
    import openai

    call = '<tool_call>\n{"name": "calc", "arguments": {"expr": "2+2"}}\n</tool_call>'
    sampler = ScriptedSampler(tokenizer, [f"<think>\nadd them\n</think>\n\n{call}", "It is 4."])
    async with SamplerFront(sampler, tokenizer, model="policy") as front:
        client = openai.AsyncOpenAI(base_url=front.url, api_key="unused", max_retries=0)
        messages: list[dict[str, Any]] = [{"role": "user", "content": "What is 2+2?"}]
        with anyio.fail_after(HANG):
            first = await client.chat.completions.create(
                model="policy",
                messages=messages,
                tools=[CALC],  # type: ignore[arg-type,list-item]
            )
        choice = first.choices[0]
        assert choice.finish_reason == "tool_calls"
        (tool_call,) = choice.message.tool_calls or []
        assert tool_call.function.name == "calc"
        assert json.loads(tool_call.function.arguments) == {"expr": "2+2"}
        assert choice.message.content is None
        assert choice.message.model_extra["reasoning_content"] == "add them"
        # the ids, exactly as sampled, and the prompt the template rendered
        assert sampler.requests[0].prompt_ids == rendered(tokenizer, messages, [CALC])
        assert first.model_extra["prompt_token_ids"] == sampler.requests[0].prompt_ids
        assert choice.model_extra["token_ids"] == sampler.answers[0].token_ids
        assert [e.logprob for e in choice.logprobs.content] == sampler.answers[0].logprobs

        messages += [
            choice.message.model_dump(exclude_none=True, exclude={"reasoning_content"}),
            {"role": "tool", "tool_call_id": tool_call.id, "content": "4"},
        ]
        with anyio.fail_after(HANG):
            second = await client.chat.completions.create(
                model="policy",
                messages=messages,
                tools=[CALC],  # type: ignore[arg-type]
            )
        assert second.choices[0].finish_reason == "stop"
        assert second.choices[0].message.content == "It is 4."
        prompt = sampler.requests[1].prompt_ids
        assert prompt == rendered(tokenizer, messages, [CALC])
        assert "<tool_response>\n4\n</tool_response>" in tokenizer.decode(prompt)

        # bad requests: a clear 400 naming the field
        with pytest.raises(openai.BadRequestError, match="max_tokens: expected a whole number"):
            await client.chat.completions.create(
                model="policy",
                messages=messages,
                max_tokens=0,  # type: ignore[arg-type]
            )
        with pytest.raises(openai.BadRequestError, match="n: this front samples one choice"):
            await client.chat.completions.create(
                model="policy",
                messages=messages,
                n=2,  # type: ignore[arg-type]
            )

        # the same first turn streamed: the tool call, the ids and the usage in the chunks
        sampler.requests.clear()
        sampler.answers.clear()
        with anyio.fail_after(HANG):
            stream = await client.chat.completions.create(
                model="policy",
                messages=messages[:1],  # type: ignore[arg-type]
                tools=[CALC],  # type: ignore[list-item]
                stream=True,
                stream_options={"include_usage": True},
            )
            chunks = [c async for c in stream]
        streamed = chunks[0].choices[0]
        (streamed_call,) = streamed.delta.tool_calls or []
        assert streamed_call.function and streamed_call.function.name == "calc"
        assert json.loads(streamed_call.function.arguments or "") == {"expr": "2+2"}
        assert chunks[0].model_extra["prompt_token_ids"] == sampler.requests[0].prompt_ids
        assert streamed.model_extra["token_ids"] == sampler.answers[0].token_ids
        assert [e.logprob for e in streamed.logprobs.content] == sampler.answers[0].logprobs
        assert chunks[1].choices[0].finish_reason == "tool_calls"
        assert chunks[-1].usage and chunks[-1].usage.completion_tokens == len(
            sampler.answers[0].token_ids
        )


async def test_a_rollout_through_the_front_records_the_sampled_ids_exactly(
    tmp_path: Path, tokenizer: Any
) -> None:
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(json.dumps({"id": "add", "input": "2+2?", "target": "4"}) + "\n")
    sampler = ScriptedSampler(tokenizer, ["4"])
    async with SamplerFront(sampler, tokenizer, model="policy") as front:
        options = RunOptions(
            model="policy", base_url=front.url, concurrency=2, token_ids=True,
            out=tmp_path / "run", preflight=False,
        )  # fmt: skip
        env = AgentEnv.from_names(f"jsonl:{tasks}", "chat")
        async with RolloutService(env, options, group_size=2, format="tinker") as service:
            service.request()
            with anyio.fail_after(HANG):
                group = await service.next_group()
    assert group.rewards == [1.0, 1.0]
    calls = [c for r in group.rollouts for c in r.model_calls]
    assert len(calls) == len(sampler.requests) == 2
    by_prompt = {tuple(r.prompt_ids): a for r, a in zip(sampler.requests, sampler.answers,
                 strict=True)}  # fmt: skip
    for call in calls:
        assert call.prompt_token_ids is not None
        answer = by_prompt[tuple(call.prompt_token_ids)]
        assert call.completion_token_ids == answer.token_ids
        assert call.completion_logprobs == answer.logprobs
        assert call.prompt_token_ids == rendered(tokenizer, [{"role": "user", "content": "2+2?"}])
    # the Tinker datums the service built carry them too
    (datum, _) = group.data
    assert datum["loss_fn_inputs"]["target_tokens"]["data"][-len(answer.token_ids) :] == (
        answer.token_ids
    )


async def test_tinker_sampler_speaks_tinkers_own_types() -> None:
    import numpy as np
    import tinker
    from tinker.types import SampledSequence, SampleResponse

    seen: list[tuple[Any, int, Any]] = []

    class SamplingClient:  # Tinker's sampling client's ``sample``, without its service
        async def sample(
            self, prompt: tinker.ModelInput, num_samples: int,
            sampling_params: tinker.SamplingParams,
        ) -> SampleResponse:  # fmt: skip
            seen.append((prompt, num_samples, sampling_params))
            sequence = SampledSequence(
                stop_reason="length",
                sequence_id="s-0",
                tokens_np=np.array([7, 8, 9], dtype=np.int32),
                logprobs_np=np.array([-0.5, -0.25, -2.0], dtype=np.float32),
            )
            return SampleResponse(sequences=[sequence])

    sampler = TinkerSampler(SamplingClient())
    sampled = await sampler.sample(
        SamplingRequest(prompt_ids=[1, 2, 3], max_tokens=3, temperature=0.7, stop_token_ids=[5])
    )
    assert sampled == Sampled(token_ids=[7, 8, 9], logprobs=[-0.5, -0.25, -2.0],
                              finish_reason="length")  # fmt: skip
    ((prompt, n, params),) = seen
    assert isinstance(prompt, tinker.ModelInput) and prompt.to_ints() == [1, 2, 3] and n == 1
    assert isinstance(params, tinker.SamplingParams)
    assert (params.max_tokens, params.temperature, params.stop) == (3, 0.7, [5])


@attrs.define
class HelloWorldSampler:
    """The Harbor hello-world task in Hermes text: a ``bash`` tool call that writes the
    file, then, once a tool's result is in the prompt, a plain answer. The reply is
    chosen from the prompt (not the call count), so extra calls cannot shift it."""

    tokenizer: Any
    requests: list[SamplingRequest] = attrs.field(factory=list)
    answers: list[Sampled] = attrs.field(factory=list)

    async def sample(self, request: SamplingRequest) -> Sampled:
        self.requests.append(request)
        if "<tool_response>" in self.tokenizer.decode(request.prompt_ids):
            text = "Created /app/hello.txt."
        else:
            command = "printf 'Hello, world!\\n' > /app/hello.txt"
            arguments = {"command": command, "description": "Write the greeting"}
            call = {"name": "bash", "arguments": arguments}
            text = f"I will create it.\n<tool_call>\n{json.dumps(call)}\n</tool_call>"
        ids = self.tokenizer.encode(text, add_special_tokens=False) + request.stop_token_ids
        answer = Sampled(
            token_ids=ids, logprobs=[-0.5] * len(ids), finish_reason="stop"
        )  # fmt: skip
        self.answers.append(answer)
        return answer


async def test_opencode_through_the_front_feeds_the_cookbook(
    tmp_path: Path, tokenizer: Any
) -> None:
    """The real opencode (it streams, with its own tools) on the Harbor hello-world task,
    its calls through the model proxy to the front: the task passes, every call records
    the ids the sampler returned and the prompt the template rendered, and the cookbook
    makes its datums of the group."""
    import os
    import shutil

    from agentkit_tinker import trajectory_group
    from tinker_cookbook.rl.data_processing import assemble_training_data, compute_advantages

    from agentkit.testing.programs import need_harbor_task

    examples = Path(__file__).resolve().parents[2] / "examples" / "harbor"
    need_harbor_task(examples / "hello-world")
    if not (shutil.which("bwrap") and os.environ.get("AGENTKIT_OPENCODE_BIN")):
        message = "not installed: bubblewrap or opencode (python3 -m nox -s trainers installs them)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    sampler = HelloWorldSampler(tokenizer)
    env = AgentEnv.from_names(f"harbor:{examples}", "opencode")
    [hello] = [t.task_id for t in env.taskset if t.task_id.endswith(":hello-world")]
    async with SamplerFront(sampler, tokenizer, model="policy") as front:
        options = RunOptions(
            model="policy", base_url=front.url, concurrency=1, token_ids=True,
            out=tmp_path / "run", preflight=False, sandbox_options={"image": "host"},
        )  # fmt: skip
        async with RolloutService(env, options, group_size=1, format="tinker") as service:
            service.request(task_id=hello)
            with anyio.fail_after(HANG):
                group = await service.next_group()
    (rollout,) = group.rollouts
    assert rollout.status == "completed", rollout.error
    assert group.rewards == [1.0]
    calls = [c for c in rollout.model_calls if c.has_tokens]
    assert len(calls) >= 2
    sampled = {tuple(r.prompt_ids): a for r, a in zip(sampler.requests, sampler.answers,
               strict=True)}  # fmt: skip
    for call in calls:
        answer = sampled[tuple(call.prompt_token_ids or [])]
        assert call.completion_token_ids == answer.token_ids
        assert call.completion_logprobs == answer.logprobs
    assert any(c.finish_reason == "tool_calls" for c in calls)
    cookbook = [trajectory_group(group)]
    datums, _ = assemble_training_data(cookbook, compute_advantages(cookbook))
    assert len(datums) == len(group.data) >= 1
