"""Exports of calls the model proxy translated (Anthropic Messages served from chat
completions), loaded by SkyRL, Tinker and verifiers.

The rollout is a real run (chat harness, scripted model); its calls file is that of
a Messages tool loop, as Claude Code makes it, sent through a real proxy route in
translation mode to a scripted server that serves chat completions only (the
program itself runs in the plugins' tests, which the ``tests`` session installs;
this session has no agent programs). Each library loads the export, and the ids
it holds are those the server sent.
"""

from __future__ import annotations

import json
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from _calls_runs import write_calls

from agentkit.env import AgentEnv
from agentkit.proxy import ProxySettings, shared_proxy
from agentkit.testing.model_server import ScriptedModelServer
from agentkit.testing.programs import exported_sequences

pytestmark = pytest.mark.anyio

SCRIPT = {
    "rules": [
        {
            "match": {"after_tool": False},
            "reply": {
                "content": "I will create the file.",
                "tool_calls": [{"name": "Bash", "arguments": '{"command":"echo hi > a.txt"}'}],
            },
        },
        {"match": {"after_tool": True}, "reply": {"content": "Created a.txt."}},
    ]
}
TOOLS = [
    {
        "name": "Bash",
        "description": "Run a command.",
        "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}},
    }
]


async def messages_tool_loop(server: ScriptedModelServer, rollout_id: str) -> list[Any]:
    """Two streamed Messages calls (a tool_use, then its tool_result) through a proxy route
    in translation mode; the calls it recorded."""
    async with shared_proxy() as proxy:
        route = proxy.open_route(
            rollout_id=rollout_id,
            upstream=server.base_url,
            api_key=None,
            settings=ProxySettings(token_ids=True, translate_to_chat=True),
        )
        messages: list[Any] = [{"role": "user", "content": [{"type": "text", "text": "Go."}]}]
        async with aiohttp.ClientSession(headers={"x-api-key": route.key}) as http:
            for _ in range(2):
                system = [{"type": "text", "text": "Be brief."}]
                body = {"model": "m", "max_tokens": 100, "stream": True, "tools": TOOLS,
                        "system": system, "messages": messages}  # fmt: skip
                async with http.post(route.base_url + "/messages?beta=true", json=body) as reply:
                    assert reply.status == 200
                    events = [
                        json.loads(line[6:])
                        for line in (await reply.text()).splitlines()
                        if line.startswith("data: ")
                    ]
                blocks = [e["content_block"] for e in events if e["type"] == "content_block_start"]
                for block in blocks:
                    if block["type"] == "text":
                        block["text"] = "".join(
                            e["delta"]["text"] for e in events if e["type"] == "content_block_delta"
                            and e["delta"]["type"] == "text_delta"
                        )  # fmt: skip
                    elif block["type"] == "tool_use":
                        block["input"] = json.loads("".join(
                            e["delta"]["partial_json"] for e in events
                            if e["type"] == "content_block_delta"
                            and e["delta"]["type"] == "input_json_delta"
                        ))  # fmt: skip
                messages.append({"role": "assistant", "content": blocks})
                tool = next((b for b in blocks if b["type"] == "tool_use"), None)
                if tool is not None:
                    result = {"type": "tool_result", "tool_use_id": tool["id"], "content": "ok"}
                    messages.append({"role": "user", "content": [result]})
        return route.close()


@pytest.fixture
async def run_dir(tmp_path: Path, model_server: ScriptedModelServer) -> Path:
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(json.dumps({"id": "make", "input": "Make a.txt", "target": "x"}) + "\n")
    model_server.set_script(SCRIPT)
    run = tmp_path / "run"
    await AgentEnv.from_names(f"jsonl:{tasks}", "chat").evaluate(
        model="m", base_url=model_server.base_url, out=run
    )
    [line] = (run / "rollouts.jsonl").read_text().splitlines()
    rollout_id = json.loads(line)["rollout_id"]
    model_server.clear_requests()
    model_server.set_apis({"chat"})
    calls = await messages_tool_loop(model_server, rollout_id)
    assert [(c.protocol, c.upstream_protocol) for c in calls] == [("messages", "chat")] * 2
    write_calls(run, rollout_id, calls)
    return run


