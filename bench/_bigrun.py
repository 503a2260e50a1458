"""A large run directory made from a real one: its rollouts copied to many tasks.

``make_big_run(template, out, rollouts)`` takes a run directory written by
``agentkit run`` and writes one of ``rollouts`` rollouts (``per_task`` per
task) in the same format: the template's lines with new task and rollout
ids and varied rewards, an events file per rollout, tasks.jsonl, and
summary.json unless ``summary=False`` (a run killed before its end).
``make_template(workdir)`` makes such a template: ``agentkit run`` of the JSONL
arithmetic set with the chat harness against the scripted model server, two
rollouts per task. ``make_big_job(template, out, rollouts)`` makes a job directory of
such runs. Used by bench/view.py, bench/stats.py and the viewer's tests.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from agentkit.testing.model_server import ScriptedModelServer

__all__ = ["make_big_job", "make_big_run", "make_template"]

ROOT = Path(__file__).resolve().parents[1]


def make_template(workdir: Path) -> Path:
    """A real run directory, ``workdir/template``: the arithmetic set, chat harness, 2 rollouts."""
    out = workdir / "template"
    with ScriptedModelServer(ROOT / "examples" / "scripts" / "arithmetic.json") as server:
        subprocess.run(
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
                str(out),
                "--no-progress",
                "-n",
                "2",
            ],
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
    return out


def _dumps(data: Any) -> str:
    return json.dumps(data, ensure_ascii=False, separators=(",", ":"))


def make_big_run(
    template: Path,
    out: Path,
    rollouts: int,
    *,
    per_task: int = 10,
    summary: bool = True,
    shift: int = 0,
) -> Path:
    """Write a run of ``rollouts`` rollouts at ``out`` (replaced) from the run ``template``.

    A rollout scores 0 where ``(task * 7 + index + shift) % 3 == 0``, else 1.
    """
    if out.exists():
        shutil.rmtree(out)
    (out / "events").mkdir(parents=True)
    manifest = json.loads((template / "manifest.json").read_text())
    lines = [json.loads(x) for x in (template / "rollouts.jsonl").read_text().splitlines() if x]
    events = {
        d["rollout_id"]: (template / d["events_file"]).read_text()
        for d in lines
        if d.get("events_file") and (template / d["events_file"]).exists()
    }
    tasks = [f"big:t{i:05d}" for i in range((rollouts + per_task - 1) // per_task)]
    manifest["plan"]["task_ids"] = tasks
    manifest["plan"]["rollouts_per_task"] = per_task
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1))
    with open(out / "rollouts.jsonl", "w", encoding="utf-8") as fh:
        for n in range(rollouts):
            group, index = divmod(n, per_task)
            source = lines[n % len(lines)]
            d = dict(source)
            rid = f"t{group:05d}-0badc0de-r{index}"
            reward = 1.0 if (group * 7 + index + shift) % 3 else 0.0
            d.update(
                task_id=tasks[group],
                example_id=tasks[group].split(":", 1)[1],
                group=group,
                rollout_index=index,
                rollout_id=rid,
                reward=reward,
                passed=reward >= 1.0,
                rewards={k: reward for k in (source.get("rewards") or {"core.reward": 0})},
            )
            text = events.get(source["rollout_id"])
            if text is not None:
                d["events_file"] = f"events/{rid}.jsonl"
                (out / d["events_file"]).write_text(text.replace(source["rollout_id"], rid))
            fh.write(_dumps(d) + "\n")
    with open(out / "tasks.jsonl", "w", encoding="utf-8") as fh:
        for group, task_id in enumerate(tasks):
            item = task_id.split(":", 1)[1]
            fh.write(
                _dumps(
                    {
                        "type": "task",
                        "task_id": task_id,
                        "example_id": item,
                        "group": group,
                        "input": f"Task {item}: what is {group} + 1?",
                        "target": str(group + 1),
                        "metadata": {},
                        "grading_spec": None,
                    }
                )
                + "\n"
            )
    if summary:
        import agentkit.runs

        document = agentkit.runs.open(out).summary()
        document["interrupted"] = False
        (out / "summary.json").write_text(json.dumps(document, default=str))
    return out


def make_big_job(template: Path, out: Path, rollouts: int, *, cells: int = 10) -> Path:
    """Write a job directory at ``out`` (replaced) of ``cells`` cells of ``rollouts / cells``
    rollouts each (made by :func:`make_big_run`, rewards shifted per cell), its
    ``job.json`` in the format of docs/jobs.md: one axis, ``model``, ``m0``, ``m1``..."""
    if out.exists():
        shutil.rmtree(out)
    names = [f"big.chat.m{i}" for i in range(cells)]
    for i, name in enumerate(names):
        make_big_run(template, out / "cells" / name, rollouts // cells, shift=i)
    document = {
        "kind": "agentkit.job",
        "format_version": 1,
        "name": out.name,
        "created_at": 1_790_000_000.0,
        "concurrency": 64,
        "axes": {"taskset": ["big"], "harness": ["chat"], "model": [f"m{i}" for i in range(cells)]},
        "cells": [
            {
                "name": name,
                "axes": {"taskset": "big", "harness": "chat", "model": f"m{i}"},
                "run_dir": f"cells/{name}",
            }
            for i, name in enumerate(names)
        ],
        "spec": {},
        "resumes": [],
    }
    (out / "job.json").write_text(json.dumps(document, indent=1))
    return out
