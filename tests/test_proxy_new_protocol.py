"""A wire protocol added through agentkit's public API (agentkit.proxy.Wire, register_wire):
SGLang's native ``POST /generate`` (token ids in, token ids out). A run whose harness speaks
it through the model proxy records its calls under the protocol's own name, and the run
directory's calls files read back: agentkit.runs, agentkit show and training export."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import httpx
import pytest
from _upstream import Upstream
from aiohttp import web
from click.testing import CliRunner

import agentkit.runs
from agentkit import HarnessResult, ListTaskset, RunContext, Task, ValidationError
from agentkit.cli._show_cmd import show_cmd
from agentkit.env import AgentEnv
from agentkit.proxy import WIRES, Recorded, Wire, register_wire
from agentkit.training import export_run

pytestmark = pytest.mark.anyio

PROMPT = [11, 12, 13]
TOOL_RESULT = [21, 22]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class GenerateWire(Wire):
    """SGLang's native ``/generate``: the prompt's ids are the request's ``input_ids``; the
    answer's ``output_ids`` are the completion's, ``meta_info.output_token_logprobs``
    (``[logprob, id, text]`` each, with ``return_logprob``) their logprobs."""

    protocol: ClassVar[str] = "sglang-generate"
    endpoints: ClassVar[tuple[str, ...]] = ("/generate",)

    @classmethod
    def matches(cls, path: str) -> bool:
        return path.endswith("/generate")

    def prepare(self) -> None:
        self.ids_asked = True
        self.answered: Any = None
        if self.settings.token_ids and self.request.get("return_logprob") is not True:
            self.ask("return_logprob", True)

    def answer(self, data: Any) -> Any:
        self.answered = data
        return data

    def recorded(self) -> Recorded:
        data = self.answered if isinstance(self.answered, dict) else {}
        meta = data.get("meta_info") or {}
        pairs = meta.get("output_token_logprobs") or []
        out = Recorded(
            response=self.answered,
            finish_reason=(meta.get("finish_reason") or {}).get("type"),
            prompt_token_ids=self.request.get("input_ids"),
            completion_token_ids=data.get("output_ids"),
            completion_logprobs=[p[0] for p in pairs] or None,
        )
        out.token_note = self.token_note(out)
        return out


@pytest.fixture
def generate_wire() -> Iterator[type[Wire]]:
    register_wire(GenerateWire)
    try:
        yield GenerateWire
    finally:
        WIRES.remove(GenerateWire)


async def sglang_generate(request: web.BaseRequest) -> web.StreamResponse:
    """A server of SGLang's ``/generate``: two ids answered for any prompt."""
    body = await request.json()
    ids = body["input_ids"]
    output = [100 + len(ids), 101 + len(ids)]
    meta: dict[str, Any] = {
        "prompt_tokens": len(ids),
        "completion_tokens": len(output),
        "finish_reason": {"type": "stop"},
    }
    if body.get("return_logprob"):
        meta["output_token_logprobs"] = [[-0.25, i, None] for i in output]
    return web.json_response({"text": "ok", "output_ids": output, "meta_info": meta})


class GenerateHarness:
    """Two calls of ``/generate``: the second's prompt is the first's, its answer and a tool
    result (one sequence in training export)."""

    async def run(
        self, task: Task, context: RunContext | None = None, on_event: Any = None
    ) -> HarnessResult:
        assert context is not None and context.base_url is not None
        headers = {"Authorization": f"Bearer {context.api_key}"}
        prompt = list(PROMPT)
        async with httpx.AsyncClient(timeout=30) as client:
            for _ in range(2):
                answer = await client.post(
                    context.base_url + "/generate",
                    json={"input_ids": prompt, "sampling_params": {"max_new_tokens": 2}},
                    headers=headers,
                )
                answer.raise_for_status()
                prompt = prompt + answer.json()["output_ids"] + TOOL_RESULT
        return HarnessResult(status="completed", output="ok")


async def test_a_new_protocols_calls_are_recorded_and_read_back(
    tmp_path: Path, generate_wire: type[Wire]
) -> None:
    run = tmp_path / "run"
    taskset = ListTaskset("gen", [Task(task_id="gen:1", input="go")])
    async with Upstream(sglang_generate) as server:
        env = AgentEnv(taskset, GenerateHarness())
        results = await env.evaluate(
            model="m",
            base_url=server.url.removesuffix("/v1"),
            out=run,
            token_ids=True,
            preflight=False,
        )
    assert [r.status for r in results.rollouts] == ["completed"]
    assert [(m, p) for m, p, _ in server.seen] == [("POST", "/generate")] * 2

    reader = agentkit.runs.open(run)
    [rollout] = reader.rollouts(0, 10)
    first, second = reader.calls(rollout.rollout_id)
    assert (first.protocol, second.protocol) == ("sglang-generate", "sglang-generate")
    assert first.forwarded == {"return_logprob": True} and first.token_source == "server"
    assert first.prompt_token_ids == PROMPT and first.completion_token_ids == [103, 104]
    assert second.prompt_token_ids == [*PROMPT, 103, 104, *TOOL_RESULT]
    assert second.completion_logprobs == [-0.25, -0.25]

    shown = CliRunner().invoke(show_cmd, [str(run), "--rollout", rollout.rollout_id, "--calls"])
    assert shown.exit_code == 0, shown.output
    assert shown.output.splitlines()[1].startswith("[0] sglang-generate -  200 stop")

    out = tmp_path / "train.jsonl"
    summary = export_run(run, out, format="jsonl", require_token_ids=True)
    assert summary.written == 1
    [record] = [json.loads(line) for line in out.read_text().splitlines()]
    assert record["prompt_token_ids"] == PROMPT
    assert record["completion_token_ids"] == [103, 104, *TOOL_RESULT, 107, 108]
    assert record["completion_mask"] == [1, 1, 0, 0, 1, 1]


def test_a_protocol_name_the_calls_file_cannot_keep_is_refused_when_registered() -> None:
    class Shouting(GenerateWire):
        protocol: ClassVar[str] = "SGLang Generate!"

    with pytest.raises(ValidationError, match=r"Shouting.protocol: expected a protocol's name"):
        register_wire(Shouting)
    assert Shouting not in WIRES
