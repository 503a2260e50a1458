"""Scoring a rollout with the task's verifier code, never in the orchestrator's process.

Local environments: the verifier runs in an agentkit sandbox (bubblewrap by
default) against copies of the environment's seed and current SQLite
databases, through :mod:`agentkit_fleet.verifier_runner`. The Fleet
platform: through the platform's verifier execution (see
:mod:`agentkit_fleet.environments`).

The score is Fleet's: the number the verifier returns (``True``/``False``
count as 1/0); a verifier that succeeds without returning anything scores 1;
a verifier that fails (raises) scores 0. With ``partial_reward`` on, a
verifier whose score is 0 and that printed its success and error
accumulators (``>>> SUCCESS_ACCUMULATOR >>>`` ... ``<<< SUCCESS_ACCUMULATOR
<<<``) scores ``successes / (successes + errors)`` instead, as OpenEnv's
Fleet environment does (``partial_reward=True``); a passing verifier keeps
its score.
"""

from __future__ import annotations

import ast
import json
import math
import re
import shutil
import sqlite3
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs

from agentkit import ExecutionHints, Sandbox
from agentkit.sandbox import end_processes, reset_dir

__all__ = [
    "VerifierOutcome",
    "parse_accumulators",
    "run_verifier_in_sandbox",
    "score_outcome",
    "snapshot_sqlite",
]

VERIFIER_DIR_NAME = "fleet_verifier"
RUNNER = Path(__file__).with_name("verifier_runner.py")
RESULT_MARKER = "@@FLEET_VERIFIER_RESULT@@"


@attrs.frozen(kw_only=True)
class VerifierOutcome:
    """What one verifier run gave: success, its returned value, its error and output."""

    success: bool
    result: Any = None
    error: str | None = None
    stdout: str = ""
    where: str = "sandbox"

    def to_json(self) -> dict[str, Any]:
        """Plain JSON (output truncated to keep run directories small)."""
        return {
            "success": self.success,
            "result": self.result,
            "error": None if self.error is None else self.error[-4000:],
            "stdout": self.stdout[-4000:],
            "where": self.where,
        }


def parse_accumulators(stdout: str) -> tuple[int, int] | None:
    """How many checks passed and failed, from the accumulators a verifier printed.

    As OpenEnv's Fleet environment reads them: the text between
    ``>>> SUCCESS_ACCUMULATOR >>>`` and ``<<< SUCCESS_ACCUMULATOR <<<`` (and
    the same for ``ERROR``) is read as a Python literal and its ``len`` is
    the count; None when neither marker pair is present or one cannot be
    read that way.
    """
    counts: dict[str, int] = {}
    for name in ("SUCCESS", "ERROR"):
        m = re.search(
            rf">>> {name}_ACCUMULATOR >>>\n(.+?)\n<<< {name}_ACCUMULATOR <<<", stdout, re.DOTALL
        )
        if m is None:
            continue
        try:
            counts[name] = len(ast.literal_eval(m.group(1)))
        except Exception:
            return None
    if not counts:
        return None
    return counts.get("SUCCESS", 0), counts.get("ERROR", 0)


def score_outcome(outcome: VerifierOutcome, *, partial_reward: bool = False) -> float:
    """Fleet's score of a verifier outcome (see the module docstring)."""
    score = _binary_score(outcome)
    if partial_reward and score == 0.0 and outcome.stdout:
        counts = parse_accumulators(outcome.stdout)
        if counts is not None and sum(counts) > 0:
            return counts[0] / sum(counts)
    return score


def _binary_score(outcome: VerifierOutcome) -> float:
    if not outcome.success:
        return 0.0
    value = outcome.result
    if value is None:
        return 1.0
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, (int, float)) and math.isfinite(float(value)):
        return float(value)
    if isinstance(value, str):
        try:
            number = float(value)
        except ValueError:
            return 0.0
        return number if math.isfinite(number) else 0.0
    return 0.0


def snapshot_sqlite(src: str | Path, dst: str | Path) -> None:
    """A consistent copy of a live SQLite database (the online backup API)."""
    source = sqlite3.connect(f"file:{src}?mode=ro", uri=True, timeout=10)
    try:
        target = sqlite3.connect(dst)
        try:
            source.backup(target)
        finally:
            target.close()
    finally:
        source.close()


