"""The run directory: manifest, durable rollout lines, torn lines, secrets, summary."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from agentkit import HarnessResult, ListTaskset, Rubric, Task
from agentkit.env import AgentEnv, RolloutRecord, RunDirError
from agentkit.rundir import RunStore

pytestmark = pytest.mark.anyio

SECRET = "sk-test-do-not-store-8c1f0e"


def exact(output: str | None, target: Any) -> float:
    return 1.0 if output == str(target) else 0.0


class LeakyHarness:
    """Puts the API key it was given into its output, error, messages, events and raw."""

    async def run(self, task: Task, context: Any = None, on_event: Any = None) -> HarnessResult:
        key = context.resolved_api_key
        from agentkit import EventRecorder

        rec = EventRecorder(task.task_id, context.rollout_id, on_event)
        await rec.emit("model.request", headers={"authorization": f"Bearer {key}"})
        return HarnessResult(
            status="failed" if task.item_id == "1" else "completed",
            output=str(task.target),
            error=f"server said: bad key {key}" if task.item_id == "1" else None,
            error_kind="agent_error" if task.item_id == "1" else None,
            messages=[{"role": "user", "content": f"key {key}"}],
            events=rec.events,
            raw={"key": key},
        )


def make_env() -> AgentEnv:
    ts = ListTaskset(
        "ts",
        [Task(task_id=f"ts:{i}", input=f"q{i}", target=str(i)) for i in range(3)],
        default_grading_spec=Rubric([exact]),
    )
    return AgentEnv(ts, LeakyHarness())


async def test_run_directory_layout_and_manifest(tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.setenv("MY_KEY", SECRET)
    run = tmp_path / "run"
    results = await make_env().evaluate(
        rollouts_per_task=2, out=run, model="m1", api_key_env="MY_KEY", concurrency=2
    )
    assert results.run_dir == run
    names = sorted(p.name for p in run.iterdir())
    assert names == [
        ".lock",
        "events",
        "groups.jsonl",
        "manifest.json",
        "rollouts.jsonl",
        "summary.json",
        "tasks.jsonl",
    ]
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["kind"] == "agentkit.run" and manifest["schema_version"] == 2
    assert manifest["agentkit_version"]
    assert manifest["context"] == {
        "model": "m1",
        "base_url": None,
        "api_key_env": "MY_KEY",
        "sampling_args": {},
        "headers": {},
        "limits": {
            "max_turns": None,
            "max_tokens": None,
            "token_limit": None,
            "cost_limit": None,
            "message_limit": None,
        },
    }
    assert manifest["plan"]["task_ids"] == ["ts:0", "ts:1", "ts:2"]
    assert manifest["rubric"] == make_env().describe_rubric()
    assert manifest["plugins"][0]["distribution"] == "agentkit"
    summary = json.loads((run / "summary.json").read_text())
    assert summary["complete"] is True and summary["finished"] == 6
    groups = [json.loads(x) for x in (run / "groups.jsonl").read_text().splitlines()]
    assert len(groups) == 3 and all(len(g["advantages"]) == 2 for g in groups)
    assert len(list((run / "events").iterdir())) == 6


async def test_the_api_key_is_never_written_anywhere(tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.setenv("MY_KEY", SECRET)
    run = tmp_path / "run"
    results = await make_env().evaluate(out=run, api_key_env="MY_KEY")
    assert results.rollouts[0].messages  # the harness did see (and echo) the key
    for path in run.rglob("*"):
        if path.is_file():
            assert SECRET not in path.read_text(errors="replace"), path
    text = (run / "rollouts.jsonl").read_text()
    assert "***" in text


async def test_an_existing_run_is_not_overwritten(tmp_path: Path) -> None:
    run = tmp_path / "run"
    await make_env().evaluate(out=run)
    with pytest.raises(RunDirError, match="already holds a run; resume it"):
        await make_env().evaluate(out=run)


def record(i: int) -> RolloutRecord:
    return RolloutRecord(
        rollout_id=f"r{i}",
        task_id=f"ts:{i}",
        example_id=str(i),
        rollout_index=0,
        group=i,
        status="completed",
        reward=1.0,
    )


def test_each_line_is_durable_and_a_torn_last_line_is_dropped(tmp_path: Path) -> None:
    store = RunStore(tmp_path)
    store.open()
    for i in range(3):
        store.append_rollout(record(i))
    store.close()
    path = tmp_path / "rollouts.jsonl"
    good = path.read_bytes()
    assert good.count(b"\n") == 3
    # simulate kill -9 in the middle of the fourth write
    fourth = json.dumps(record(3).to_json()).encode()
    path.write_bytes(good + fourth[: len(fourth) // 2])
    records, note = RunStore(tmp_path).load_rollouts(repair=False)
    assert [r.rollout_id for r in records] == ["r0", "r1", "r2"]
    assert note and "half-written last line" in note
    assert path.read_bytes() != good  # repair=False leaves the file alone
    records, note = RunStore(tmp_path).load_rollouts(repair=True)
    assert path.read_bytes() == good and len(records) == 3


def test_a_complete_but_corrupt_last_line_is_also_dropped(tmp_path: Path) -> None:
    path = tmp_path / "rollouts.jsonl"
    line = json.dumps(record(0).to_json())
    path.write_text(line + "\n" + '{"type": "rollout", "rollout_id"\n')
    records, note = RunStore(tmp_path).load_rollouts(repair=True)
    assert len(records) == 1 and note and "corrupt last line" in note
    assert path.read_text() == line + "\n"


def test_corruption_before_the_last_line_is_an_error_naming_the_line(tmp_path: Path) -> None:
    path = tmp_path / "rollouts.jsonl"
    line = json.dumps(record(0).to_json())
    path.write_text(line + "\nnot json at all\n" + line.replace("r0", "r1") + "\n")
    before = path.read_bytes()
    with pytest.raises(RunDirError, match="line 2 is corrupt"):
        RunStore(tmp_path).load_rollouts(repair=True)
    assert path.read_bytes() == before  # nothing already finished is lost


def test_manifest_problems_are_clear(tmp_path: Path) -> None:
    with pytest.raises(RunDirError, match=r"no manifest\.json"):
        RunStore(tmp_path).read_manifest()
    (tmp_path / "manifest.json").write_text("{")
    with pytest.raises(RunDirError, match="not valid JSON"):
        RunStore(tmp_path).read_manifest()
    (tmp_path / "manifest.json").write_text(
        json.dumps({"kind": "agentkit.run", "schema_version": 99})
    )
    with pytest.raises(RunDirError, match="schema_version 99 is not supported"):
        RunStore(tmp_path).read_manifest()


def test_one_run_directory_one_writer(tmp_path: Path) -> None:
    first = RunStore(tmp_path)
    first.open()
    try:
        with pytest.raises(RunDirError, match="another agentkit run is using"):
            RunStore(tmp_path).open()
    finally:
        first.close()
    again = RunStore(tmp_path)
    again.open()
    again.close()


def test_appends_use_one_write_per_line(tmp_path: Path, monkeypatch: Any) -> None:
    """Each line goes out in one write(2) on a file opened with O_APPEND, so a line is never
    split between writes and several writers' lines could not interleave inside a line."""
    import fcntl

    writes: list[tuple[int, int]] = []
    real_write = os.write

    def counting_write(fd: int, data: Any) -> int:
        writes.append((fd, len(data)))
        return real_write(fd, data)

    store = RunStore(tmp_path)
    store.open()
    fd = store._rollouts_fd
    assert fd is not None and fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_APPEND
    big = record(0)
    big.output = "x" * 200_000
    line = (store.dumps(big.to_json()) + "\n").encode()
    monkeypatch.setattr(os, "write", counting_write)
    store.append_rollout(big)
    monkeypatch.undo()
    store.close()
    assert writes == [(fd, len(line))]
    records, note = RunStore(tmp_path).load_rollouts(repair=False)
    assert note is None and records[0].output == "x" * 200_000


