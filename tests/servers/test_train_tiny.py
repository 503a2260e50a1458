"""examples/train-tiny (docs/training-live.md's worked example): a real RL loop on the
CPU, vLLM serving a tiny model whose LoRA adapter a plain-``torch`` trainer changes
each step, agentkit's rollout service feeding it, at ``max_staleness`` 0 and 2.

The example checks itself as it goes and exits 1 when a check fails; this test
runs it and checks its summary again, and (b) from the run directories' own
calls files rather than from the example's word."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import tiny_models
from checks import TOLERANCE

import agentkit.runs
from conftest import MODEL_CACHE, ROOT, need

EXAMPLE = ROOT / "examples" / "train-tiny" / "train.py"


def test_the_cpu_rl_loop_is_on_policy_bounded_and_learns(tmp_path: Path) -> None:
    vllm = need("AGENTKIT_VLLM", "vLLM")
    # random weights, sampled at temperature 1 (the session's scripted model is greedy)
    model = tiny_models.build(tiny_models.RANDOM, MODEL_CACHE)
    out = tmp_path / "train"
    done = subprocess.run(
        [sys.executable, str(EXAMPLE), "--vllm", vllm, "--model", str(model), "--out", str(out)],
        capture_output=True, text=True, timeout=900, check=False,
    )  # fmt: skip
    # its last lines say which checks failed, with the times
    assert done.returncode == 0, f"{done.stderr[-1500:]}\n{done.stdout[-2500:]}"
    summary = json.loads((out / "summary.json").read_text())
    runs = {run["max_staleness"]: run for run in summary["runs"]}
    assert sorted(runs) == [0, 2]
    for bound, run in runs.items():
        steps = run["steps"]
        assert run["failed"] == [], run["failed"]
        # (a) the trainer's forward pass under the version the records name gives every
        # sampled token the server's logprob
        assert all(s["max_logprob_delta"] < TOLERANCE for s in steps), steps
        # (b) from the calls files: no delivered group beyond the bound
        calls = agentkit.runs.open(out / f"staleness-{bound}" / "run")
        most = 0
        for step in steps:
            for group in step["groups"]:
                tags = [c.policy_version for rid in group["rollout_ids"] for c in calls.calls(rid)]
                versions = [v for v in tags if v is not None]
                assert versions and len(versions) == len(tags), group
                behind = step["version"] - min(versions)
                assert behind <= bound, f"step {step['step']}: group {group} is {behind} behind"
                assert behind == group["behind"] == group["staleness"], group
                most = max(most, behind)
        assert run["report"]["delivered"] == len(steps) * len(steps[0]["groups"])
        if bound:
            # the bound was reached, and acted: the groups past it were dropped
            assert most == bound, most
            assert run["report"]["dropped_stale"] > 0, run["report"]
        # (c) the reward rises: the delivered groups' mean reward, and the policy's own
        # probability of the rewarded answer from version 0 to the last
        third = len(steps) // 3
        first = sum(s["mean_reward"] for s in steps[:third]) / third
        last = sum(s["mean_reward"] for s in steps[-third:]) / third
        assert last > first, [s["mean_reward"] for s in steps]
        p = run["answer_probability"]
        assert p[-1] > p[0] + 0.3, p