def export(run_dir: Path, fmt: str, out: Path) -> Path:
    done = subprocess.run(
        [sys.executable, "-m", "agentkit", "export", str(run_dir), "--format", fmt, "--out",
         str(out)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return out


def server_sequence(server: ScriptedModelServer) -> tuple[list[int], list[int], list[float]]:
    """The one sequence the server's two answers make: all tokens, the sampled ones, and
    their logprobs, as the server sent them."""
    first, second = (r.sent for r in server.model_requests)
    seen = first["prompt_token_ids"] + first["completion_token_ids"]
    assert second["prompt_token_ids"][: len(seen)] == seen  # the prompt extends the turn
    tokens = second["prompt_token_ids"] + second["completion_token_ids"]
    sampled = first["completion_token_ids"] + second["completion_token_ids"]
    return tokens, sampled, first["completion_logprobs"] + second["completion_logprobs"]


def assert_one_sequence_of_the_servers_ids(
    path: Path, fmt: str, server: ScriptedModelServer
) -> None:
    tokens, sampled, logprobs = server_sequence(server)
    [(got, mask, got_logprobs)] = exported_sequences(path, fmt)
    assert got == tokens
    assert [t for t, m in zip(got, mask, strict=True) if m] == sampled
    assert got_logprobs == logprobs


async def test_skyrl_loads_translated_calls(
    run_dir: Path, tmp_path: Path, model_server: ScriptedModelServer
) -> None:
    from skyrl.train.dataset.preprocess import convert_prompts_responses_to_batch_tensors
    from skyrl.train.generators.base import TrajectoryID
    from skyrl.train.utils.trainer_utils import validate_generator_output

    path = export(run_dir, "skyrl", tmp_path / "out.json")
    assert_one_sequence_of_the_servers_ids(path, "skyrl", model_server)
    output = json.loads(path.read_text())
    output["trajectory_ids"] = [TrajectoryID(**t) for t in output["trajectory_ids"]]
    validate_generator_output(1, output, step_wise=True)
    tensors = convert_prompts_responses_to_batch_tensors(
        types.SimpleNamespace(pad_token_id=0),
        output["prompt_token_ids"],
        output["response_ids"],
        [[0.0] * (len(r) - 1) + [w] for r, w in zip(output["response_ids"], output["rewards"],
                                                      strict=True)],
        output["loss_masks"],
        output["rollout_logprobs"],
    )  # fmt: skip
    assert tensors[0].shape[0] == 1


async def test_tinker_loads_translated_calls(
    run_dir: Path, tmp_path: Path, model_server: ScriptedModelServer
) -> None:
    import tinker
    from tinker.proto.request_conv import forward_backward_request_to_proto
    from tinker.types import ForwardBackwardInput, ForwardBackwardRequest

    path = export(run_dir, "tinker", tmp_path / "t.jsonl")
    assert_one_sequence_of_the_servers_ids(path, "tinker", model_server)
    datums = [
        tinker.Datum(
            model_input=tinker.ModelInput.model_validate(line["model_input"]),
            loss_fn_inputs={k: tinker.TensorData(**v) for k, v in line["loss_fn_inputs"].items()},
        )
        for line in map(json.loads, path.read_text().splitlines())
    ]
    request = ForwardBackwardRequest(
        forward_backward_input=ForwardBackwardInput(data=datums, loss_fn="importance_sampling"),
        model_id="m",
        seq_id=1,
    )
    assert len(forward_backward_request_to_proto(request).data) == 1


async def test_verifiers_loads_translated_calls(
    run_dir: Path, tmp_path: Path, model_server: ScriptedModelServer
) -> None:
    import verifiers.v1 as vf

    path = export(run_dir, "verifiers", tmp_path / "v.jsonl")
    assert_one_sequence_of_the_servers_ids(path, "verifiers", model_server)
    [trace] = [vf.WireTrace.model_validate_json(x) for x in path.read_text().splitlines()]
    [branch] = trace.branches
    assert branch.token_ids == server_sequence(model_server)[0]
