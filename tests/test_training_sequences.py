"""Training sequences from a rollout's model calls: merging, prefix breaks, branches,
calls without token ids; and the export of a real run whose calls were recorded.

The rules are in docs/training-data.md ("Sequences"); the properties below check
that merging never changes a token: concatenating a sequence reproduces every merged
call's prompt and completion ids exactly, and the mask is 1 exactly on sampled tokens.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from _calls_runs import call, make_run, worked_example, write_calls
from hypothesis import given
from hypothesis import strategies as st

from agentkit._calls import ModelCall
from agentkit._convert import unstructure
from agentkit.testing.model_server import ScriptedModelServer
from agentkit.training import (
    ExportError,
    TrainingRecord,
    assign_advantages,
    export_run,
    from_run_dir,
    prepare,
    sequences_of,
)

pytestmark = pytest.mark.anyio


def test_the_worked_example_gives_two_sequences() -> None:
    tokens = sequences_of(worked_example("r"))
    assert tokens.complete and tokens.calls == 3
    first, second = tokens.sequences
    assert first.calls == (0, 1) and first.start == "first"
    assert first.prompt_token_ids == [1, 2, 3]
    assert first.completion_token_ids == [10, 11, 4, 5, 12, 13]
    assert first.completion_mask == [1, 1, 0, 0, 1, 1]
    assert first.completion_logprobs == [-0.1, -0.2, 0.0, 0.0, -0.3, -0.4]
    assert first.stop_reason == "tool_calls"
    assert second.calls == (2,) and second.start == "prefix_break"
    assert second.prompt_token_ids == [1, 2, 3, 6, 7]
    assert second.completion_token_ids == [14, 15] and second.completion_mask == [1, 1]
    assert second.completion_logprobs == [-0.5, -0.6] and second.stop_reason == "stop"
    assert tokens.describe() == "complete (3 calls, 2 sequences)"


def test_parallel_calls_branch_and_do_not_train_a_token_twice() -> None:
    calls = [
        call("r", 0, [1, 2], [3]),
        call("r", 1, [1, 2, 3, 4], [5], parent=0),  # continues call 0
        call("r", 2, [1, 2, 3, 4], [6], parent=0),  # a parallel sibling: a branch
        call("r", 3, [1, 2, 3, 4, 5, 7], [8], parent=1),
    ]
    tokens = sequences_of(calls)
    assert [s.calls for s in tokens.sequences] == [(0, 1, 3), (2,)]
    branch = tokens.sequences[1]
    assert branch.start == "branch"
    assert branch.prompt_token_ids == [1, 2, 3, 4] and branch.completion_mask == [1]
    sampled = [
        t
        for s in tokens.sequences
        for t, m in zip(s.completion_token_ids, s.completion_mask, strict=True)
        if m
    ]
    assert sorted(sampled) == [3, 5, 6, 8]  # every sampled token once


def test_interleaved_agents_stay_two_sequences() -> None:
    # a sub-agent (call 1, its own prompt) between two calls of the main agent
    calls = [
        call("r", 0, [1, 2], [3]),
        call("r", 1, [50, 51], [52], parent=0),
        call("r", 2, [50, 51, 52, 53], [54]),  # the sub-agent again
        call("r", 3, [1, 2, 3, 4], [5]),  # the main agent again, unmarked
    ]
    tokens = sequences_of(calls)
    assert [(s.calls, s.start) for s in tokens.sequences] == [
        ((0, 3), "first"),
        ((1, 2), "branch"),
    ]


def test_a_call_without_ids_is_named_and_ends_its_sequence() -> None:
    calls = [
        call("r", 0, [1, 2], [3]),
        call("r", 1, None, None, note="the server returned no token ids"),
        call("r", 2, [1, 2, 3, 4, 9, 5], [6]),
    ]
    tokens = sequences_of(calls)
    assert not tokens.complete
    assert [(g.call, g.reason) for g in tokens.gaps] == [(1, "the server returned no token ids")]
    assert [(s.calls, s.start) for s in tokens.sequences] == [((0,), "first"), ((2,), "after_gap")]
    # its sampled tokens (9) are context of the next sequence, never trained as observation
    assert tokens.sequences[1].prompt_token_ids == [1, 2, 3, 4, 9, 5]
    assert "call 1: the server returned no token ids" in tokens.describe()


def test_a_failed_call_is_skipped_and_missing_logprobs_are_none() -> None:
    calls = [
        call("r", 0, [1], [2], [-0.5]),
        call("r", 1, None, None, status=500, error="server error"),
        call("r", 2, [1, 2, 3], [4]),  # no logprobs
    ]
    tokens = sequences_of(calls)
    assert tokens.complete
    (only,) = tokens.sequences
    assert only.calls == (0, 2) and only.completion_logprobs is None
    assert only.completion_mask == [1, 0, 1]


BROKE = "the answer broke off: ClientPayloadError: Response payload is not completed"


@pytest.mark.parametrize("kept_as", ["partial", "completion"])
def test_a_failed_call_is_never_trained_and_its_retry_continues_the_sequence(
    kept_as: str,
) -> None:
    """Call 1 broke off after sampling [7, 8]; the agent retried the same prompt (call 2),
    which continues call 0's sequence as if call 1 had not happened: one sequence, the
    partial tokens nowhere, the rollout complete. Calls files of earlier versions kept
    the partial tokens as completion ids: read the same way."""
    sampled = [7, 8]
    calls = [
        call("r", 0, [1, 2], [3], [-0.3]),
        call(
            "r",
            1,
            [1, 2, 3, 4],
            sampled if kept_as == "completion" else None,
            partial=sampled if kept_as == "partial" else None,
            error=BROKE,
        ),
        call("r", 2, [1, 2, 3, 4], [5, 6], [-0.5, -0.6]),
    ]
    tokens = sequences_of(calls)
    assert tokens.complete and tokens.gaps == ()
    (only,) = tokens.sequences
    assert only.calls == (0, 2) and only.start == "first"
    assert only.completion_token_ids == [3, 4, 5, 6]
    assert only.completion_mask == [1, 0, 1, 1]
    assert only.completion_logprobs == [-0.3, 0.0, -0.5, -0.6]


def test_a_failed_first_call_and_its_retry_start_the_rollout() -> None:
    calls = [
        call("r", 0, [1, 2], None, partial=[9], error=BROKE),
        call("r", 1, [1, 2], [3], [-0.3]),
    ]
    tokens = sequences_of(calls)
    assert tokens.complete
    assert [(s.calls, s.start) for s in tokens.sequences] == [((1,), "first")]


def test_a_retry_that_samples_what_the_failed_call_had_is_no_gap() -> None:
    """A retry of the same prompt often samples the same first tokens (Codex's retry
    against the scripted server does): they are the retry's own, trained, and the
    rollout is complete."""
    calls = [
        call("r", 0, [1, 2], None, partial=[7, 8], error=BROKE),
        call("r", 1, [1, 2], [7, 8, 9], [-0.1, -0.2, -0.3]),
        call("r", 2, [1, 2, 7, 8, 9, 4], [5], [-0.5]),
    ]
    tokens = sequences_of(calls)
    assert tokens.complete and tokens.gaps == ()
    (only,) = tokens.sequences
    assert only.calls == (1, 2) and only.completion_mask == [1, 1, 1, 0, 1]


def test_a_failed_calls_tokens_in_a_later_prompt_make_the_rollout_incomplete() -> None:
    """The agent kept what call 1 had sampled ([7, 8]) and went on (call 2's prompt holds
    it): those tokens are the policy's, but are trained as prompt: incomplete, saying why."""
    calls = [
        call("r", 0, [1, 2], [3], [-0.3]),
        call("r", 1, [1, 2, 3, 4], None, partial=[7, 8], error=BROKE),
        call("r", 2, [1, 2, 3, 4, 7, 8, 10], [11], [-0.1]),
    ]
    tokens = sequences_of(calls)
    assert not tokens.complete
    (gap,) = tokens.gaps
    assert gap.call == 1
    assert gap.reason == (
        "it did not complete (the answer broke off), and the 2 tokens it had sampled "
        "reached the agent's next prompt (call 2): they are not trained"
    )
    (only,) = tokens.sequences  # call 2 still merges: 7, 8 are context, mask 0
    assert only.calls == (0, 2) and only.completion_mask == [1, 0, 0, 0, 0, 1]
    assert "1 calls not trained (call 1: it did not complete" in tokens.describe()


