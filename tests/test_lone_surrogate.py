"""A model reply holding a lone surrogate loses nothing: the run writes it as U+FFFD.

JSON can say ``"\\ud800"`` (half of a surrogate pair, without the other half): it
decodes to a Python string that UTF-8 cannot hold. A model server that sends one
used to crash the whole run at the first write of the reply (the rollout's events
file) and lose its rollouts. The run directory now writes such text as U+FFFD, the
replacement character, names the file and the place in a warning, and keeps
everything else as it came; every file stays UTF-8 strict JSON that every reader
(the calls file's orjson parser, the exports) reads.

The run is real: the chat harness through the model proxy against the scripted
model server, whose scripted reply body is sent as JSON text holding the escape.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import orjson
import pytest

import agentkit.runs
from agentkit.env import AgentEnv
from agentkit.testing.model_server import ScriptedModelServer
from agentkit.training import export_run

pytestmark = pytest.mark.anyio

#: The reply, as a chat completion whose text holds a lone surrogate.
BODY = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "created": 0,
    "model": "m",
    "choices": [
        {
            "index": 0,
            "message": {"role": "assistant", "content": "half \ud800 of a pair"},
            "finish_reason": "stop",
        }
    ],
    "usage": {"prompt_tokens": 3, "completion_tokens": 5, "total_tokens": 8},
}
WRITTEN = "half \ufffd of a pair"


async def test_a_reply_with_a_lone_surrogate_is_written_as_the_replacement_character(
    tmp_path: Path, model_server: ScriptedModelServer, caplog: pytest.LogCaptureFixture
) -> None:
    assert '"half \\ud800 of a pair"' in json.dumps(BODY)  # what the server sends
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(json.dumps({"id": "say", "input": "Say it", "target": "x"}) + "\n")
    model_server.set_script({"default": {"body": BODY}})
    run_dir = tmp_path / "run"
    with caplog.at_level(logging.WARNING, logger="agentkit"):
        results = await AgentEnv.from_names(f"jsonl:{tasks}", "chat").evaluate(
            model="m", base_url=model_server.base_url, out=run_dir
        )
    [rollout] = results.rollouts
    assert rollout.status == "completed", rollout.error

    # the rollout is saved, and every file of the run is UTF-8 strict JSON
    for path in sorted(run_dir.rglob("*.json*")):
        text = path.read_bytes().decode("utf-8")  # strict: a surrogate would raise
        for line in text.splitlines() if path.suffix == ".jsonl" else [text]:
            orjson.loads(line)  # orjson refuses a lone surrogate, escaped or not
    run = agentkit.runs.open(run_dir)
    [stored] = run.rollouts()
    assert stored.rollout_id == rollout.rollout_id and stored.status == "completed"
    assert stored.output == WRITTEN
    assert stored.messages[-1]["content"] == WRITTEN
    replies = [
        s.data["message"]["content"] for s in run.steps(stored.rollout_id) if "message" in s.data
    ]
    assert replies == [WRITTEN]
    [call] = run.calls(stored.rollout_id)
    assert call.response["choices"][0]["message"]["content"] == WRITTEN
    # only the surrogate changed: the rest of the reply is as the server sent it
    assert call.response["usage"] == BODY["usage"]

    # each file that held it says so, with the place
    said = [r.getMessage() for r in caplog.records if "lone surrogate" in r.getMessage()]
    calls_file = run_dir / "calls" / f"{stored.rollout_id}.jsonl"
    assert any(
        f"{calls_file}: 1 lone surrogate(s) at [0].response.choices[0].message.content" in m
        for m in said
    ), said
    assert any("rollouts.jsonl" in m and "written as U+FFFD" in m for m in said), said

    # and the run exports
    out = tmp_path / "train.jsonl"
    summary = export_run(run_dir, out)
    assert summary.rollouts == 1
    [record] = [json.loads(x) for x in out.read_text().splitlines()]
    assert record["completion"][-1]["content"] == WRITTEN
