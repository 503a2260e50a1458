"""Fleet rollouts as training data: the harness records each model call's finish
reason, so ``agentkit export``'s DAPO overlong filter masks a rollout whose last
reply was cut off for length (a real AgentEnv run directory, the real CLI)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from fleet_helpers import SOLUTIONS, TASKS_JSON

from agentkit import AgentEnv

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")

EXPORT = [sys.executable, "-m", "agentkit", "export"]
CANCEL, ROOM = "cancel-grace-march", "room-202-back-in-service"
LIST_ROOMS = '<tool_call>{"name": "list_rooms", "arguments": {}}</tool_call>'


def reply(prompt_text: str, turn: int, content: str, finish: str | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"content": content}
    if finish is not None:
        body["finish_reason"] = finish
    return {"match": {"any_message_contains": prompt_text, "turn": turn}, "reply": body}


SCRIPT = {
    "rules": [
        # cut off for length on the first reply only, then a normal <done>: not overlong
        reply("Cancel Grace Hopper", 0, SOLUTIONS[CANCEL][0], "length"),
        reply("Cancel Grace Hopper", 1, "Done. <done>"),
        # the right tool call, a look at the rooms, then a last reply cut off for length
        # (max_turns=3 ends it; a call every turn, so the verifier runs, as in Fleet's env)
        reply("Room 202", 0, SOLUTIONS[ROOM][0]),
        reply("Room 202", 1, LIST_ROOMS),
        reply(
            "Room 202", 2, LIST_ROOMS + " Room 202 is available again. To summarise every", "length"
        ),
    ],
    "default": {"content": "<done>"},
}


def test_fleet_rollout_cut_off_for_length_is_masked_by_export(
    model_server: Any, tmp_path: Path
) -> None:
    model_server.set_script(SCRIPT)
    env = AgentEnv.from_names(f"fleet:{TASKS_JSON}", "fleet-tool-call", max_turns=3)
    run_dir = tmp_path / "run"
    env.run(
        model="scripted",
        base_url=model_server.base_url,
        task_ids=[f"fleet:{CANCEL}", f"fleet:{ROOM}"],
        out=run_dir,
        concurrency=2,
    )
    rollouts = {
        r["task_id"]: r
        for r in map(json.loads, (run_dir / "rollouts.jsonl").read_text().splitlines())
    }
    # one finish reason per model call, the last one as stop_reason
    cancel_raw, room_raw = rollouts[f"fleet:{CANCEL}"]["raw"], rollouts[f"fleet:{ROOM}"]["raw"]
    assert cancel_raw["finish_reasons"] == ["length", "stop"]
    assert cancel_raw["stop_reason"] == "stop" and cancel_raw["done_reason"] == "agent_done"
    assert room_raw["finish_reasons"] == ["stop", "stop", "length"]
    assert room_raw["stop_reason"] == "length" and room_raw["done_reason"] == "max_turns"
    # both solved the task: the mask depends on how the last reply stopped, not on the reward
    assert rollouts[f"fleet:{CANCEL}"]["reward"] == 1.0
    assert rollouts[f"fleet:{ROOM}"]["reward"] == 1.0

    out = tmp_path / "train.jsonl"
    done = subprocess.run(
        [*EXPORT, str(run_dir), "--format", "jsonl", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "wrote 2 training records" in done.stdout
    records = {r["task_id"]: r for r in map(json.loads, out.read_text().splitlines())}
    room, cancel = records[f"fleet:{ROOM}"], records[f"fleet:{CANCEL}"]
    assert room["stop_reason"] == "length"
    assert room["overlong"] is True and room["loss_mask"] == 0.0
    assert cancel["stop_reason"] == "stop"
    assert cancel["overlong"] is False and cancel["loss_mask"] == 1.0
    # the masked record still carries the whole conversation
    assert room["completion"][0]["content"] == SOLUTIONS[ROOM][0]
    assert room["completion"][-1]["content"].endswith("To summarise every")

    # with the filter off, nothing is masked
    unfiltered = tmp_path / "unfiltered.jsonl"
    done = subprocess.run(
        [*EXPORT, str(run_dir), "--out", str(unfiltered), "--no-overlong-filter"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    rows = [json.loads(line) for line in unfiltered.read_text().splitlines()]
    assert all(r["loss_mask"] == 1.0 and not r["overlong"] for r in rows)


def test_token_ids_and_logprobs_are_recorded_and_exported_with_per_token_masks(
    model_server: Any, tmp_path: Path
) -> None:
    """With ``-H token_ids=true`` the harness asks for vLLM's token fields; the run
    directory then holds token-level data and ``agentkit export`` writes it with a
    per-token loss mask: 1 on the model's tokens, 0 on the observations'."""
    from agentkit.testing import tokens

    actions = SOLUTIONS[CANCEL]
    model_server.set_script(
        {
            "rules": [
                {"match": {"turn": i}, "reply": {"content": a}} for i, a in enumerate(actions)
            ],
            "default": {"content": "<done>"},
        }
    )
    env = AgentEnv.from_names(f"fleet:{TASKS_JSON}", "fleet-tool-call", token_ids=True)
    run_dir = tmp_path / "run"
    env.run(
        model="scripted", base_url=model_server.base_url, task_ids=[f"fleet:{CANCEL}"], out=run_dir
    )
    (rollout,) = map(json.loads, (run_dir / "rollouts.jsonl").read_text().splitlines())
    assert rollout["reward"] == 1.0
    raw = rollout["raw"]
    body = model_server.chat_requests[0].body
    assert body["return_token_ids"] is True and body["logprobs"] is True
    system, user, _, observation = (m["content"] for m in rollout["messages"][:4])
    prompt = f"<|system|>{system}\n<|user|>{user}\n<|assistant|>"
    assert tokens.decode(raw["prompt_token_ids"]) == prompt
    # completion: reply 1, then what the second prompt adds (the observation), reply 2,
    # each reply ending with the end-of-turn token it was sampled with
    end = tokens.encode(tokens.END_OF_TURN)
    first, second = tokens.encode(actions[0]) + end, tokens.encode(actions[1]) + end
    ids, mask = raw["completion_token_ids"], raw["completion_mask"]
    assert ids[: len(first)] == first and ids[-len(second) :] == second
    between = len(ids) - len(first) - len(second)
    assert mask == [1] * len(first) + [0] * between + [1] * len(second)
    assert tokens.decode(ids[len(first) : -len(second)]) == (
        f"\n<|user|>{observation}\n<|assistant|>"
    )
    lps = raw["completion_logprobs"]
    assert len(lps) == len(ids) and [lp < 0 for lp in lps] == [m == 1 for m in mask]

    out = tmp_path / "train.jsonl"
    done = subprocess.run(
        [*EXPORT, str(run_dir), "--out", str(out), "--batch-normalize"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    (record,) = map(json.loads, out.read_text().splitlines())
    assert record["prompt_token_ids"] == raw["prompt_token_ids"]
    assert record["completion_token_ids"] == ids and record["completion_mask"] == mask
    assert record["completion_logprobs"] == lps
    assert record["overlong"] is False and record["loss_mask"] == 1.0
