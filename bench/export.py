"""How fast ``agentkit export`` turns 10,000 rollouts of 20 model calls each into
training files (SkyRL, Tinker, JSONL).

Makes a run of ``--rollouts`` rollouts from a real one (``agentkit run`` of the
JSONL arithmetic set with the chat harness against the scripted model server,
its lines copied by bench/_bigrun.py) and gives every rollout a calls file of
``--calls`` model calls written as a run writes them
(``agentkit._calls.calls_json``: each prompt's ids a reference to the call
before and the ids it adds; ``--full-ids`` writes every call's whole list, as
runs did before): each prompt ``--growth``
tokens longer than the last (the previous completion and a tool result), the
first ``--first`` tokens long, each completion 40 tokens with logprobs, so the
calls of one rollout merge into one sequence of about 4,500 tokens. Then
prints, for one run each:

* **baseline**: reading what any exporter must read: ``rollouts.jsonl`` and
  every calls file, each line parsed as JSON (with orjson, as the export's
  reader parses them), in this process;
* ``export_run`` to ``skyrl``, ``tinker`` and ``jsonl`` (sequences, advantages,
  writing), in this process, and the ratio to the baseline.

The target: each export under 10 s. Usage: ``python bench/export.py
[--rollouts 10000] [--calls 20] [--growth 200] [--first 500]``. Figures only.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import orjson
from _bigrun import make_big_run, make_template

from agentkit._calls import ModelCall, calls_json
from agentkit._convert import unstructure
from agentkit.rundir import CALLS_DIR
from agentkit.training import export_run

COMPLETION = 40


def calls_text(
    rollout_id: str, calls: int, growth: int, first: int, full_ids: bool, run_id: str | None
) -> str:
    """One rollout's calls file: ``calls`` calls whose prompts each extend the last, each
    with the run's ``run_id`` (as the run store writes them)."""
    made = []
    prompt = [(7 * i) % 150_000 for i in range(first)]
    for index in range(calls):
        completion = [(prompt[-1] + 13 * i) % 150_000 for i in range(COMPLETION)]
        call = ModelCall(
            rollout_id=rollout_id,
            run_id=run_id,
            index=index,
            protocol="chat",
            path="/v1/chat/completions",
            model="m",
            request={"model": "m", "messages": [{"role": "user", "content": "q"}]},
            forwarded={"return_token_ids": True, "logprobs": True},
            status=200,
            response={"choices": [{"message": {"role": "assistant", "content": "a"}}]},
            finish_reason="tool_calls" if index + 1 < calls else "stop",
            prompt_token_ids=prompt,
            completion_token_ids=completion,
            completion_logprobs=[-0.01 * (i % 50) for i in range(COMPLETION)],
            token_source="server",
        )
        made.append(call)
        observation = [(3 * i + index) % 150_000 for i in range(growth - COMPLETION)]
        prompt = prompt + completion + observation
    lines = [unstructure(c) for c in made] if full_ids else calls_json(made)
    return "".join(json.dumps(line, separators=(",", ":")) + "\n" for line in lines)


def make_run(
    workdir: Path, rollouts: int, calls: int, growth: int, first: int, full_ids: bool = False
) -> Path:
    template = make_template(workdir)
    run = make_big_run(template, workdir / "big", rollouts, summary=False)
    ids = [json.loads(x)["rollout_id"] for x in (run / "rollouts.jsonl").read_text().splitlines()]
    (run / CALLS_DIR).mkdir()
    # one rollout's file, its id swapped in: the same bytes to parse for every rollout
    run_id = json.loads((run / "manifest.json").read_text()).get("run_id")
    text = calls_text("ROLLOUT_ID", calls, growth, first, full_ids, run_id)
    for rollout_id in ids:
        (run / CALLS_DIR / f"{rollout_id}.jsonl").write_text(text.replace("ROLLOUT_ID", rollout_id))
    return run


def baseline(run: Path) -> int:
    """Parse rollouts.jsonl and every calls file line: the floor of any export."""
    count = 0
    for line in (run / "rollouts.jsonl").read_text().splitlines():
        rollout_id = json.loads(line)["rollout_id"]
        with open(run / CALLS_DIR / f"{rollout_id}.jsonl", "rb") as fh:
            for raw in fh:
                orjson.loads(raw)
                count += 1
    return count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rollouts", type=int, default=10_000)
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--growth", type=int, default=200)
    parser.add_argument("--first", type=int, default=500)
    parser.add_argument("--full-ids", action="store_true", help="no delta encoding")
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="agentkit-bench-export-"))
    try:
        started = time.perf_counter()
        run = make_run(workdir, args.rollouts, args.calls, args.growth, args.first, args.full_ids)
        size = sum(p.stat().st_size for p in (run / CALLS_DIR).iterdir())
        print(
            f"run: {args.rollouts} rollouts x {args.calls} calls, calls files "
            f"{size / 1e9:.2f} GB (made in {time.perf_counter() - started:.1f} s)"
        )
        print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
        t0, c0 = time.perf_counter(), time.process_time()
        n = baseline(run)
        base = time.perf_counter() - t0
        print(
            f"baseline (parse every rollout and call line, {n} calls): {base:.2f} s "
            f"({time.process_time() - c0:.2f} s of CPU)"
        )
        for fmt, name in (("skyrl", "out.json"), ("tinker", "out.jsonl"), ("jsonl", "t.jsonl")):
            t0, c0 = time.perf_counter(), time.process_time()
            summary = export_run(run, workdir / name, format=fmt)  # type: ignore[arg-type]
            took, cpu = time.perf_counter() - t0, time.process_time() - c0
            verdict = "under" if took < 10 else "NOT under"
            print(
                f"export --format {fmt}: {took:.2f} s ({took / base:.2f}x baseline; "
                f"{cpu:.2f} s of CPU), {summary.written} written; {verdict} 10 s"
            )
            (workdir / name).unlink()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
