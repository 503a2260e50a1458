"""The README's offline example runs work as written (examples that run)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from agentkit.testing.model_server import ScriptedModelServer

ROOT = Path(__file__).resolve().parents[1]


def test_arithmetic_jsonl_with_the_chat_harness_scores_every_task(tmp_path: Path) -> None:
    with ScriptedModelServer(ROOT / "examples" / "scripts" / "arithmetic.json") as server:
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "agentkit",
                "run",
                f"jsonl:{ROOT / 'examples' / 'jsonl' / 'arithmetic.jsonl'}",
                "chat",
                "--model",
                "scripted",
                "--base-url",
                server.base_url,
                "--out",
                str(tmp_path / "run"),
                "--json",
            ],
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, "NO_COLOR": "1"},
        )
    assert proc.returncode == 0, proc.stderr
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["finished"] == 10 and summary["errors"] == 0
    assert summary["mean_reward"] == 1.0


def readme_block(title: str) -> list[list[str]]:
    """The commands of the README's bash block under ``## title``, as argument lists."""
    import shlex

    text = (ROOT / "README.md").read_text()
    block = text.split(f"## {title}", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    commands: list[list[str]] = []
    for line in block.replace("\\\n", " ").splitlines():
        words = shlex.split(line, comments=True)
        if words:
            commands.append(words)
    return commands


def test_the_readme_model_run_with_show_and_resume_works_as_written(tmp_path: Path) -> None:
    commands = readme_block("A model run, steered")
    assert [c[:2] for c in commands] == [
        ["agentkit", "run"],
        ["agentkit", "show"],
        ["agentkit", "show"],
        ["agentkit", "run"],
        ["agentkit", "runs"],
        ["agentkit", "run"],
        ["agentkit", "runs"],
        ["agentkit", "compare"],
    ]
    assert "--temperature" in commands[0] and "--rollout" in commands[1]
    assert "--resume" in commands[3]
    assert "--compare" in commands[6]
    runs = tmp_path / "runs"
    outputs = []
    for words in commands:
        args = [w.replace("runs/", f"{runs}/") for w in words[1:]]
        if args == ["runs"]:
            args.append(str(runs))
        proc = subprocess.run(
            [sys.executable, "-m", "agentkit", *args],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=ROOT,
            env={**os.environ, "NO_COLOR": "1"},
        )
        assert proc.returncode == 0, (args, proc.stderr)
        outputs.append(proc.stdout)
    assert "What is 2 + 3?" in outputs[1] and "[assistant] 5" in outputs[1]
    assert "No failed rollouts" in outputs[2]
    assert "arith" in outputs[4]
    # the second model gets 3 of the 10 tasks wrong, and one right once in two rollouts
    leaderboard = outputs[6]
    assert "arith" in leaderboard and "sloppy" in leaderboard
    assert leaderboard.index("arith") < leaderboard.index("sloppy")  # ranked, best first
    assert "Shared tasks: 10" in outputs[7], outputs[7]
    assert "Difference A - B: +0.350" in outputs[7], outputs[7]  # (3 + 0.5) / 10
    assert "A higher on 4, B higher on 0, tied on 6" in outputs[7], outputs[7]


def test_the_train_live_example_runs_and_its_policy_improves(tmp_path: Path) -> None:
    """examples/service/train_live.py (docs/training-live.md): every group within the
    bound, the policy's switch visible in the rewards, the run directory written."""
    proc = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "service" / "train_live.py"), str(tmp_path / "r")],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "NO_COLOR": "1"},
    )
    assert proc.returncode == 0, proc.stderr
    lines = [json.loads(line) for line in proc.stdout.splitlines()]
    steps, report = lines[:-1], lines[-1]["report"]
    assert [s["step"] for s in steps] == [0, 1, 2, 3]
    assert all(x <= 1 for s in steps for x in s["staleness"])
    assert steps[0]["mean_reward"] == 0.0 and steps[-1]["mean_reward"] == 1.0
    assert all(s["sequences"] == 8 for s in steps)
    assert report["delivered"] == 8 and report["policy_version"] == 4
    assert (tmp_path / "r" / "rollouts.jsonl").exists()
