"""The ``agentkit`` entry point: the ``harbor`` taskset provider, ``oracle`` and ``nop``."""

from __future__ import annotations

from typing import Any

from agentkit.hookspecs import hookimpl


@hookimpl
def agentkit_register_tasksets(register: Any) -> None:
    """``harbor:PATH`` (a task or a folder of tasks) or ``harbor:NAME@VERSION -T registry=...``."""
    register(
        "agentkit_harbor._taskset:HarborTaskset",
        name="harbor",
        description="Harbor tasks: a task dir, a folder, or a registry dataset",
    )


@hookimpl
def agentkit_register_harnesses(register: Any) -> None:
    """``oracle`` runs the task's solution/solve.sh; ``nop`` does nothing."""
    # references: imported when a run uses them, not when the plugins load
    register(
        "agentkit_harbor._harnesses:OracleHarness",
        name="oracle",
        description="Runs the Harbor task's own solution/solve.sh",
    )
    register(
        "agentkit_harbor._harnesses:NopHarness",
        name="nop",
        description="Does nothing: a Harbor task's tests should fail",
    )