def test_a_rollout_of_several_sequences_counts_once_in_its_group() -> None:
    def rec(rollout: str, reward: float, sequence: int) -> TrainingRecord:
        return TrainingRecord(
            rollout_id=rollout, task_id="t", example_id="t", rollout_index=0, group=0,
            status="completed", reward=reward, sequence=sequence,
        )  # fmt: skip

    records = [rec("a", 1.0, 0), rec("a", 1.0, 1), rec("a", 1.0, 2), rec("b", 0.0, 0)]
    assert [r.advantage for r in assign_advantages(records)] == [0.5, 0.5, 0.5, -0.5]
    batch = assign_advantages(records, normalize="batch")
    assert [round(r.advantage or 0, 6) for r in batch] == [1.0, 1.0, 1.0, -1.0]


# --- properties --------------------------------------------------------------------

Step = tuple[str, int, list[int], list[int]]


@st.composite
def rollouts(draw: st.DrawFn) -> tuple[list[ModelCall], set[int]]:
    """Calls that extend, break the prefix, branch from an earlier call, or lack ids;
    and the calls that extend the call before them (which must merge into its sequence)."""
    tokens = st.lists(st.integers(0, 50), max_size=4)
    calls: list[ModelCall] = []
    full: dict[int, list[int]] = {}  # call index -> its prompt + completion
    extending: set[int] = set()
    for index in range(draw(st.integers(1, 8))):
        kind = draw(st.sampled_from(["extend", "extend", "break", "branch", "missing"]))
        if calls and kind in ("extend", "missing"):
            base = full.get(calls[-1].index, [])
            parent = None
        elif calls and kind == "branch":
            parent = draw(st.sampled_from([c.index for c in calls]))
            base = full.get(parent, [])
        else:
            base, parent = [], None
        prompt = base + draw(tokens)
        completion = draw(tokens)
        logprobs = [-float(t) / 10 for t in completion]
        if kind == "missing":
            calls.append(call("r", index, None, None, note="why", parent=parent))
            continue
        if kind == "extend" and calls and calls[-1].has_tokens:
            extending.add(index)
        calls.append(call("r", index, prompt, completion, logprobs, parent=parent))
        full[index] = prompt + completion
    return calls, extending