def _parse_runner_output(stdout: str, stderr: str, exit_code: int) -> VerifierOutcome:
    idx = stdout.rfind(RESULT_MARKER)
    if idx < 0:
        tail = (stderr or stdout)[-2000:]
        return VerifierOutcome(
            success=False,
            error=f"the verifier runner exited {exit_code} without a result: {tail}",
            stdout=stdout[-4000:],
        )
    line = stdout[idx + len(RESULT_MARKER) :].strip().splitlines()[0]
    data = json.loads(line)
    return VerifierOutcome(
        success=bool(data.get("success")),
        result=data.get("result"),
        error=data.get("error"),
        stdout=str(data.get("stdout") or ""),
    )


SandboxOpener = Callable[[Path, ExecutionHints], Sandbox]


async def _clean_state(sandbox: Sandbox, target: str) -> None:
    """A reused sandbox: end every process in it, make the verifier's folder new from
    outside (each where the sandbox's kind can)."""
    if callable(getattr(sandbox, "end_processes", None)):
        await end_processes(sandbox)
    if callable(getattr(sandbox, "reset_dir", None)):
        await reset_dir(sandbox, target)


async def run_verifier_in_sandbox(
    *,
    code: str,
    seed_db: str | Path,
    current_db: str | Path,
    final_answer: str | None,
    sandbox: Sandbox | None = None,
    open_sandbox: SandboxOpener | None = None,
    timeout: float = 60.0,
    python: str = "python3",
) -> VerifierOutcome:
    """Run ``code`` in a sandbox against snapshots of the two databases.

    Either ``sandbox`` (an open sandbox to reuse) or ``open_sandbox(root,
    hints)`` (to create a fresh one, closed afterwards) must be given. The
    sandbox gets no environment variables from this process.

    A fresh sandbox is the verifier's alone (as Harbor's ``separate`` level).
    A reused one may hold what something else left there: before the
    verifier runs, every process in it is ended and the verifier's folder is
    made new from outside it (:func:`agentkit.sandbox.end_processes`,
    :func:`agentkit.sandbox.reset_dir`), so nothing running or planted there
    reaches the databases, the runner or its result (as Harbor's ``shared``
    level: the sandbox's own programs, ``python3`` included, are whatever
    its files hold; a sandbox kind without those capabilities is used as it
    is).
    """
    staging = Path(tempfile.mkdtemp(prefix="fleet-verifier-"))
    try:
        payload = staging / VERIFIER_DIR_NAME
        payload.mkdir()
        shutil.copyfile(RUNNER, payload / "verifier_runner.py")
        shutil.copyfile(seed_db, payload / "seed.sqlite")
        snapshot_sqlite(current_db, payload / "current.sqlite")
        (payload / "input.json").write_text(
            json.dumps({"code": code, "final_answer": final_answer})
        )
        owned = sandbox is None
        if sandbox is None:
            if open_sandbox is None:
                raise ValueError("run_verifier_in_sandbox needs sandbox= or open_sandbox=")
            hints = ExecutionHints(workdir="/verifier", network=False, timeout_sec=timeout)
            root = staging / "sandbox"
            root.mkdir()
            sandbox = open_sandbox(root, hints)
            await sandbox.__aenter__()
        try:
            target = f"{sandbox.workdir.rstrip('/')}/{VERIFIER_DIR_NAME}"
            if not owned:
                await _clean_state(sandbox, target)
            await sandbox.upload(payload, target)
            env = {
                "PATH": "/usr/local/bin:/usr/bin:/bin",
                "HOME": target,
                "LANG": "C.UTF-8",
                "PYTHONDONTWRITEBYTECODE": "1",
                "PYTHONNOUSERSITE": "1",
            }
            result = await sandbox.exec(
                [python, "-I", f"{target}/verifier_runner.py", target],
                cwd=target,
                env=env,
                timeout=timeout,
            )
        finally:
            if owned:
                await sandbox.close()
        if result.timed_out:
            return VerifierOutcome(
                success=False, error=f"the verifier timed out after {timeout:g}s"
            )
        return _parse_runner_output(result.stdout, result.stderr, result.exit_code)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
