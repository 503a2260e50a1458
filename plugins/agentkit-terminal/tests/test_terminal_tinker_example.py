"""examples/terminal/tinker_loop.py: a Tinker-style loop on Harbor tasks, turn by turn,
run as a user runs it (a subprocess), offline against the scripted model server."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from terminal_helpers import EXAMPLES, needs_bwrap

pytestmark = needs_bwrap


def test_the_tinker_style_loop_trains_on_harbor_tasks_turn_by_turn() -> None:
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / "tinker_loop.py")],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    rows = {r["rollout"]: r for r in json.loads(done.stdout.splitlines()[-1])["rollouts"]}
    # the rewards are Harbor's verifier's: a solution, a wrong greeting, giving up at once
    assert {k: r["reward"] for k, r in rows.items()} == {
        "hello-world-0": 1.0,
        "hello-world-1": 0.0,
        "wrong-on-purpose-0": 1.0,
        "wrong-on-purpose-1": 0.0,
        "word-stats-0": 1.0,
        "word-stats-1": 1.0,
    }
    # groups [1, 0], [1, 0], [1, 1]: centred per group (+-0.5, 0), normalised across the
    # batch (std sqrt(1/6))
    expected = 0.5 / (1 / 6) ** 0.5
    assert rows["hello-world-0"]["advantage"] == pytest.approx(expected, abs=1e-5)
    assert rows["hello-world-1"]["advantage"] == pytest.approx(-expected, abs=1e-5)
    assert rows["word-stats-0"]["advantage"] == 0.0
    # per-token masks: the model's tokens 1, the observations' 0; giving up at once has none
    assert all(r["model_tokens"] > 0 and r["prompt_tokens"] > 200 for r in rows.values())
    assert rows["hello-world-0"]["observation_tokens"] > 0
    assert rows["wrong-on-purpose-1"]["observation_tokens"] == 0
    assert not any(r["overlong"] for r in rows.values())
