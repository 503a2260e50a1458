"""Startup cost of agentkit: how long a user waits before anything happens.

Prints the median wall time of fresh processes running ``python -c pass``
(the interpreter alone, measured in the same run as a baseline),
``python -c "import agentkit"``, ``agentkit --help`` and ``agentkit plugins``,
with each one's cost above the baseline and its ratio to it, and the
targets: ``import agentkit`` under 100 ms and ``agentkit plugins`` under
400 ms with the first-party plugins installed.

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
import time
from pathlib import Path

#: Modules ``import agentkit`` must not pull in (they load when needed).
HEAVY = ("openai", "httpx", "mcp", "cattrs", "rich", "click", "boto3", "datasets", "aiohttp")
TARGETS_MS = {"import agentkit": 100.0, "agentkit plugins": 400.0}


def agentkit_command() -> list[str]:
    """The installed console script when there is one, else ``python -m agentkit``."""
    script = Path(sys.executable).parent / "agentkit"
    if script.exists():
        return [str(script)]
    found = shutil.which("agentkit")
    return [found] if found else [sys.executable, "-m", "agentkit"]


def time_once(argv: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return (time.perf_counter() - start) * 1000.0


def median_ms(argv: list[str], runs: int, env: dict[str, str]) -> float:
    time_once(argv, env)  # warm the file-system and bytecode caches
    return statistics.median(time_once(argv, env) for _ in range(runs))


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
    cli = agentkit_command()
    commands = {
        "python -c pass": [sys.executable, "-c", "pass"],
        "import agentkit": [sys.executable, "-c", "import agentkit"],
        "agentkit --help": [*cli, "--help"],
        "agentkit plugins": [*cli, "plugins"],
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
    results = {label: median_ms(argv, args.runs, env) for label, argv in commands.items()}
    baseline = results["python -c pass"]
    print(f"{'command':<20} {'median ms':>10} {'over python':>12} {'ratio':>7}  target")
    for label, ms in results.items():
        target = TARGETS_MS.get(label)
        verdict = ""
        if target is not None:
            verdict = f"< {target:.0f} ms ({'met' if ms < target else 'MISSED'})"
        print(f"{label:<20} {ms:>10.1f} {ms - baseline:>12.1f} {ms / baseline:>6.2f}x  {verdict}")
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
    }
    for label, code in probes.items():
        print(f"  {label:<18} {', '.join(heavy_imports(code, env)) or 'none'}")


if __name__ == "__main__":
    main()
