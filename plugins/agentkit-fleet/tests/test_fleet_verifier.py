"""Verifiers run in a sandbox: Fleet's helpers and scores, and no way out."""

from __future__ import annotations

import asyncio
import os
import shutil
from pathlib import Path

import pytest
from agentkit_fleet.localenv.bookings import prepare_databases
from agentkit_fleet.verification import (
    VerifierOutcome,
    parse_accumulators,
    run_verifier_in_sandbox,
    score_outcome,
)

from agentkit import ExecutionHints
from agentkit.sandbox import open_sandbox

needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")


def open_local(root: Path, hints: object) -> object:
    from agentkit.registry import resolve_sandbox

    return resolve_sandbox("local")(root=root, hints=hints, rollout_id="verifier-test")


def verify(tmp_path: Path, code: str, final_answer: str | None = None) -> VerifierOutcome:
    seed, current = prepare_databases(tmp_path / "db")
    return asyncio.run(
        run_verifier_in_sandbox(
            code=code,
            seed_db=seed,
            current_db=current,
            final_answer=final_answer,
            open_sandbox=open_local,  # type: ignore[arg-type]
        )
    )


def test_scores_follow_fleets_definition() -> None:
    # OpenEnv d23f08d7 task_env.py:344-351
    assert score_outcome(VerifierOutcome(success=True, result=None)) == 1.0
    assert score_outcome(VerifierOutcome(success=True, result=0.25)) == 0.25
    assert score_outcome(VerifierOutcome(success=True, result=True)) == 1.0
    assert score_outcome(VerifierOutcome(success=True, result=0)) == 0.0
    assert score_outcome(VerifierOutcome(success=False, error="boom")) == 0.0


def accumulators(successes: str, errors: str) -> str:
    return (
        f">>> SUCCESS_ACCUMULATOR >>>\n{successes}\n<<< SUCCESS_ACCUMULATOR <<<\n"
        f">>> ERROR_ACCUMULATOR >>>\n{errors}\n<<< ERROR_ACCUMULATOR <<<\n"
    )


def test_partial_reward_as_openenv_computes_it() -> None:
    # OpenEnv cc5bf37c task_env.py:527-554 (_parse_partial_reward) and 617-626 (only
    # when the binary score is 0 and stdout is not empty)
    printed = accumulators("['a', 'b', 'c']", "['d']")
    assert parse_accumulators(printed) == (3, 1)
    failed = VerifierOutcome(success=True, result=0, stdout=printed)
    assert score_outcome(failed) == 0.0
    assert score_outcome(failed, partial_reward=True) == 0.75
    # a verifier that raised (success False) after printing gets the partial score too
    raised = VerifierOutcome(success=False, error="boom", stdout=printed)
    assert score_outcome(raised, partial_reward=True) == 0.75
    # a passing verifier keeps its score, whatever it printed
    passed = VerifierOutcome(success=True, result=1, stdout=accumulators("['a', 'b']", "['c']"))
    assert score_outcome(passed, partial_reward=True) == 1.0
    # one marker pair is enough; an empty pair of lists, or text that is no Python
    # literal, gives no partial score
    assert parse_accumulators(">>> ERROR_ACCUMULATOR >>>\n['x']\n<<< ERROR_ACCUMULATOR <<<") == (
        0,
        1,
    )
    empty = VerifierOutcome(success=True, result=0, stdout=accumulators("[]", "[]"))
    assert score_outcome(empty, partial_reward=True) == 0.0
    assert parse_accumulators(accumulators("dates, room", "['x']")) is None
    # len() of what was printed: a string counts its characters, as upstream
    assert parse_accumulators(accumulators("'ab'", "['x']")) == (2, 1)


@needs_bwrap
def test_helpers_fleet_verifiers_expect(tmp_path: Path) -> None:
    code = """
from fleet.verifiers import TASK_SUCCESSFUL_SCORE

def validate(env: Environment, final_answer: str | None = None) -> int:
    env.instance.load()
    seed = env.db("seed")
    current = env.app("bookings").db("current")
    assert int(seed.table("guests").count()) == 4
    seed.table("guests").count().assert_eq(4)
    # Fleet's count() does not compare with numbers
    assert (seed.table("guests").count() == 4) is False
    rooms = current.table("rooms")
    assert rooms.eq("status", "maintenance").first()["number"] == "202"
    assert len(rooms.all()) == 5  # builders are immutable: rooms is still every room
    # eq(col, None) is SQL "= NULL" (no row), as in Fleet's SDK; is_null is the test
    assert current.table("bookings").eq("notes", "").count().value == 3
    assert rooms.eq("number", None).first() is None and rooms.is_null("number").first() is None
    assert rooms.not_null("number").count().value == 5
    assert [r["id"] for r in rooms.sort("id", desc=True).limit(2).all()] == [5, 4]
    current.expect_row("rooms", {"number": "202"}, {"status": "maintenance"})
    current.expect_absent_row("guests", {"email": "nobody@example.com"})
    assert normalized_contains("ada lovelace", "ADA-Lovelace!")
    assert contains_number(final_answer, 3)
    print("checked")
    return TASK_SUCCESSFUL_SCORE
"""
    outcome = verify(tmp_path, code, final_answer="there are 3 rooms")
    assert outcome.success, outcome.error
    assert outcome.result == 1 and "checked" in outcome.stdout
    new_style = (
        "def v(before, after, transcript=None):\n    return 0.5 if transcript == 'x' else 0\n"
    )
    assert verify(tmp_path / "b", new_style, final_answer="x").result == 0.5
    no_diff = verify(tmp_path / "c", "def v(env):\n    env.db('seed').diff(env.db('current'))\n")
    assert not no_diff.success and "not available in agentkit's verifier sandbox" in (
        no_diff.error or ""
    )