@given(rollouts())
def test_concatenating_a_sequence_reproduces_each_merged_call(
    drawn: tuple[list[ModelCall], set[int]],
) -> None:
    calls, extending = drawn
    tokens = sequences_of(calls)
    sequence_of = {i: n for n, s in enumerate(tokens.sequences) for i in s.calls}
    assert all(sequence_of[i] == sequence_of[i - 1] for i in extending)
    by_index = {c.index: c for c in calls}
    merged = [i for s in tokens.sequences for i in s.calls]
    with_ids = [c.index for c in calls if c.has_tokens]
    assert sorted(merged) == with_ids  # every call with ids is in exactly one sequence
    assert [g.call for g in tokens.gaps] == [c.index for c in calls if not c.has_tokens]
    for seq in tokens.sequences:
        whole = seq.prompt_token_ids + seq.completion_token_ids
        n = len(seq.prompt_token_ids)
        assert len(seq.completion_mask) == len(seq.completion_token_ids)
        assert seq.completion_logprobs is not None
        sampled: set[int] = set()
        for index in seq.calls:
            c = by_index[index]
            assert c.prompt_token_ids is not None and c.completion_token_ids is not None
            end = len(c.prompt_token_ids) + len(c.completion_token_ids)
            assert whole[:end] == c.prompt_token_ids + c.completion_token_ids
            start = len(c.prompt_token_ids) - n
            span = range(start, start + len(c.completion_token_ids))
            sampled.update(span)
            assert [seq.completion_logprobs[i] for i in span] == c.completion_logprobs
        assert {i for i, m in enumerate(seq.completion_mask) if m} == sampled
        assert all(seq.completion_logprobs[i] == 0.0 for i in set(range(len(whole) - n)) - sampled)
        last = by_index[seq.calls[-1]]
        assert last.prompt_token_ids is not None and last.completion_token_ids is not None
        assert whole == last.prompt_token_ids + last.completion_token_ids


@st.composite
def interleaved(draw: st.DrawFn) -> tuple[list[ModelCall], list[list[int]]]:
    """Two or three agents (each its own tokens), each a chain of calls whose prompts
    extend its own last call, their calls interleaved at random and none marked with
    a parent; and each agent's calls in order."""
    agents = draw(st.integers(2, 3))
    order = draw(st.lists(st.integers(0, agents - 1), min_size=agents, max_size=12))
    order = list(range(agents)) + order  # every agent calls at least once
    full: dict[int, list[int]] = {}  # agent -> its conversation so far
    chains: list[list[int]] = [[] for _ in range(agents)]
    calls = []
    for index, agent in enumerate(order):
        own = st.integers(100 * agent + 1, 100 * agent + 99)  # no token of another agent
        prompt = full.get(agent, [100 * agent]) + draw(st.lists(own, max_size=3))
        completion = draw(st.lists(own, min_size=1, max_size=3))
        calls.append(call("r", index, prompt, completion, [-0.5] * len(completion)))
        full[agent] = prompt + completion
        chains[agent].append(index)
    return calls, chains


