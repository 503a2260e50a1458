"""A huge plan is counted and refused before anything is allocated for it.

``-n 1000000000 --dry-run`` used to reach 2.9 GB in 30 s, and a job of a
million cells 1.5 GB in two minutes, without a word. Both now stop at once
with one error naming the setting and the limit (``MAX_ROLLOUTS``,
``MAX_CELLS``; raised with ``AGENTKIT_MAX_ROLLOUTS`` / ``AGENTKIT_MAX_CELLS``).
The command-line cases run in a subprocess whose address space is capped
(``RLIMIT_AS``, as ``prlimit --as``): a regression that allocates the plan
fails with a MemoryError instead of eating the machine.
"""

from __future__ import annotations

import itertools
import os
import resource
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentkit import AgentEnv, HarnessResult, Rubric, SpecError, Task, Taskset
from agentkit.jobs._expand import count_cells
from agentkit.validation import MAX_CELLS, MAX_ROLLOUTS

ROOT = Path(__file__).resolve().parents[1]
ARITH = f"jsonl:{ROOT / 'examples' / 'jsonl' / 'arithmetic.jsonl'}"
JOB = ROOT / "examples" / "jobs" / "arithmetic.toml"
#: The address space the command may use: agentkit's imports need about 300 MB of it.
CAP = 1 << 30


