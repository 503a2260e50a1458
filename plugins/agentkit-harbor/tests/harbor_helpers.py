"""Test helpers: real Harbor task directories, and a real local sandbox."""

from __future__ import annotations

import shutil
import textwrap
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "harbor"

PASS_TEST = "echo 1 > /logs/verifier/reward.txt\n"


def write_task(
    root: Path,
    name: str,
    toml: str,
    files: dict[str, str] | None = None,
    *,
    instruction: str | None = "Do the thing.\n",
    test_sh: str | None = PASS_TEST,
) -> Path:
    """Create ``root/name`` with task.toml, instruction.md, tests/test.sh and ``files``."""
    task = root / name
    task.mkdir(parents=True, exist_ok=True)
    (task / "task.toml").write_text(textwrap.dedent(toml))
    if instruction is not None:
        (task / "instruction.md").write_text(instruction)
    if test_sh is not None:
        (task / "tests").mkdir(exist_ok=True)
        (task / "tests" / "test.sh").write_text("#!/usr/bin/env bash\n" + test_sh)
    for rel, content in (files or {}).items():
        path = task / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(content))
    return task


def bwrap_works() -> bool:
    return shutil.which("bwrap") is not None


needs_bwrap = pytest.mark.skipif(not bwrap_works(), reason="needs bubblewrap")


def task_sandbox(taskset: object, task: object, root: Path) -> object:
    """A real local sandbox for ``task`` (an async context manager), on the host's
    userland: these tests are about Harbor's rules, not the task's image."""
    from agentkit.sandbox import open_sandbox

    hints = taskset.execution_hints(task)  # type: ignore[attr-defined]
    return open_sandbox("local", hints=hints, root=root, image="host")
