"""A damaged or hostile run directory never stops an export: the rollout whose files
cannot be read is left out with one warning naming the file and why, the others are
exported as usual, and a file outside the run is never opened
(docs/training-data.md, "A damaged run directory").

Real runs: ``agentkit run`` of the JSONL arithmetic set with the chat harness against
the scripted model server, token ids on; each test damages a copy and runs the real
``agentkit export`` on it in a fresh process.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from _view import ROOT, arithmetic_run_args, arithmetic_script, cli_env, run_agentkit

import agentkit.runs
from agentkit import training
from agentkit.rundir import RunDirError
from agentkit.testing.model_server import ScriptedModelServer

#: The rollout each test damages, and one that stays whole.
MUL = "mul-1-7a66880a-r0"

#: ``python -c`` running ``agentkit ARGS`` reporting every file it opens under the folder
#: given first: the export must open nothing there. An audit hook sees what ``open()``
#: opens by path; ``os.open`` (which the run's files are opened with, one name at a time
#: from the run directory's descriptor) is wrapped to report the file it opened, from
#: /proc/self/fd.
AUDITED = """
import os, sys, runpy
watched = os.path.realpath(sys.argv.pop(1))
busy = []
def report(real):
    if real == watched or real.startswith(watched + os.sep):
        sys.stderr.write(f"AUDIT: opened {real}\\n")
def hook(event, args):
    if event != "open" or busy or not isinstance(args[0], (str, bytes, os.PathLike)):
        return
    busy.append(1)
    try:
        report(os.path.realpath(os.fsdecode(args[0])))
    finally:
        busy.pop()
sys.addaudithook(hook)
plain_open = os.open
def os_open(path, flags, mode=0o777, *, dir_fd=None):
    fd = plain_open(path, flags, mode, dir_fd=dir_fd)
    report(os.readlink(f"/proc/self/fd/{fd}"))
    return fd
os.open = os_open
sys.argv[0] = "agentkit"
runpy.run_module("agentkit", run_name="__main__")
"""


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("damaged") / "run"
    with ScriptedModelServer(arithmetic_script()) as server:
        done = run_agentkit(*arithmetic_run_args(out, server.base_url, "--token-ids"))
        assert done.returncode == 0, done.stderr
    return out


@pytest.fixture(scope="module")
def original(run: Path) -> dict[str, dict[str, Any]]:
    done, records = export(run)
    assert done.returncode == 0, done.stderr
    assert len(records) == 10 and MUL in records
    return records


def export(
    run: Path, *extra: str, watch: Path | None = None
) -> tuple[subprocess.CompletedProcess[str], dict[str, dict[str, Any]]]:
    """``agentkit export RUN -o FILE`` in a fresh process (with ``watch``, under the audit
    hook): the process and the records written, by rollout."""
    out = run.parent / f"{run.name}.train.jsonl"
    out.unlink(missing_ok=True)
    args = ["export", str(run), "-o", str(out), *extra]
    command = [sys.executable, "-m", "agentkit", *args]
    if watch is not None:
        command = [sys.executable, "-c", AUDITED, str(watch), *args]
    done = subprocess.run(
        command, cwd=ROOT, env=cli_env(), capture_output=True, text=True, timeout=300
    )
    records: dict[str, dict[str, Any]] = {}
    if out.exists():
        for line in out.read_text().splitlines():
            record = json.loads(line)
            records[record["rollout_id"]] = record
    return done, records


def rollout_lines(run: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in (run / "rollouts.jsonl").read_text().splitlines()]


def write_rollout_lines(run: Path, lines: list[str]) -> None:
    (run / "rollouts.jsonl").write_text("".join(x + "\n" for x in lines))


def relink(run: Path, outside: Path) -> str:
    """calls/MUL.jsonl: a link to a copy of itself outside the run."""
    own = run / "calls" / f"{MUL}.jsonl"
    shutil.copyfile(own, outside / own.name)
    own.unlink()
    own.symlink_to(outside / own.name)
    return f"{run / 'rollouts.jsonl'}: rollout {MUL}: calls_file 'calls/{MUL}.jsonl' is outside "


def record_names_outside(run: Path, outside: Path) -> str:
    """MUL's line in rollouts.jsonl names a calls file outside the run (``../``)."""
    shutil.copyfile(run / "calls" / f"{MUL}.jsonl", outside / f"{MUL}.jsonl")
    name = f"../{outside.name}/{MUL}.jsonl"
    lines = [
        json.dumps({**x, "calls_file": name}) if x["rollout_id"] == MUL else json.dumps(x)
        for x in rollout_lines(run)
    ]
    write_rollout_lines(run, lines)
    return f"rollout {MUL}: calls_file {name!r} is outside the run directory"