@given(interleaved())
def test_interleaved_agents_are_each_one_sequence(
    drawn: tuple[list[ModelCall], list[list[int]]],
) -> None:
    # a call whose prompt extends an earlier call that is not the latest continues that
    # call's sequence: each agent's calls are one sequence, whatever the interleaving
    calls, chains = drawn
    tokens = sequences_of(calls)
    assert sorted(list(s.calls) for s in tokens.sequences) == sorted(chains)
    assert tokens.sequences[0].start == "first"
    assert all(s.start == "prefix_break" for s in tokens.sequences[1:])


@given(st.one_of(rollouts().map(lambda d: d[0]), interleaved().map(lambda d: d[0])))
def test_the_calls_file_gives_back_every_call(calls: list[ModelCall]) -> None:
    # prompts stored as a reference to an earlier call and the ids they add are
    # rebuilt in full; a file of whole lists (as runs wrote before) reads the same
    from agentkit._calls import calls_json, parse_calls
    from agentkit.training._sequences import _sequences_of

    lines = calls_json(calls)
    data = "".join(json.dumps(line) + "\n" for line in lines).encode()
    references: dict[int, tuple[int, int]] = {}
    assert parse_calls(data, "calls.jsonl", references=references) == calls
    # export, told which prompts the file stored by reference, makes the same sequences
    assert _sequences_of(calls, references) == sequences_of(calls)
    whole = "".join(json.dumps(unstructure(c)) + "\n" for c in calls).encode()
    assert parse_calls(whole, "calls.jsonl") == calls


def test_a_delta_encoded_file_stores_each_id_once(tmp_path: Path) -> None:
    calls = [call("r", 0, [1, 2, 3], [4, 5], [-0.1, -0.2])]
    for index in range(1, 4):
        prev = calls[-1]
        assert prev.prompt_token_ids is not None and prev.completion_token_ids is not None
        prompt = prev.prompt_token_ids + prev.completion_token_ids + [60 + index]
        calls.append(call("r", index, prompt, [70 + index], [-0.3]))
    calls.append(call("r", 4, [1, 2, 3, 9], [8], [-0.4]))  # a prefix break: keeps 1, 2, 3
    path = write_calls(tmp_path, "r", calls)
    stored = [json.loads(x)["prompt_token_ids"] for x in path.read_text().splitlines()]
    assert stored == [
        [1, 2, 3],
        {"call": 0, "keep": 5, "add": [61]},
        {"call": 1, "keep": 7, "add": [62]},
        {"call": 2, "keep": 9, "add": [63]},
        {"call": 3, "keep": 3, "add": [9]},
    ]
    (tmp_path / "rollouts.jsonl").write_text("")
    from agentkit.training._callfiles import read_calls

    assert read_calls(tmp_path, "r", run_id=None) == calls


