"""The chat harness against the real vLLM: complete ids, exports the trainers load,
and the trainer's check (a forward pass reproduces every recorded logprob)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from checks import (
    FORMATS,
    assert_a_forward_pass_reproduces,
    assert_complete_ids,
    assert_the_trainers_load,
    export,
)

from agentkit.env import AgentEnv
from conftest import Server

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
async def test_chat_rollouts_against_vllm_hold_the_trainers_check(
    vllm: Server, tmp_path: Path, stream: bool
) -> None:
    tasks = tmp_path / "qa.jsonl"
    rows = [
        {"id": "one", "input": "Say hello.", "target": "hello"},
        {
            "id": "two",
            "input": [
                {"role": "user", "content": "What is 2+2?"},
                {"role": "user", "content": "And 3*3?"},
            ],
            "target": "9",
        },
    ]
    tasks.write_text("".join(json.dumps(r) + "\n" for r in rows))
    env = AgentEnv.from_names(f"jsonl:{tasks}", "chat", max_tokens=24, stream=stream)
    run_dir = tmp_path / "run"
    results = await env.evaluate(
        rollouts_per_task=2, concurrency=4, model=vllm.model, base_url=vllm.base_url,
        out=run_dir, token_ids=True,
    )  # fmt: skip
    assert [r.status for r in results.rollouts] == ["completed"] * 4, [
        r.error for r in results.rollouts
    ]
    calls = assert_complete_ids(run_dir)
    assert len(calls) == 6
    files = {fmt: export(run_dir, fmt) for fmt in FORMATS}
    assert_the_trainers_load(files)
    assert assert_a_forward_pass_reproduces(vllm.model_dir, files, calls) > 0
