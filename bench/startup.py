"""Startup cost of agentkit: how long a user waits before anything happens.

Prints the median wall time (and CPU time) of fresh processes running
``python -c pass`` (the interpreter alone, measured in the same run as a
baseline), ``python -c "import agentkit"``, ``agentkit --help``,
``agentkit plugins`` and a whole one-task chat run (``agentkit run`` of one
JSONL task with the chat harness against the scripted model server, which
this script serves from a thread), with each one's cost above the baseline
and its ratio to it, and the targets: ``import agentkit`` under 100 ms,
``agentkit plugins`` under 400 ms with the first-party plugins installed,
and the one-task chat run under 400 ms from process start to exit.

Bytecode caching is left on (``PYTHONDONTWRITEBYTECODE`` is dropped from the
children's environment), as in an installed agentkit.

Usage: ``python bench/startup.py [--runs 15]``. Figures only, never asserted.
It also reports which heavy modules each command imports.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

#: Modules ``import agentkit`` must not pull in (they load when needed).
HEAVY = ("openai", "httpx", "mcp", "cattrs", "rich", "click", "boto3", "datasets", "aiohttp")
TARGETS_MS = {"import agentkit": 100.0, "agentkit plugins": 400.0, "one-task chat run": 400.0}


def agentkit_command() -> list[str]:
    """The installed console script when there is one, else ``python -m agentkit``."""
    script = Path(sys.executable).parent / "agentkit"
    if script.exists():
        return [str(script)]
    found = shutil.which("agentkit")
    return [found] if found else [sys.executable, "-m", "agentkit"]


def time_once(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Wall and CPU (user + system) milliseconds of one fresh process."""
    import resource

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    wall = (time.perf_counter() - start) * 1000.0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime) * 1000.0
    return wall, cpu


def median_ms(argv: Any, runs: int, env: dict[str, str]) -> tuple[float, float]:
    """Median wall and CPU ms; ``argv`` may be a callable giving each run's arguments."""
    make = argv if callable(argv) else (lambda: argv)
    time_once(make(), env)  # warm the file-system and bytecode caches
    samples = [time_once(make(), env) for _ in range(runs)]
    return statistics.median(w for w, _ in samples), statistics.median(c for _, c in samples)


def heavy_imports(code: str, env: dict[str, str]) -> list[str]:
    probe = code + "\nimport sys, json\nprint(json.dumps(sorted(sys.modules)))"
    out = subprocess.run(
        [sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True
    ).stdout
    modules = json.loads(out.strip().splitlines()[-1])
    return sorted({m.split(".")[0] for m in modules} & set(HEAVY))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15, help="timed runs per command (median)")
    args = parser.parse_args()
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    cli = agentkit_command()
    from agentkit.testing.model_server import ScriptedModelServer

    workdir = Path(tempfile.mkdtemp(prefix="agentkit-bench-startup-"))
    task_file = workdir / "one.jsonl"
    task_file.write_text(json.dumps({"id": "t", "input": "What is 2 + 3?", "target": "5"}) + "\n")
    server = ScriptedModelServer({"default": {"content": "5"}}).start()
    runs_made = iter(range(1_000_000))

    def chat_run() -> list[str]:
        out = workdir / f"run-{next(runs_made)}"
        return [
            *cli,
            "run",
            f"jsonl:{task_file}",
            "chat",
            "--model",
            "scripted-model",
            "--base-url",
            server.base_url,
            "--out",
            str(out),
            "--no-progress",
        ]

    commands: dict[str, Any] = {
        "python -c pass": [sys.executable, "-c", "pass"],
        "import agentkit": [sys.executable, "-c", "import agentkit"],
        "agentkit --help": [*cli, "--help"],
        "agentkit plugins": [*cli, "plugins"],
        "one-task chat run": chat_run,
    }
    plugins = subprocess.run([*cli, "plugins"], env=env, capture_output=True, text=True)
    try:
        installed = json.loads(plugins.stdout)
        names = [f"{p['name']} ({p['distribution']} {p['version']})" for p in installed["plugins"]]
        failed = [f"{f['name']} ({f['distribution']})" for f in installed["failed"]]
    except ValueError:
        names, failed = [], [f"agentkit plugins did not print JSON: {plugins.stderr.strip()}"]

    print(f"agentkit startup, median of {args.runs} runs each ({sys.executable})")
    print(f"plugins loaded: {', '.join(names) or 'none'}")
    if failed:
        print(f"plugins failed: {', '.join(failed)}")
    print()
    try:
        results = {label: median_ms(argv, args.runs, env) for label, argv in commands.items()}
    finally:
        server.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    baseline = results["python -c pass"][0]
    print(
        f"{'command':<20} {'median ms':>10} {'cpu ms':>8} {'over python':>12} {'ratio':>7}  target"
    )
    for label, (ms, cpu) in results.items():
        target = TARGETS_MS.get(label)
        verdict = ""
        if target is not None:
            verdict = f"< {target:.0f} ms ({'met' if ms < target else 'MISSED'})"
        print(
            f"{label:<20} {ms:>10.1f} {cpu:>8.1f} {ms - baseline:>12.1f} "
            f"{ms / baseline:>6.2f}x  {verdict}"
        )
    print(
        "(wall time counts waiting for a busy CPU too: on a shared machine, the cpu column "
        "is the steadier figure)"
    )
    print()
    print("heavy modules imported (should be none for import agentkit and --help):")
    probes = {
        "import agentkit": "import agentkit",
        "agentkit --help": (
            "from agentkit.cli import main\n"
            "try:\n    main(['--help'])\nexcept SystemExit:\n    pass"
        ),
        "agentkit plugins": (
            "import io, contextlib\nfrom agentkit.cli import main\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            "    try:\n        main(['plugins'])\n    except SystemExit:\n        pass"
        ),
        "agentkit run (chat)": (
            "import agentkit.harnesses.chat, agentkit.env, agentkit.cli._run_cmd"
        ),
    }
    for label, code in probes.items():
        print(f"  {label:<18} {', '.join(heavy_imports(code, env)) or 'none'}")


if __name__ == "__main__":
    main()