@pytest.mark.parametrize(
    ("delta", "message"),
    [
        ({"call": 5, "keep": 1, "add": []}, r"line 2.prompt_token_ids.call: expected an earlier"),
        ({"call": 0, "keep": 99, "add": []}, r"line 2.prompt_token_ids.keep: expected at most"),
        ({"call": 0, "keep": 1, "add": [1.5]}, r"line 2.prompt_token_ids.add: expected a list"),
        ({"call": 0, "add": [1]}, r"line 2.prompt_token_ids: expected a list of integer token"),
    ],
)
def test_a_bad_reference_names_the_line_and_field(
    tmp_path: Path, delta: dict[str, Any], message: str
) -> None:
    path = write_calls(tmp_path, "r0", worked_example("r0"))
    lines = path.read_text().splitlines()
    bad = json.loads(lines[1])
    bad["prompt_token_ids"] = delta
    path.write_text("\n".join([lines[0], json.dumps(bad), lines[2]]) + "\n")
    from agentkit.training._callfiles import read_calls

    with pytest.raises(ExportError, match=message):
        read_calls(tmp_path, "r0", run_id=None)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"protocol": None}, r"line 2.protocol: required key is missing"),
        ({"index": None}, r"line 2.index: required key is missing"),
        ({"rollout_id": None}, r"line 2.rollout_id: required key is missing"),
        ({"protocol": "Chat!"}, r"line 2.protocol: expected a protocol's name .*got 'Chat!'"),
        ({"upstream_protocol": "no way"}, r"line 2.upstream_protocol: expected a protocol's"),
        ({"headers": {"x-a": 1}}, r"line 2.headers: expected an object of strings"),
        ({"cuts": [1]}, r"line 2.cuts: expected a list of objects"),
        ({"usage": {"prompt_tokens": "9"}}, r"line 2.usage: "),
        ({"completion_token_ids": [5, True]}, r"line 2.completion_token_ids: expected a list of"),
        ({"partial_token_ids": [5.0]}, r"line 2.partial_token_ids: expected a list of integer"),
        ({"completion_logprobs": ["x"]}, r"line 2.completion_logprobs: expected a list of num"),
        ({"index": -1}, r"line 2.index: expected a whole number >= 0"),
        ({"stream": "yes"}, r"line 2.stream: expected bool, got str"),
    ],
)
def test_a_bad_line_names_the_line_and_field(
    tmp_path: Path, change: dict[str, Any], message: str
) -> None:
    """Each check of a calls file's line, on a line of the same keys as the line before
    (whose checks were planned already) or of other keys; None removes the key."""
    path = write_calls(tmp_path, "r0", worked_example("r0"))
    lines = path.read_text().splitlines()
    bad = json.loads(lines[1])
    for key, value in change.items():
        if value is None:
            del bad[key]
        else:
            bad[key] = value
    path.write_text("\n".join([lines[0], json.dumps(bad), lines[2]]) + "\n")
    from agentkit.training._callfiles import read_calls

    with pytest.raises(ExportError, match=rf"{path}: {message}"):
        read_calls(tmp_path, "r0", run_id=None)


@given(
    st.lists(st.integers(0, 10**6), max_size=6),
    st.lists(st.tuples(st.integers(0, 10**6), st.sampled_from([0, 1, 1, 2, 300])), max_size=8),
    st.floats(-5, 5, allow_nan=False),
    st.booleans(),
)
def test_the_tinker_writer_writes_what_datum_json_gives(
    prompt: list[int], completion: list[tuple[int, int]], advantage: float, logprobs: bool
) -> None:
    # the writer writes the mask and advantages as JSON text made in C; they must
    # load as the lists datum_json() builds
    import orjson

    from agentkit.training._tinker import _datum, datum_json

    record = TrainingRecord(
        rollout_id="r", task_id="t", example_id="t", rollout_index=0, group=0,
        status="completed", reward=1.0, advantage=advantage, prompt_token_ids=prompt,
        completion_token_ids=[t for t, _ in completion],
        completion_mask=[m for _, m in completion],
        completion_logprobs=[-0.5] * len(completion) if logprobs else None,
    )  # fmt: skip
    plain = datum_json(record)
    written = _datum(record, fragments=True)
    assert (plain is None) == (written is None)
    if plain is not None:
        assert orjson.loads(orjson.dumps(written)) == json.loads(json.dumps(plain))


# --- a real run with recorded calls ------------------------------------------------


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agentkit", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


