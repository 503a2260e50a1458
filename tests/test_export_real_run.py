"""Exports of what a real run recorded: ``agentkit run ... --token-ids`` (the chat
harness, through the model proxy, against the scripted model server), then
``agentkit export`` to every format.

The other export tests read calls files the tests write themselves
(tests/_calls_runs.py); here every id is one the proxy recorded from the server's
answers, and the exports are held against the server's own log of what it sent
(``agentkit.testing.programs.assert_exports_carry_the_server_tokens``): three
calls, the first two one sequence, the third a prefix break (its prompt shows the
first call's tool call as JSON, not as sampled). The model thinks before its tool
call, under current vLLM's field name (``reasoning``): the verifiers and JSONL
exports keep it. The trainers' own packages load such files in the ``trainers``
nox session.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

import agentkit.runs
from agentkit.testing import tokens
from agentkit.testing.model_server import ScriptedModelServer
from agentkit.testing.programs import (
    assert_calls_carry_the_server_tokens,
    assert_exports_carry_the_server_tokens,
)

THINKING = "The files first."
SCRIPT = {
    "rules": [
        {
            "match": {"turn": 0},
            "reply": {
                "content": "Listing them.",
                "tool_calls": [{"name": "bash", "arguments": '{"cmd":"ls"}'}],
            },
        },
        {"match": {"turn": 1}, "reply": {"content": "Two files."}},
        # shows turn 0's tool call as JSON, not as sampled: a prefix break; the model
        # thinks first (the chat harness does not send a turn's thinking back, so a turn
        # after one that thought would break the prefix too, as templates that drop
        # earlier turns' thinking do)
        {
            "match": {"turn": 2},
            "reply": {"reasoning": THINKING, "content": "Done.", "tool_calls_in_prompt": "json"},
        },
    ]
}


@pytest.fixture(params=[False, True], ids=["plain", "stream"])
def run_dir(
    request: pytest.FixtureRequest, tmp_path: Path, model_server: ScriptedModelServer
) -> Path:
    tasks = tmp_path / "tasks.jsonl"
    conversation = [{"role": "user", "content": q} for q in ("Files?", "How many?", "Ok?")]
    tasks.write_text(json.dumps({"id": "files", "input": conversation, "target": "Done."}) + "\n")
    model_server.set_script(SCRIPT)
    out = tmp_path / "run"
    stream = ["-H", "stream=true"] if request.param else []
    done = subprocess.run(
        [sys.executable, "-m", "agentkit", "run", f"jsonl:{tasks}", "chat", *stream,
         "--model", "scripted-model", "--base-url", model_server.base_url, "--token-ids",
         "--no-preflight", "--out", str(out)],
        capture_output=True, text=True, check=False, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    return out


def export(run_dir: Path, fmt: str) -> Path:
    out = run_dir / f"export.{fmt}"
    done = subprocess.run(
        [sys.executable, "-m", "agentkit", "export", str(run_dir), "--format", fmt,
         "--out", str(out), "--require-token-ids"],
        capture_output=True, text=True, check=False, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return out


def test_every_format_carries_what_the_server_sent(
    run_dir: Path, model_server: ScriptedModelServer
) -> None:
    run = agentkit.runs.open(run_dir)
    (rollout,) = run.rollouts(0, 1)
    calls = run.calls(rollout.rollout_id)
    assert [c.index for c in assert_calls_carry_the_server_tokens(calls, model_server)] == [0, 1, 2]
    # skyrl, tinker, verifiers: each sequence's ids and logprobs are the server's
    sequences = assert_exports_carry_the_server_tokens(run_dir, rollout.rollout_id, model_server)
    assert sequences == [[0, 1], [2]]

    # the verifiers answer node of call 2 has the model's thinking (vLLM's ``reasoning``)
    (trace,) = [json.loads(x) for x in (run_dir / "export.verifiers").read_text().splitlines()]
    answers = [n["message"] for n in trace["nodes"] if n.get("sampled")]
    assert answers[2]["reasoning_content"] == THINKING
    assert "reasoning_content" not in answers[0] and "reasoning_content" not in answers[1]
    assert answers[0]["tool_calls"][0]["name"] == "bash"
    assert [a.get("content") for a in answers] == ["Listing them.", "Two files.", "Done."]

    # jsonl and parquet: one record per sequence, the same ids
    sent = [r.sent for r in model_server.model_requests]
    lines = [json.loads(x) for x in export(run_dir, "jsonl").read_text().splitlines()]
    assert [r["calls"] for r in lines] == [[0, 1], [2]]
    assert [r["sequence_start"] for r in lines] == ["first", "prefix_break"]
    first, second = lines
    assert first["prompt_token_ids"] == sent[0]["prompt_token_ids"]
    assert first["prompt_token_ids"] + first["completion_token_ids"] == (
        sent[1]["prompt_token_ids"] + sent[1]["completion_token_ids"]
    )
    assert second["prompt_token_ids"] == sent[2]["prompt_token_ids"]
    # as sampled: the thinking between its markers, the answer, the end of the turn
    sampled = ["<think>", THINKING, "</think>", "Done.", tokens.END_OF_TURN]
    assert second["completion_token_ids"] == [i for t in sampled for i in tokens.encode(t)]
    assert all(r["token_source"] == "server" and r["token_issues"] == [] for r in lines)
    table = pq.read_table(export(run_dir, "parquet")).to_pylist()
    assert [row["completion_token_ids"] for row in table] == [
        r["completion_token_ids"] for r in lines
    ]

    # the transcript exports: the run's conversation, its three answers
    (sft,) = [json.loads(x) for x in export(run_dir, "sft-chat").read_text().splitlines()]
    assert [m["role"] for m in sft["messages"]] == ["user", "assistant"] * 3
    function = sft["messages"][1]["tool_calls"][0]["function"]
    assert function == {"name": "bash", "arguments": '{"cmd":"ls"}'}
    (share,) = [json.loads(x) for x in export(run_dir, "sharegpt").read_text().splitlines()]
    assert [t["from"] for t in share["conversations"]] == [
        "human", "function_call", "human", "gpt", "human", "gpt"
    ]  # fmt: skip