@needs_bwrap
def test_a_failing_verifier_scores_zero_with_its_error(tmp_path: Path) -> None:
    outcome = verify(tmp_path, "def v(env):\n    raise KeyError('no such booking')\n")
    assert not outcome.success and "no such booking" in (outcome.error or "")
    assert score_outcome(outcome) == 0.0


@needs_bwrap
def test_verifier_cannot_read_the_orchestrators_environment_or_write_outside(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    canary = "canary-" + os.urandom(6).hex()
    monkeypatch.setenv("FLEET_API_KEY", canary)
    monkeypatch.setenv("OPENAI_API_KEY", canary)
    outside = tmp_path / "outside.txt"
    code = f"""
import os
def v(env, final_answer=None):
    leaked = [k for k, val in os.environ.items() if val == {canary!r}]
    try:
        with open({str(outside)!r}, "w") as fh:
            fh.write("escaped")
        wrote = True
    except OSError:
        wrote = False
    try:
        secret = open("/proc/{os.getpid()}/environ", "rb").read()
        read_parent = {canary!r}.encode() in secret
    except OSError:
        read_parent = False
    print("leaked", leaked, "wrote", wrote, "read_parent", read_parent)
    return 1 if (leaked or wrote or read_parent) else 0.5
"""
    outcome = verify(tmp_path, code)
    assert outcome.success, outcome.error
    assert outcome.result == 0.5, outcome.stdout
    assert not outside.exists()
    assert canary not in outcome.stdout


#: What a process left running in a reused sandbox does: once the verifier runs, it swaps
#: the current database for one that passes (a table the verifier looks for).
SWAP_DATABASE = """
import os, sqlite3, sys, time
open("/tmp/.writer-ready", "w").close()
while not os.path.exists("/tmp/.grading"):
    time.sleep(0.01)
db = sqlite3.connect("/tmp/forged.sqlite")
db.execute("create table forged (x)")
db.commit()
db.close()
os.replace("/tmp/forged.sqlite", sys.argv[1] + "/current.sqlite")
open("/tmp/.writer-done", "w").close()
"""
#: The verifier: passes when the current database has the table the writer forges. It
#: gives a writer still running beside it its turn (an event, never a race).
CHECKS_FORGED_TABLE = """
import os, time
def alive():
    for p in os.listdir("/proc"):
        try:
            if b"fleet-writer" in open(f"/proc/{p}/cmdline", "rb").read().split(b"\\0"):
                return True
        except (OSError, ValueError):
            continue
    return False
def v(env, final_answer=None):
    open("/tmp/.grading", "w").close()
    while not os.path.exists("/tmp/.writer-done") and alive():
        time.sleep(0.01)
    try:
        int(env.db("current").table("forged").count())
    except Exception:
        return 0
    return 1
"""


@needs_bwrap
@pytest.mark.anyio
async def test_a_reused_sandbox_is_cleared_before_the_verifier_runs(tmp_path: Path) -> None:
    seed, current = prepare_databases(tmp_path / "db")
    hints = ExecutionHints(workdir="/verifier")
    async with open_sandbox("local", hints=hints, root=tmp_path / "sb", image="host") as sb:
        # left running by whatever used the sandbox before
        await sb.start(
            ["setsid", "python3", "-c", SWAP_DATABASE, "/verifier/fleet_verifier", "fleet-writer"]
        )
        ready = await sb.exec("until [ -e /tmp/.writer-ready ]; do sleep 0.01; done")
        assert ready.ok
        outcome = await run_verifier_in_sandbox(
            code=CHECKS_FORGED_TABLE,
            seed_db=seed,
            current_db=current,
            final_answer=None,
            sandbox=sb,
        )
    assert outcome.success, outcome.error
    assert outcome.result == 0  # the database the run left, not the forged one
