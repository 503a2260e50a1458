"""examples/fleet/tinker_loop.py: the Fleet Tinker trainer's rollout loop on the step
API, run as a user runs it (a subprocess), offline."""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys

import pytest
from fleet_helpers import EXAMPLES

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")


def test_the_tinker_style_loop_runs_against_the_scripted_server() -> None:
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / "tinker_loop.py")],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        env={k: v for k, v in os.environ.items() if k != "FLEET_API_KEY"},
    )
    assert done.returncode == 0, done.stderr
    rows = {r["rollout"]: r for r in json.loads(done.stdout.splitlines()[-1])["rollouts"]}
    rewards = [rows[k]["reward"] for k in sorted(rows)]
    assert sorted(rewards) == [0.0, 0.0, 1.0, 1.0, 1.0, 1.0]
    # rewards [1, 0], [1, 0], [1, 1]: centred per group (+-0.5, 0), normalised across the
    # batch (std sqrt(1/6)), as main_fleet_tinker.py:139-175
    expected = 0.5 / math.sqrt(1 / 6)
    assert rows["cancel-grace-march-0"]["advantage"] == pytest.approx(expected, abs=1e-5)
    assert rows["cancel-grace-march-1"]["advantage"] == pytest.approx(-expected, abs=1e-5)
    assert rows["register-barbara-0"]["advantage"] == 0.0
    # per-token masks: model tokens 1, observation tokens 0; a one-turn give-up has none
    assert all(r["model_tokens"] > 0 and r["prompt_tokens"] > 1000 for r in rows.values())
    assert rows["cancel-grace-march-0"]["observation_tokens"] > 0
    assert rows["cancel-grace-march-1"]["observation_tokens"] == 0
    # every response ended with EOS, so the DAPO filter masked nothing
    assert not any(r["overlong"] for r in rows.values())
