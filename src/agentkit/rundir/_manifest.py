"""Reading ``manifest.json``: what a run is, and its id."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from agentkit.rundir._layout import (
    MANIFEST,
    READABLE_SCHEMA_VERSIONS,
    RUN_SCHEMA_VERSION,
    RunDirError,
)
from agentkit.rundir._types import RunInfo

__all__ = ["read_manifest", "run_id_of", "run_info"]


def read_manifest(run_dir: Path) -> dict[str, Any]:
    """The run's ``manifest.json``; a :class:`~agentkit.rundir.RunDirError` names the file
    when there is none, it is not JSON, not an agentkit run's manifest, or of a schema
    version this agentkit does not read."""
    path = Path(run_dir) / MANIFEST
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise RunDirError(
            f"{run_dir}: no {MANIFEST}; this is not an agentkit run directory"
        ) from None
    except ValueError as exc:
        raise RunDirError(f"{path}: not valid JSON ({exc})") from None
    if not isinstance(data, dict) or data.get("kind") != "agentkit.run":
        raise RunDirError(f"{path}: not an agentkit run manifest")
    version = data.get("schema_version")
    if version not in READABLE_SCHEMA_VERSIONS:
        raise RunDirError(
            f"{path}: schema_version {version!r} is not supported "
            f"(this agentkit writes version {RUN_SCHEMA_VERSION} and reads "
            f"{', '.join(map(str, READABLE_SCHEMA_VERSIONS))})"
        )
    return data


def run_id_of(run_dir: Path) -> str | None:
    """The ``run_id`` of the run's manifest.json (None: a run made before runs had ids,
    or no manifest to read)."""
    try:
        manifest = json.loads((Path(run_dir) / MANIFEST).read_bytes())
    except (OSError, ValueError):
        return None
    run_id = manifest.get("run_id") if isinstance(manifest, dict) else None
    return run_id if isinstance(run_id, str) else None


def run_info(path: Path, m: dict[str, Any]) -> RunInfo:
    """What the run is, from its manifest ``m`` (as :func:`read_manifest` gives it)."""
    ctx = m.get("context") or {}
    ts = m.get("taskset") or {}
    h = m.get("harness") or {}
    plan = m.get("plan") or {}
    sb = m.get("sandbox") or {}
    return RunInfo(
        path=path,
        schema_version=int(m.get("schema_version", 1)),
        created_at=float(m.get("created_at") or 0.0),
        resumed_at=list(m.get("resumed_at") or []),
        agentkit_version=m.get("agentkit_version"),
        taskset=ts.get("spec") or ts.get("taskset_id"),
        taskset_options=dict(ts.get("options") or {}),
        harness=h.get("name") or h.get("class"),
        harness_options=dict(h.get("options") or {}),
        model=ctx.get("model"),
        base_url=ctx.get("base_url"),
        api_key_env=ctx.get("api_key_env"),
        sampling_args=dict(ctx.get("sampling_args") or {}),
        headers=dict(ctx.get("headers") or {}),
        limits=dict(ctx.get("limits") or {}),
        rollouts_per_task=int(plan.get("rollouts_per_task") or 1),
        task_ids=list(plan.get("task_ids") or []),
        sandbox=sb.get("name") if sb.get("used") else None,
        pricing=m.get("pricing"),
        options=dict(m.get("options") or {}),
        manifest=m,
    )