@pytest.mark.parametrize("key", ["e", "EMPTY", "task_id", "rollout"])
async def test_a_placeholder_api_key_does_not_corrupt_the_run_directory(
    tmp_path: Path, monkeypatch: Any, key: str
) -> None:
    """Local servers take any key ("EMPTY", "x"...): redaction must not rewrite JSON syntax."""
    monkeypatch.setenv("MY_KEY", key)
    run = tmp_path / "run"
    await make_env().evaluate(rollouts_per_task=2, out=run, api_key_env="MY_KEY")
    for name in ("manifest.json", "summary.json"):
        json.loads((run / name).read_text())
    for path in [run / "rollouts.jsonl", run / "groups.jsonl", *(run / "events").iterdir()]:
        for line in path.read_text().splitlines():
            json.loads(line)
    records, note = RunStore(run).load_rollouts(repair=False)
    assert note is None and len(records) == 6
    assert {r.task_id for r in records} == {"ts:0", "ts:1", "ts:2"}
    # a placeholder is not a credential: the data is kept as the harness gave it
    assert {r.messages[0]["content"] for r in records} == {f"key {key}"}


async def test_a_key_with_json_escapes_is_redacted(tmp_path: Path, monkeypatch: Any) -> None:
    key = 'sk-quote"and\\backslash-1234'
    monkeypatch.setenv("MY_KEY", key)
    run = tmp_path / "run"
    await make_env().evaluate(out=run, api_key_env="MY_KEY")
    escaped = json.dumps(key)[1:-1]
    for path in run.rglob("*"):
        if path.is_file():
            text = path.read_text(errors="replace")
            assert key not in text and escaped not in text, path
    records, _ = RunStore(run).load_rollouts(repair=False)
    assert records[0].messages[0]["content"] == "key ***"


def test_public_url_hides_credentials_only() -> None:
    from agentkit._redact import public_url

    assert public_url("http://127.0.0.1:8000/v1") == "http://127.0.0.1:8000/v1"
    assert public_url("https://bob:pw@proxy.example/v1") == "https://bob:***@proxy.example/v1"
    assert public_url("https://tok123@proxy.example/v1") == "https://***@proxy.example/v1"
    assert public_url("https://h/v1?api-key=abc&x=1") == "https://h/v1?api-key=***&x=1"
    assert public_url("https://h/v1?x=1&y=2") == "https://h/v1?x=1&y=2"
    assert public_url(None) is None
