"""Whose calls a calls file holds: every call is written with its run's id, and the
export and the reader use a rollout's calls file only when each of its calls names that
rollout and was recorded by that run (docs/run-directory.md, "Whose calls").

Real runs: ``agentkit run`` of the JSONL arithmetic set with the chat harness against
the scripted model server, token ids on. Run B's model answers ``6 * 7`` with 41 where
A's answers 42, so B's calls of that rollout carry other tokens.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from _view import arithmetic_run_args, arithmetic_script, run_agentkit

import agentkit.runs
from agentkit.rundir import RunDirError
from agentkit.testing.model_server import ScriptedModelServer

#: The rollout whose calls differ between A and B.
MUL = "mul-1-7a66880a-r0"
ADD = "add-1-0473fb7b-r0"


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("owners")
    made = {}
    for name, script in (("A", arithmetic_script()), ("B", arithmetic_script(wrong="6 * 7"))):
        with ScriptedModelServer(script) as server:
            out = folder / name
            done = run_agentkit(*arithmetic_run_args(out, server.base_url, "--token-ids"))
            assert done.returncode == 0, done.stderr
            made[name] = out
    return made


def copy(run: Path, to: Path) -> Path:
    shutil.copytree(run, to)
    return to


def export(run: Path, *extra: str) -> tuple[Any, dict[str, dict[str, Any]], str]:
    """``agentkit export RUN`` to a file: (the process, its records by rollout, stderr)."""
    out = run.parent / f"{run.name}.train.jsonl"
    done = run_agentkit("export", str(run), "-o", str(out), *extra)
    records = {}
    if done.returncode == 0:
        for line in out.read_text().splitlines():
            record = json.loads(line)
            records[record["rollout_id"]] = record
    return done, records, done.stderr


def run_id(run: Path) -> str:
    value = json.loads((run / "manifest.json").read_text())["run_id"]
    assert isinstance(value, str)
    return value


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text().splitlines()]


def test_every_call_carries_its_runs_id(runs: dict[str, Path]) -> None:
    ids = {name: run_id(run) for name, run in runs.items()}
    assert ids["A"] != ids["B"] and all(len(v) == 32 for v in ids.values())
    for name, run in runs.items():
        files = sorted((run / "calls").iterdir())
        assert len(files) == 10
        for path in files:
            for line in lines(path):
                assert line["run_id"] == ids[name]
                assert line["rollout_id"] == path.stem
    for call in agentkit.runs.open(runs["A"]).calls(MUL):
        assert call.run_id == ids["A"]


def test_a_calls_file_copied_from_another_run_is_not_exported(
    runs: dict[str, Path], tmp_path: Path
) -> None:
    """B's calls of a rollout copied into A under the same rollout id: the rollout's
    record carries no token ids (not B's model's tokens under A's reward), is listed as
    incomplete with the file and why, and --require-token-ids refuses the run."""
    _, original, _ = export(runs["A"])
    _, other, _ = export(runs["B"])
    a_mul, b_mul = original[MUL], other[MUL]
    assert a_mul["completion_token_ids"] != b_mul["completion_token_ids"]
    assert a_mul["reward"] == 1.0 and b_mul["reward"] == 0.0

    mixed = copy(runs["A"], tmp_path / "A")
    shutil.copyfile(runs["B"] / "calls" / f"{MUL}.jsonl", mixed / "calls" / f"{MUL}.jsonl")
    done, records, err = export(mixed)
    assert done.returncode == 0, err
    record = records[MUL]
    assert record["reward"] == 1.0
    assert record["prompt_token_ids"] is None and record["completion_token_ids"] is None
    assert record["token_source"] == "none"
    (issue,) = record["token_issues"]
    path = mixed / "calls" / f"{MUL}.jsonl"
    assert issue["reason"] == (
        f"{path}: call 0 was recorded by run {run_id(runs['B'])!r}; this run's id is "
        f"{run_id(runs['A'])!r}: the file is another run's; its calls are left out"
    )
    assert f"{MUL}: {issue['reason']}" in err and "1 of 10 rollouts" in err
    for rollout_id, same in original.items():  # the other rollouts: as before
        if rollout_id != MUL:
            assert records[rollout_id] == same
    refused, _, err = export(mixed, "--require-token-ids")
    assert refused.returncode == 2 and MUL in err and "another run's" in err
    assert "Traceback" not in err
    # the reader says the same, naming the file; show and the viewer's rollout page use it
    with pytest.raises(RunDirError, match="the file is another run's"):
        agentkit.runs.open(mixed).calls(MUL)
    shown = run_agentkit("show", str(mixed), "--rollout", MUL, "--calls")
    assert shown.returncode == 2 and f"{path}: call 0 was recorded by run" in shown.stderr
    shown = run_agentkit("show", str(mixed), "--rollout", MUL)
    assert shown.returncode == 0, shown.stderr
    assert "Token ids: incomplete: " in shown.stdout and "another run's" in shown.stdout


def test_a_file_naming_another_rollout_is_not_that_rollouts(
    runs: dict[str, Path], tmp_path: Path
) -> None:
    """Within one run: another rollout's whole file under this rollout's name, and a
    file whose lines were edited to name another rollout."""
    mixed = copy(runs["A"], tmp_path / "A")
    shutil.copyfile(mixed / "calls" / f"{MUL}.jsonl", mixed / "calls" / f"{ADD}.jsonl")
    sub = "sub-1-f66ca8af-r0"
    edited = mixed / "calls" / f"{sub}.jsonl"
    edited.write_text("".join(json.dumps({**x, "rollout_id": ADD}) + "\n" for x in lines(edited)))
    done, records, err = export(mixed)
    assert done.returncode == 0, err
    for rollout_id, named in ((ADD, MUL), (sub, ADD)):
        record = records[rollout_id]
        assert record["completion_token_ids"] is None
        (issue,) = record["token_issues"]
        assert issue["reason"] == (
            f"{mixed / 'calls' / f'{rollout_id}.jsonl'}: call 0 is of rollout {named!r}, not "
            f"{rollout_id!r}: the file is another rollout's; its calls are left out"
        )
    assert "2 of 10 rollouts have incomplete token ids" in err
    with pytest.raises(RunDirError, match="the file is another rollout's"):
        agentkit.runs.open(mixed).calls(sub)


def test_resume_keeps_the_runs_id(runs: dict[str, Path], tmp_path: Path) -> None:
    """A resumed run (a larger -n) keeps its id: old and new calls files are its own."""
    run = copy(runs["A"], tmp_path / "A")
    with ScriptedModelServer(arithmetic_script()) as server:
        done = run_agentkit(
            "run", "--resume", str(run), "-n", "2", "--base-url", server.base_url, "--no-progress"
        )
        assert done.returncode == 0, done.stderr
    assert run_id(run) == run_id(runs["A"])
    files = sorted((run / "calls").iterdir())
    assert len(files) == 20
    assert {x["run_id"] for path in files for x in lines(path)} == {run_id(run)}
    done, records, err = export(run, "--require-token-ids")
    assert done.returncode == 0, err
    assert len(records) == 20


def test_a_run_written_before_runs_had_ids_is_read_as_before(
    runs: dict[str, Path], tmp_path: Path
) -> None:
    """No run_id in the manifest nor in its calls (an older agentkit's run): exported
    as before, and resuming it keeps it without one."""
    _, original, _ = export(runs["A"])
    old = copy(runs["A"], tmp_path / "old")
    manifest = json.loads((old / "manifest.json").read_text())
    del manifest["run_id"]
    (old / "manifest.json").write_text(json.dumps(manifest))
    for path in (old / "calls").iterdir():
        path.write_text(
            "".join(
                json.dumps({k: v for k, v in x.items() if k != "run_id"}) + "\n"
                for x in lines(path)
            )
        )
    done, records, err = export(old, "--require-token-ids")
    assert done.returncode == 0, err
    assert records == original
    assert agentkit.runs.open(old).calls(MUL)[0].run_id is None
    with ScriptedModelServer(arithmetic_script()) as server:
        done = run_agentkit(
            "run", "--resume", str(old), "-n", "2", "--base-url", server.base_url, "--no-progress"
        )
        assert done.returncode == 0, done.stderr
    assert "run_id" not in json.loads((old / "manifest.json").read_text())
    assert {x.get("run_id") for p in (old / "calls").iterdir() for x in lines(p)} == {None}
    done, records, err = export(old, "--require-token-ids")
    assert done.returncode == 0, err
    assert len(records) == 20
    # a calls file of a run with an id copied into the old run is not its own either
    shutil.copyfile(runs["B"] / "calls" / f"{MUL}.jsonl", old / "calls" / f"{MUL}.jsonl")
    done, records, err = export(old)
    assert done.returncode == 0, err
    assert records[MUL]["token_issues"][0]["reason"].endswith(
        f"call 0 was recorded by run {run_id(runs['B'])!r}; this run's id is none (an older "
        "run): the file is another run's; its calls are left out"
    )


def test_a_calls_file_leading_out_of_the_run_is_not_read(
    runs: dict[str, Path], tmp_path: Path
) -> None:
    """A rollout's calls file that is a link to a file outside the run, or under a calls/
    that is a link out of it, is refused by the export (which leaves that rollout out:
    tests/test_export_damaged.py) and the reader, naming the rollout and the file, even
    when it holds the rollout's own calls; a link that stays inside the run is read as the
    file itself."""
    _, original, _ = export(runs["A"])
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    own = shutil.copyfile(runs["A"] / "calls" / f"{MUL}.jsonl", outside / f"{MUL}.jsonl")

    linked = copy(runs["A"], tmp_path / "linked")
    (linked / "calls" / f"{MUL}.jsonl").unlink()
    (linked / "calls" / f"{MUL}.jsonl").symlink_to(own)
    folder = copy(runs["A"], tmp_path / "folder")
    shutil.move(folder / "calls", outside / "calls")
    (folder / "calls").symlink_to(outside / "calls", target_is_directory=True)
    for run, status in ((linked, 0), (folder, 2)):  # folder: no rollout is left to export
        done, records, err = export(run)
        assert done.returncode == status and "Traceback" not in err
        assert MUL not in records
        assert (
            f"{run / 'rollouts.jsonl'}: rollout {MUL}: calls_file 'calls/{MUL}.jsonl' "
            "is outside the run directory" in err
        ), err
        with pytest.raises(RunDirError, match="is outside the run directory"):
            agentkit.runs.open(run).calls(MUL)

    within = copy(runs["A"], tmp_path / "within")
    (within / "kept").mkdir()
    shutil.move(within / "calls" / f"{MUL}.jsonl", within / "kept" / f"{MUL}.jsonl")
    (within / "calls" / f"{MUL}.jsonl").symlink_to(Path("..") / "kept" / f"{MUL}.jsonl")
    done, records, err = export(within)
    assert done.returncode == 0, err
    assert records == original
    assert [c.index for c in agentkit.runs.open(within).calls(MUL)] == [
        c.index for c in agentkit.runs.open(runs["A"]).calls(MUL)
    ]
