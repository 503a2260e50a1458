"""The agentkit plugin module (entry point ``fleet``): what this distribution registers."""

from __future__ import annotations

from typing import Any

from agentkit.hookspecs import hookimpl


@hookimpl
def agentkit_register_tasksets(register: Any) -> None:
    """``fleet``: Fleet task JSON from S3, a file or a directory, with the train/eval split."""
    register(
        "agentkit_fleet.taskset:fleet_taskset",  # imported when a run uses it
        name="fleet",
        description="Fleet task JSON (S3, file, directory)",
    )


@hookimpl
def agentkit_register_harnesses(register: Any) -> None:
    """``fleet-tool-call``: the Fleet tool-call loop over MCP, scored by the task's verifier."""
    register(
        "agentkit_fleet.harness:FleetToolCallHarness",
        name="fleet-tool-call",
        description="Fleet tool-call loop over MCP (<tool_call> JSON, <done>); verifier reward.",
    )


@hookimpl
def agentkit_register_commands(cli: Any) -> None:
    """``agentkit fleet split SRC --out DIR``."""
    # deferred: click and the commands, which a run through the Python API never needs
    from agentkit_fleet.cli import fleet_group

    cli.add_command(fleet_group)