def record_names_a_folder_leading_out(run: Path, outside: Path) -> str:
    """MUL's line names ``kept/MUL.jsonl``, and ``kept`` is a link to a folder outside
    holding a copy of its calls."""
    shutil.copyfile(run / "calls" / f"{MUL}.jsonl", outside / f"{MUL}.jsonl")
    (run / "kept").symlink_to(outside, target_is_directory=True)
    name = f"kept/{MUL}.jsonl"
    lines = [
        json.dumps({**x, "calls_file": name}) if x["rollout_id"] == MUL else json.dumps(x)
        for x in rollout_lines(run)
    ]
    write_rollout_lines(run, lines)
    return f"rollout {MUL}: calls_file {name!r} is outside the run directory"


def cut_last_line(run: Path, _outside: Path) -> str:
    """The calls file's last line cut short (no newline at its end)."""
    path = run / "calls" / f"{MUL}.jsonl"
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 40])
    last = len(data[: len(data) - 40].split(b"\n"))
    return f"{path}: line {last}: cut short (no newline at its end), not valid JSON ("


def cut_a_line(run: Path, _outside: Path) -> str:
    """A line of the calls file cut short, with the newline kept after it."""
    path = run / "calls" / f"{MUL}.jsonl"
    first, _, rest = path.read_bytes().partition(b"\n")
    path.write_bytes(first[: len(first) // 2] + b"\n" + rest)
    return f"{path}: line 1: not valid JSON ("


def bad_field(run: Path, _outside: Path) -> str:
    """A call whose completion ids are not integers."""
    path = run / "calls" / f"{MUL}.jsonl"
    calls = [json.loads(x) for x in path.read_text().splitlines()]
    calls[0]["completion_token_ids"] = ["one", "two"]
    path.write_text("".join(json.dumps(c) + "\n" for c in calls))
    return f"{path}: line 1.completion_token_ids: expected"


def missing(run: Path, _outside: Path) -> str:
    """The calls file the rollout's record names is gone."""
    path = run / "calls" / f"{MUL}.jsonl"
    path.unlink()
    return (
        f"{path}: no such file; expected the rollout's model calls, which its line in "
        f"{run / 'rollouts.jsonl'} names (calls_file)"
    )


def corrupt_rollout_line(run: Path, _outside: Path) -> str:
    """MUL's line of rollouts.jsonl (not the last) is not JSON."""
    lines = [json.dumps(x) for x in rollout_lines(run)]
    number = next(i for i, x in enumerate(rollout_lines(run)) if x["rollout_id"] == MUL)
    assert number < len(lines) - 1
    lines[number] = lines[number][: len(lines[number]) // 2]
    write_rollout_lines(run, lines)
    return f"{run / 'rollouts.jsonl'}: line {number + 1} is corrupt ("


def bad_raw(run: Path, _outside: Path) -> str:
    """MUL's token ids in raw are not a list of integers."""
    lines = [
        json.dumps({**x, "raw": {**x["raw"], "completion_token_ids": "42"}})
        if x["rollout_id"] == MUL
        else json.dumps(x)
        for x in rollout_lines(run)
    ]
    write_rollout_lines(run, lines)
    return (
        f"{run / 'rollouts.jsonl'}: rollout {MUL!r} raw.completion_token_ids: expected a list "
        "of integers"
    )


DAMAGES: dict[str, Callable[[Path, Path], str]] = {
    "link out of the run": relink,
    "record naming a file outside": record_names_outside,
    "folder on the way a link out": record_names_a_folder_leading_out,
    "last calls line cut": cut_last_line,
    "calls line cut": cut_a_line,
    "calls field": bad_field,
    "missing calls file": missing,
    "corrupt rollouts line": corrupt_rollout_line,
    "malformed raw": bad_raw,
}


@pytest.mark.parametrize("damage", list(DAMAGES))
def test_one_damaged_rollout_is_left_out_and_the_rest_exported(
    damage: str, run: Path, original: dict[str, dict[str, Any]], tmp_path: Path
) -> None:
    copy = Path(shutil.copytree(run, tmp_path / "run", symlinks=True))
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    reason = DAMAGES[damage](copy, outside)

    done, records = export(copy, watch=outside)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr and "AUDIT" not in done.stderr, done.stderr
    assert MUL not in records
    assert records == {k: v for k, v in original.items() if k != MUL}
    assert done.stdout.strip().endswith("(jsonl); left out 1 rollout(s) that cannot be read")
    warning, *reasons = done.stderr.strip().splitlines()
    assert warning == (
        f"warning: left out 1 rollout(s) of {copy} whose files cannot be read (damaged, or "
        "leading outside the run; --strict fails instead):"
    )
    assert len(reasons) == 1 and reason in reasons[0], done.stderr

    refused, written = export(copy, "--strict", watch=outside)
    assert refused.returncode == 2 and not written
    assert "Traceback" not in refused.stderr and "AUDIT" not in refused.stderr
    assert reason in refused.stderr and "(--strict) nothing was written" in refused.stderr

    summary = training.export_run(copy, tmp_path / "api.jsonl")
    (left,) = summary.left_out
    assert reason in left.reason
    assert left.rollout_id == (None if damage == "corrupt rollouts line" else MUL)
    assert summary.rollouts == 9 and summary.written == 9
    with pytest.raises(training.ExportError, match=r"1 rollout\(s\) of .* cannot be read"):
        training.from_run_dir(copy)
    assert len(training.from_run_dir(copy, skip_damaged=True)) == 9


def test_a_calls_folder_leading_out_of_the_run_leaves_nothing_to_export(
    run: Path, tmp_path: Path
) -> None:
    """calls/ itself a link out of the run: every rollout is left out, none of the files
    out there is opened, and an export of nothing is an error (status 2), not an empty
    file."""
    copy = Path(shutil.copytree(run, tmp_path / "run"))
    outside = tmp_path / "elsewhere"
    shutil.move(copy / "calls", outside)
    (copy / "calls").symlink_to(outside, target_is_directory=True)
    done, records = export(copy, watch=outside)
    assert done.returncode == 2 and not records
    assert "Traceback" not in done.stderr and "AUDIT" not in done.stderr, done.stderr
    assert "10 rollout(s) of" in done.stderr and "no rollout is left to export" in done.stderr
    assert f"rollout {MUL}: calls_file 'calls/{MUL}.jsonl' is outside" in done.stderr


def test_the_audit_hook_sees_a_file_opened_outside(run: Path, tmp_path: Path) -> None:
    """The hook the tests above rely on does report a file opened under the folder it
    watches: watching the run itself, it sees the export open its calls files."""
    copy = Path(shutil.copytree(run, tmp_path / "run"))
    done, records = export(copy, watch=tmp_path)
    assert done.returncode == 0, done.stderr
    assert f"AUDIT: opened {copy / 'calls' / f'{MUL}.jsonl'}" in done.stderr
    assert len(records) == 10


@pytest.mark.parametrize("swapped", ["calls", f"{MUL}.jsonl"])
def test_a_link_swapped_in_as_the_file_is_opened_is_not_followed(
    swapped: str, run: Path, tmp_path: Path
) -> None:
    """The race a check-then-open leaves: the calls file (or calls/, a folder on its way)
    is replaced by a link out of the run just before it is opened (an audit hook on
    ``open`` does it, as the reader asks for it by that name, after any check). The
    reader refuses it and the export leaves those rollouts out; nothing outside is read,
    though it holds the rollouts' own calls."""
    copy = Path(shutil.copytree(run, tmp_path / "run"))
    outside = tmp_path / "elsewhere"
    shutil.copytree(copy / "calls", outside)
    target = copy / "calls" / swapped if swapped != "calls" else copy / "calls"
    armed: list[bool] = []

    def swap(event: str, args: tuple[Any, ...]) -> None:
        if event != "open" or armed != [True] or not isinstance(args[0], (str, Path)):
            return
        if Path(os.fsdecode(args[0])).name == swapped:
            armed[0] = False  # once
            if target.is_dir():
                shutil.rmtree(target)
            else:
                target.unlink()
            target.symlink_to(outside / swapped if swapped != "calls" else outside)

    sys.addaudithook(swap)
    for read in ("reader", "export"):
        shutil.rmtree(copy)
        shutil.copytree(run, copy)
        armed[:] = [True]
        if read == "reader":
            with pytest.raises(RunDirError, match=r"calls_file .* is outside the run directory"):
                agentkit.runs.open(copy).calls(MUL)
        elif swapped == "calls":  # every rollout's calls file: nothing is left to export
            with pytest.raises(training.ExportError, match=f"rollout {MUL}: calls_file .* is out"):
                training.export_run(copy, tmp_path / "api.jsonl")
        else:
            summary = training.export_run(copy, tmp_path / "api.jsonl")
            assert [x.rollout_id for x in summary.left_out] == [MUL], summary.left_out
            assert "is outside the run directory" in summary.left_out[0].reason
        assert armed == [False] and target.is_symlink()  # the swap did happen
    armed.clear()
