"""A line of rollouts.jsonl whose fields are of the wrong type (``messages`` a string,
``reward`` a list, ...) is refused where it is read, naming the file, the line and the
field and what was expected, as a corrupt line is: ``agentkit show`` and the viewer's API
say so (no traceback), ``agentkit export`` leaves that rollout out and exports the others,
``agentkit run --resume`` refuses with the same words (docs/run-directory.md, "A damaged
line").

Real runs: ``agentkit run`` of the JSONL arithmetic set with the chat harness against the
scripted model server; each test damages a copy in a way a hostile or hand-edited file
would, then runs the real CLI on it in fresh processes.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from _view import arithmetic_run_args, arithmetic_script, raw_get, run_agentkit, view_server

from agentkit.testing.model_server import ScriptedModelServer

#: The line (from 0) each test damages: not the last, so never taken for a torn write.
LINE = 2

#: field: (a hostile value, what the message says was expected)
DAMAGES: dict[str, tuple[Any, str]] = {
    "messages": ("hello", "field 'messages': expected a list of objects, not a string"),
    "reward": ([1], "field 'reward': expected a number or null, not a list"),
    "timings": (5, "field 'timings': expected an object of numbers (or null), not a number"),
    "task_id": (7, "field 'task_id': expected a string, not a number"),
    "usage": (
        {"input_tokens": float("inf")},
        "field 'usage': expected an object of token counts and cost (numbers), not an object "
        "holding a value of another type",
    ),
    "rewards": (
        {"core.correct": "yes"},
        "field 'rewards': expected an object of numbers (or null) by metric, not an object "
        "holding a value of another type",
    ),
}


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("hostile") / "run"
    with ScriptedModelServer(arithmetic_script()) as server:
        done = run_agentkit(*arithmetic_run_args(out, server.base_url))
        assert done.returncode == 0, done.stderr
    return out


def damaged(run: Path, where: Path, field: str) -> str:
    """A copy of ``run`` at ``where`` whose line LINE has the hostile ``field``; its id."""
    shutil.copytree(run, where)
    path = where / "rollouts.jsonl"
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    rollout_id: str = lines[LINE]["rollout_id"]
    lines[LINE][field] = DAMAGES[field][0]
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return rollout_id


@pytest.mark.parametrize("field", list(DAMAGES))
def test_a_hostile_field_is_named_by_every_reader(field: str, run: Path, tmp_path: Path) -> None:
    copy = tmp_path / "run"
    rollout_id = damaged(run, copy, field)
    where = f"{copy / 'rollouts.jsonl'}: line {LINE + 1}"
    expected = DAMAGES[field][1]

    for args in (["show", str(copy)], ["show", str(copy), "--rollout", rollout_id]):
        done = run_agentkit(*args)
        assert done.returncode == 2, (args, done.stdout, done.stderr)
        assert "Traceback" not in done.stdout + done.stderr, done.stderr
        assert done.stderr.startswith(f"Error: {where} is not a rollout record"), done.stderr
        assert expected in done.stderr

    out = tmp_path / "train.jsonl"
    done = run_agentkit("export", str(copy), "-o", str(out))
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    exported = [json.loads(x)["rollout_id"] for x in out.read_text().splitlines()]
    assert len(exported) == 9 and rollout_id not in exported
    assert f"{where} is corrupt ({expected})" in done.stderr

    done = run_agentkit("run", "--resume", str(copy), "--no-progress")
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert f"{where} is corrupt ({expected}); it is not the last line" in done.stderr


def test_the_viewer_names_a_hostile_field(run: Path, tmp_path: Path) -> None:
    """The viewer's API answers 422 with the same message: for a rollout whose transcript
    is hostile (read when its page asks for it), and for the rollouts of a run one of whose
    small fields is."""
    folder = tmp_path / "runs"
    rollout_id = damaged(run, folder / "messages", "messages")
    damaged(run, folder / "reward", "reward")
    asked = {
        "messages": f"/api/run/messages/rollout/{rollout_id}",
        "reward": "/api/run/reward/rollouts",
    }
    with view_server(folder) as url:
        for field, path in asked.items():
            where = f"{folder / field / 'rollouts.jsonl'}: line {LINE + 1} is not a rollout record"
            status, body = raw_get(url, path)
            assert status == 422, (path, status, body)
            error = json.loads(body)["error"]
            assert error.startswith(where) and DAMAGES[field][1] in error, error


def test_a_hostile_events_line_is_named_by_show(run: Path, tmp_path: Path) -> None:
    """An events file whose line is not an event, or has a field of the wrong type: ``agentkit
    show --rollout`` names the file, the line and the field (no traceback)."""
    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    rollout_id = json.loads((copy / "rollouts.jsonl").read_text().splitlines()[LINE])["rollout_id"]
    path = copy / "events" / f"{rollout_id}.jsonl"
    lines = path.read_text().splitlines()
    for number, bad, expected in (
        (2, {**json.loads(lines[1]), "data": "x"}, "field 'data': expected an object or null"),
        (1, ["not", "an", "event"], "expected an event (a JSON object), not a list"),
    ):
        lines[number - 1] = json.dumps(bad)
        path.write_text("".join(x + "\n" for x in lines))
        done = run_agentkit("show", str(copy), "--rollout", rollout_id)
        assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
        assert done.stderr.startswith(f"Error: {path}: line {number}: {expected}"), done.stderr
