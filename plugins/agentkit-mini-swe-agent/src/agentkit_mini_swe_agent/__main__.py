"""``python -m agentkit_mini_swe_agent install``: a project-local mini-swe-agent.

Creates a virtual environment (``./.cache/mini-swe-agent/venv`` by default)
with the pinned mini-swe-agent and what it needs, then builds its sandbox
runtime in the cache so the first rollout does not wait for it.
"""

from __future__ import annotations

import argparse
import sys

from agentkit import HarnessError
from agentkit_mini_swe_agent._install import (
    LOCAL_INSTALL,
    MINI_SWE_AGENT_VERSION,
    find_mini_swe_agent,
    install_mini_swe_agent,
)
from agentkit_mini_swe_agent._runtime import portable_runtime


def main(argv: list[str] | None = None) -> int:
    """Parse the command line and run it; returns the exit status."""
    parser = argparse.ArgumentParser(
        prog="python -m agentkit_mini_swe_agent",
        description="Install mini-swe-agent for agentkit's mini-swe-agent harness.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    install = sub.add_parser("install", help="create a virtual environment with mini-swe-agent")
    install.add_argument(
        "--dir", default=LOCAL_INSTALL, help=f"where to create it (default: ./{LOCAL_INSTALL})"
    )
    install.add_argument(
        "--version",
        default=MINI_SWE_AGENT_VERSION,
        help=f"the mini-swe-agent version (default: {MINI_SWE_AGENT_VERSION}, the tested one)",
    )
    install.add_argument(
        "--python", default=None, help="the interpreter to base it on (default: this one's)"
    )
    args = parser.parse_args(argv)
    try:
        mini = install_mini_swe_agent(args.dir, version=args.version, python=args.python)
        runtime = portable_runtime(find_mini_swe_agent(str(mini)))
    except HarnessError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"mini-swe-agent {args.version}: {mini}")
    print(f"sandbox runtime: {runtime.root}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
