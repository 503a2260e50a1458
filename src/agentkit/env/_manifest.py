"""The run manifest: what was run, with which settings."""

from __future__ import annotations

import hashlib
import json
import platform
import sys
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from agentkit import registry
from agentkit._context import RunContext, public_headers
from agentkit._executor import PlannedTask
from agentkit._redact import MARKER, looks_secret, public_fields, public_url
from agentkit._version import __version__
from agentkit.rundir import RUN_SCHEMA_VERSION

__all__ = ["build_manifest", "public_options", "qualname"]


def public_options(options: dict[str, Any]) -> dict[str, Any]:
    """Options as JSON for the manifest; values of secret-looking names are hidden."""
    out: dict[str, Any] = {}
    for name, value in sorted(options.items()):
        if looks_secret(name):
            out[name] = MARKER
        elif isinstance(value, Path):
            out[name] = str(value)
        else:
            out[name] = value
    return out


def qualname(obj: Any) -> str:
    """``module.Class`` of an object, for the manifest."""
    cls = type(obj)
    return f"{cls.__module__}.{cls.__qualname__}"


def build_manifest(
    env: Any,
    ctx: RunContext,
    planned: list[PlannedTask],
    rollouts_per_task: int,
    limit: int | None,
    task_ids: Sequence[str] | None,
    sandbox_name: str,
    sandbox_options: dict[str, Any],
    sandbox_used: bool,
    sandbox_warning: str | None,
    run_options: dict[str, Any],
) -> dict[str, Any]:
    """The manifest.json document of a run (see docs/run-directory.md)."""
    return {
        "kind": "agentkit.run",
        "schema_version": RUN_SCHEMA_VERSION,
        # this run's own id, written into each of its model calls: a calls file is
        # read only for the run (and the rollout) that recorded it
        "run_id": uuid.uuid4().hex,
        "created_at": time.time(),
        "agentkit_version": __version__,
        "python": platform.python_version(),
        "platform": sys.platform,
        "plugins": [
            {"name": p.name, "distribution": p.distribution, "version": p.version}
            for p in registry.plugins()
        ],
        "taskset": dict(env.taskset_spec),
        "harness": dict(env.harness_spec),
        "context": {
            "model": ctx.model,
            "base_url": public_url(ctx.base_url),
            "api_key_env": ctx.api_key_env,
            "sampling_args": public_fields(ctx.sampling_args),
            "headers": public_headers(ctx.headers),
            "limits": {
                "max_turns": ctx.limits.max_turns,
                "max_tokens": ctx.limits.max_tokens,
                "token_limit": ctx.limits.token_limit,
                "cost_limit": ctx.limits.cost_limit,
                "message_limit": ctx.limits.message_limit,
            },
        },
        "plan": {
            "rollouts_per_task": rollouts_per_task,
            "limit": limit,
            "requested_task_ids": list(task_ids) if task_ids else None,
            "task_ids": [p.task.task_id for p in planned],
            "tasks_digest": tasks_digest(planned),
        },
        "sandbox": {
            "used": sandbox_used,
            "name": sandbox_name if sandbox_used else None,
            "options": public_options(sandbox_options) if sandbox_used else {},
        },
        "sandbox_warning": sandbox_warning,
        "rubric": env.describe_rubric(),
        "options": run_options,
    }


def tasks_digest(planned: Sequence[PlannedTask]) -> str:
    """A digest of what the planned tasks contain (input, target, metadata, grading spec).

    Resume compares it, so a task edited since the run started is noticed
    even when its id stayed the same.
    """
    h = hashlib.sha256()
    for p in planned:
        t = p.task
        payload = [t.task_id, t.input, t.target, t.metadata, t.grading_spec]
        h.update(json.dumps(payload, sort_keys=True, default=str).encode())
        h.update(b"\n")
    return h.hexdigest()
