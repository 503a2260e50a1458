"""Harnesses with tools against the real vLLM, on the Harbor ``hello-world`` task.

The scripted tiny model answers every prompt with tools with the same ``bash``
call (``tests/servers/scripted_model.py``: it has not learnt to tell programs
apart), so these runs are cut by the harness's own limits rather than finished
by the model; what they hold is what every run against a real server must:
every call's ids complete, exports the trainers load, and the trainer's check.
mini-swe-agent's ``bash`` tool is the one the model calls: its command writes
the file.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest
from checks import (
    FORMATS,
    assert_a_forward_pass_reproduces,
    assert_complete_ids,
    assert_the_trainers_load,
    export,
)

from agentkit.env import AgentEnv
from agentkit.testing.programs import need_harbor_task
from conftest import Server

pytestmark = pytest.mark.anyio

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "harbor"

#: harness -> (its options, the variable naming its installed program, or None)
HARNESSES: dict[str, tuple[dict[str, Any], str | None]] = {
    "terminal": ({"max_turns": 2, "action_format": "tools"}, None),
    "mini-swe-agent": (
        {"retry_attempts": 1, "config": {"agent": {"step_limit": 2}}},
        "AGENTKIT_MINI_SWE_AGENT",
    ),
}


def need(harness: str) -> None:
    """Skip (fail under CI=true) when bubblewrap, the program or the Harbor task is missing."""
    need_harbor_task(EXAMPLES / "hello-world")
    variable = HARNESSES[harness][1]
    missing = [] if shutil.which("bwrap") else ["bubblewrap (bwrap)"]
    if variable is not None and not os.environ.get(variable):
        missing.append(f"{harness} (${variable})")
    if missing:
        message = f"not installed: {', '.join(missing)} (python3 -m nox -s servers installs them)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)


@pytest.mark.parametrize("harness", sorted(HARNESSES))
async def test_a_harness_with_tools_against_vllm_holds_the_trainers_check(
    harness: str, vllm: Server, tmp_path: Path
) -> None:
    need(harness)
    env = AgentEnv.from_names(f"harbor:{EXAMPLES}", harness, **HARNESSES[harness][0])
    [hello] = [t.task_id for t in env.taskset if t.task_id.endswith(":hello-world")]
    run_dir = tmp_path / "run"
    results = await env.evaluate(
        task_ids=[hello], model=vllm.model, base_url=vllm.base_url, out=run_dir,
        token_ids=True, sandbox_options={"image": "host"},
    )  # fmt: skip
    [rollout] = results.rollouts
    # it ran (a limit may have ended it: mini-swe-agent's step limit is a timeout)
    assert rollout.status in ("completed", "failed", "timeout"), rollout.error
    assert rollout.calls_without_tokens == []
    calls = assert_complete_ids(run_dir)
    assert len(calls) >= 2
    files = {fmt: export(run_dir, fmt) for fmt in FORMATS}
    assert_the_trainers_load(files)
    assert assert_a_forward_pass_reproduces(vllm.model_dir, files, calls) > 0
