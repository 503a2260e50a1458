"""A real agent program's ``agentkit export`` files loaded by the trainers' own packages.

opencode and mini-swe-agent (the real programs, as their plugins' tests run them)
do the Harbor hello-world task through the model proxy with token ids against the
scripted model server, in three calls that make two training sequences (a merged
call, then a prefix break: ``agentkit.testing.programs.hello_world_token_script``).
The exports hold exactly the ids and logprobs the server sent
(``assert_exports_carry_the_server_tokens``), and SkyRL, Tinker and verifiers load
them: SkyRL validates the step-wise output, each Tinker line builds a
``tinker.Datum`` whose tokens are the sequence's, verifiers' branches are the
sequences.

The programs run here, in the trainers session, rather than in the tests session
with their run directory handed over: a run directory left by another session
could be stale or missing, and a session must pass or fail on its own. The
session installs the Harbor, opencode and mini-swe-agent plugins and the programs
(noxfile.py's ``trainers``).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from agentkit import AgentEnv
from agentkit.testing.model_server import ScriptedModelServer
from agentkit.testing.programs import (
    assert_exports_carry_the_server_tokens,
    harbor_rollout,
    hello_world_token_script,
    need_harbor_task,
)

pytestmark = pytest.mark.anyio

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "harbor"

#: Per program: its harness options, the script's options, and what it needs.
PROGRAMS: dict[str, tuple[dict[str, Any], dict[str, Any], str]] = {
    "opencode": ({}, {"describe": True, "submit": None}, "AGENTKIT_OPENCODE_BIN"),
    "mini-swe-agent": (
        {"retry_attempts": 1},
        {"describe": False, "submit": "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"},
        "AGENTKIT_MINI_SWE_AGENT",
    ),
}


def need(program: str) -> None:
    """Skip (fail under CI=true) when the program, bubblewrap or the Harbor task is missing."""
    need_harbor_task(EXAMPLES / "hello-world")
    variable = PROGRAMS[program][2]
    missing = [
        what
        for what, ok in (
            ("bubblewrap (bwrap)", shutil.which("bwrap") is not None),
            (f"{program} (${variable})", bool(os.environ.get(variable))),
        )
        if not ok
    ]
    if missing:
        message = f"not installed: {', '.join(missing)} (python3 -m nox -s trainers installs them)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)


@pytest.mark.parametrize("program", sorted(PROGRAMS))
async def test_the_trainers_load_a_real_programs_export(
    program: str, model_server: ScriptedModelServer, tmp_path: Path
) -> None:
    import tinker
    import verifiers.v1 as vf
    from skyrl.train.generators.base import TrajectoryID
    from skyrl.train.utils.trainer_utils import validate_generator_output

    need(program)
    options, script, _ = PROGRAMS[program]
    model_server.set_script(hello_world_token_script(**script))
    env = AgentEnv.from_names(f"harbor:{EXAMPLES}", program, **options)
    [hello] = [t.task_id for t in env.taskset if t.task_id.endswith(":hello-world")]
    run_dir = tmp_path / "run"
    rollout = await harbor_rollout(
        env, hello, server=model_server, out=run_dir, sandbox_options={"image": "host"},
        token_ids=True,
    )  # fmt: skip
    assert rollout.rewards["core.reward"] == 1.0
    sequences = assert_exports_carry_the_server_tokens(run_dir, rollout.rollout_id, model_server)
    assert sequences == [[0, 1], [2]]

    output = json.loads((run_dir / "export.skyrl").read_text())
    pairs = zip(output["prompt_token_ids"], output["response_ids"], strict=True)
    tokens = [prompt + response for prompt, response in pairs]
    output["trajectory_ids"] = [TrajectoryID(**t) for t in output["trajectory_ids"]]
    validate_generator_output(1, output, step_wise=True)  # 1 rollout, 2 sequences
    assert output["is_last_step"] == [False, True]

    lines = [json.loads(x) for x in (run_dir / "export.tinker").read_text().splitlines()]
    datums = [
        tinker.Datum(
            model_input=tinker.ModelInput.model_validate(line["model_input"]),
            loss_fn_inputs={k: tinker.TensorData(**v) for k, v in line["loss_fn_inputs"].items()},
        )
        for line in lines
    ]
    assert [d.model_input.to_ints() for d in datums] == [t[:-1] for t in tokens]
    assert [d.loss_fn_inputs["target_tokens"].tolist() for d in datums] == [t[1:] for t in tokens]

    (line,) = (run_dir / "export.verifiers").read_text().splitlines()
    trace = vf.WireTrace.model_validate_json(line)
    assert [b.token_ids for b in trace.branches] == tokens
    assert trace.reward == 1.0