async def test_a_run_exports_one_record_per_sequence(
    tmp_path: Path, model_server: ScriptedModelServer
) -> None:
    run_dir = await make_run(tmp_path, model_server)
    records = prepare(from_run_dir(run_dir))
    # in the order the rollouts ended, which concurrency decides: sorted here
    adds = sorted(
        (r for r in records if r.task_id.endswith(":add")),
        key=lambda r: (r.rollout_index, r.sequence),
    )
    assert [(r.rollout_index, r.sequence, r.calls) for r in adds] == [
        (0, 0, [0, 1]),
        (0, 1, [2]),
        (1, 0, [0, 1]),
        (1, 1, [2]),
    ]
    assert adds[1].sequence_start == "prefix_break" and adds[1].token_source == "server"
    assert adds[0].completion_token_ids == [10, 11, 4, 5, 12, 13]
    # each rollout counts once in its group: the add group passed twice, advantages 0
    assert all(r.advantage == 0.0 for r in adds)
    capital = sorted(
        (r for r in records if r.task_id.endswith(":capital")), key=lambda r: r.rollout_index
    )
    assert capital[0].token_issues == []
    missing = capital[-1]
    assert missing.token_issues == [
        {
            "call": 1,
            "reason": "the server returned no token ids (vLLM < 0.10.2 ignores return_token_ids)",
        }
    ]
    assert missing.calls == [0] and missing.completion_token_ids == [20, 21]

    out = tmp_path / "train.jsonl"
    done = _cli("export", str(run_dir), "--out", str(out))
    assert done.returncode == 0, done.stderr
    assert "wrote 6 training records" in done.stdout
    assert "1 of 4 rollouts have incomplete token ids" in done.stderr
    assert f"{missing.rollout_id}: call 1: the server returned no token ids" in done.stderr
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert [r["token_issues"] for r in rows if r["rollout_id"] == missing.rollout_id] == [
        missing.token_issues
    ]

    refused = _cli("export", str(run_dir), "--out", str(tmp_path / "strict.jsonl"),
                   "--require-token-ids")  # fmt: skip
    assert refused.returncode == 2
    assert "1 rollout(s)" in refused.stderr and "--require-token-ids" in refused.stderr
    assert f"{missing.rollout_id}: call 1: the server returned no token ids" in refused.stderr
    assert "Traceback" not in refused.stderr and not (tmp_path / "strict.jsonl").exists()
    with pytest.raises(ExportError, match=missing.rollout_id):
        export_run(run_dir, tmp_path / "x.jsonl", require_token_ids=True)

    shown = _cli("show", str(run_dir), "--rollout", missing.rollout_id)
    assert shown.returncode == 0, shown.stderr
    assert (
        "Token ids: incomplete (2 calls, 1 sequences): 1 calls not trained "
        "(call 1: the server returned no token ids" in shown.stdout
    )
    complete = _cli("show", str(run_dir), "--rollout", adds[0].rollout_id)
    assert "Token ids: complete (3 calls, 2 sequences)" in complete.stdout


async def test_every_format_writes_and_rollouts_without_calls_keep_their_raw_tokens(
    tmp_path: Path, model_server: ScriptedModelServer
) -> None:
    run_dir = await make_run(tmp_path, model_server)
    for fmt in ("skyrl", "tinker", "verifiers", "sft-chat", "sharegpt", "parquet"):
        done = _cli("export", str(run_dir), "--format", fmt, "--out", str(tmp_path / fmt))
        assert done.returncode == 0, (fmt, done.stderr)
    skyrl = json.loads((tmp_path / "skyrl").read_text())
    assert len(skyrl["response_ids"]) == 6 and skyrl["is_last_step"].count(True) == 4
    sft = [json.loads(x) for x in (tmp_path / "sft-chat").read_text().splitlines()]
    assert {r["task_id"] for r in sft} == {"tasks:add"}  # only the rollouts that passed
    assert sft[0]["tools"][0]["function"]["name"] == "calc"

    # a rollout without a calls file (written before calls were recorded: its record names
    # none) keeps the per-rollout ids its harness recorded; a calls file its record names
    # that is gone is damage, and that rollout is left out (tests/test_export_damaged.py)
    rollout_id = sorted(p.stem for p in (run_dir / "calls").iterdir())[0]
    (run_dir / "calls" / f"{rollout_id}.jsonl").unlink()
    lines = (run_dir / "rollouts.jsonl").read_text().splitlines()
    rewritten = []
    for line in lines:
        data: dict[str, Any] = json.loads(line)
        if data["rollout_id"] == rollout_id:
            data["raw"] = {"prompt_token_ids": [7, 8], "completion_token_ids": [9]}
            data["calls"], data["calls_file"] = 0, None
        rewritten.append(json.dumps(data))
    (run_dir / "rollouts.jsonl").write_text("\n".join(rewritten) + "\n")
    (record,) = [r for r in from_run_dir(run_dir) if r.rollout_id == rollout_id]
    assert (record.prompt_token_ids, record.completion_token_ids) == ([7, 8], [9])
    assert record.calls is None and record.token_source == "server"
    shown = _cli("show", str(run_dir), "--rollout", rollout_id)
    assert "Token ids: complete (recorded by the harness; no calls file)" in shown.stdout


def test_a_malformed_calls_file_names_the_file_line_and_field(tmp_path: Path) -> None:
    (tmp_path / "rollouts.jsonl").write_text("")
    path = write_calls(tmp_path, "r0", worked_example("r0"))
    lines = path.read_text().splitlines()
    bad = json.loads(lines[1])
    bad["prompt_token_ids"] = [1, "2"]
    path.write_text("\n".join([lines[0], json.dumps(bad), lines[2]]) + "\n")
    from agentkit.training._callfiles import read_calls

    with pytest.raises(ExportError, match=r"r0.jsonl: line 2.prompt_token_ids: expected a list"):
        read_calls(tmp_path, "r0", run_id=None)
