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

__all__ = ["read_manifest", "run_id_of"]


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