def capped(*args: str, cwd: Path = ROOT, **env: str) -> subprocess.CompletedProcess[str]:
    """``agentkit ARGS`` with its address space capped at :data:`CAP`."""

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (CAP, CAP))

    base = {k: v for k, v in os.environ.items() if not k.startswith("AGENTKIT_MAX_")}
    return subprocess.run(
        [sys.executable, "-m", "agentkit", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
        env={**base, "NO_COLOR": "1", **env},
        preexec_fn=limit,
    )


def error_line(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 2, (proc.stdout, proc.stderr[-2000:])
    assert "Traceback" not in proc.stderr and "MemoryError" not in proc.stderr
    [line] = proc.stderr.strip().splitlines()
    return line


def test_a_billion_rollouts_are_refused_at_once() -> None:
    line = error_line(capped("run", ARITH, "chat", "--model", "m", "-n", "1000000000", "--dry-run"))
    assert line == (
        "Error: the run would plan 10,000,000,000 rollouts (10 tasks × 1,000,000,000 "
        "rollouts per task), more than one process plans (1,000,000, MAX_ROLLOUTS): lower "
        "rollouts_per_task (-n) or the tasks (--limit, --task), or raise the limit with the "
        "environment variable AGENTKIT_MAX_ROLLOUTS"
    )
    # the limit is the one documented, and the variable raises (or lowers) it
    assert MAX_ROLLOUTS == 1_000_000
    lowered = capped("run", ARITH, "chat", "--model", "m", "-n", "5", "--dry-run",
                     AGENTKIT_MAX_ROLLOUTS="49")  # fmt: skip
    assert "the run would plan 50 rollouts" in error_line(lowered)
    raised = capped("run", ARITH, "chat", "--model", "m", "-n", "5", "--dry-run",
                    AGENTKIT_MAX_ROLLOUTS="50")  # fmt: skip
    assert raised.returncode == 0, raised.stderr
    bad = capped("run", ARITH, "chat", "--model", "m", "--dry-run", AGENTKIT_MAX_ROLLOUTS="lots")
    assert error_line(bad) == (
        "Error: AGENTKIT_MAX_ROLLOUTS='lots': expected a whole number of at least 1"
    )


def test_a_million_cells_are_refused_at_once(tmp_path: Path) -> None:
    values = ", ".join(str(v) for v in range(10))
    axes = "\n".join(f'"sampling_args.x{i}" = [{values}]' for i in range(6))
    (tmp_path / "big.toml").write_text(
        f'[[tasksets]]\nspec = "{ARITH}"\n[[harnesses]]\nname = "chat"\n'
        f'[[models]]\nname = "m"\n[matrix]\n{axes}\n'
        "[[exclude]]\nx0 = 0\nx1 = 0\n"
    )
    line = error_line(capped("job", "run", "big.toml", "--dry-run", cwd=tmp_path))
    assert line == (
        "Error: big.toml: matrix: the job would have 990,000 cells (1 taskset × 1 harness × "
        "1 model × 10 sampling_args.x0 × 10 sampling_args.x1 × 10 sampling_args.x2 × 10 "
        "sampling_args.x3 × 10 sampling_args.x4 × 10 sampling_args.x5, less 10,000 "
        "excluded), more than one job has (10,000, MAX_CELLS): vary fewer settings or "
        "values, or raise the limit with the environment variable AGENTKIT_MAX_CELLS"
    )
    assert MAX_CELLS == 10_000
    # the flags' matrix is counted the same way
    flags = capped(
        "job", "run", "--taskset", ARITH, "--harness", "chat", "--dry-run",
        *itertools.chain.from_iterable(
            ("--matrix", f"sampling_args.y{i}={','.join(map(str, range(100)))}")
            for i in range(3)
        ),
    )  # fmt: skip
    assert "the command line: matrix: the job would have 1,000,000 cells" in error_line(flags)


def test_a_job_counts_its_cells_and_their_rollouts_together() -> None:
    # 4 cells; a limit of 3 refuses it, 4 lets it through
    line = error_line(capped("job", "run", str(JOB), "--dry-run", AGENTKIT_MAX_CELLS="3"))
    assert "the job would have 4 cells (1 taskset × 1 harness × 2 model × 2 " in line
    assert capped("job", "run", str(JOB), "--dry-run", AGENTKIT_MAX_CELLS="4").returncode == 0
    # 4 cells × 10 tasks × 3 rollouts = 120: the fourth cell is refused, before it plans
    line = error_line(
        capped("job", "run", str(JOB), "-n", "3", "--dry-run", AGENTKIT_MAX_ROLLOUTS="100")
    )
    assert line == (
        "Error: cell arith.chat.weak.temperature=0.7: the run would plan 30 rollouts (10 "
        "tasks × 3 rollouts per task), more than one process plans (100, MAX_ROLLOUTS; the "
        "job's 3 cells before it plan 90): lower rollouts_per_task (-n) or the tasks "
        "(--limit, --task), or raise the limit with the environment variable "
        "AGENTKIT_MAX_ROLLOUTS"
    )
    one_cell = capped("job", "run", str(JOB), "-n", "1000000000", "--dry-run")
    assert "cell arith.chat.strong.temperature=0.0: the run would plan 10,000,000,000" in (
        error_line(one_cell)
    )


class Endless(Taskset):
    """A taskset that does not know its length, and never ends."""

    taskset_id = "endless"

    def __init__(self) -> None:
        self.read = 0
        self.default_grading_spec = Rubric([lambda output, target: 1.0])

    def __iter__(self) -> Iterator[Task]:
        for i in itertools.count():
            self.read += 1
            if self.read > 10_000:  # a plan that reads on would never end: fail instead
                raise AssertionError("the taskset was read past the rollout limit")
            yield Task(task_id=f"endless:{i}", input="q")

    def get_task(self, task_id: str) -> Task:
        return Task(task_id=task_id, input="q")


class Done:
    async def run(self, task: Task, context: Any = None, on_event: Any = None) -> HarnessResult:
        return HarnessResult(status="completed", output="")


def test_a_taskset_without_a_length_is_read_no_further_than_the_limit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AGENTKIT_MAX_ROLLOUTS", "100")
    taskset = Endless()
    env = AgentEnv(taskset, Done())
    with pytest.raises(SpecError, match=r"the run would plan 102 rollouts \(51 tasks × 2 "):
        env.plan(rollouts_per_task=2)
    assert taskset.read == 52  # 51 tasks kept (one past the limit) and one looked at: no more
    plan = env.plan(rollouts_per_task=2, limit=50)
    assert plan["planned"] == 100
    with pytest.raises(SpecError, match="the run would plan 1,000,000,000 rollouts"):
        AgentEnv(taskset, Done()).plan(rollouts_per_task=10**9, limit=1)


@given(
    sizes=st.lists(st.integers(1, 4), min_size=1, max_size=5),
    excludes=st.lists(
        st.dictionaries(st.integers(0, 4), st.integers(0, 4), min_size=1), max_size=6
    ),
)
def test_count_cells_is_exact(sizes: list[int], excludes: list[dict[int, int]]) -> None:
    axes = [(f"a{i}", [f"v{j}" for j in range(n)]) for i, n in enumerate(sizes)]
    # exclusions name axes the job has (labels it may not: such never match)
    rules: list[Mapping[str, str]] = [
        {f"a{k}": f"v{v}" for k, v in x.items() if k < len(sizes)} for x in excludes
    ]
    rules = [r for r in rules if r]
    brute = sum(
        not any(all(combo[int(k[1:])] == v for k, v in r.items()) for r in rules)
        for combo in itertools.product(*(labels for _, labels in axes))
    )
    assert count_cells(axes, rules) == brute
