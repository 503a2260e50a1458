"""What the local sandbox's image exports left behind: Buildah working containers.

An image's root is exported through a container made for it (see
``agentkit.images._tools``). Docker's and Podman's carry the docker sandbox's
labels, its owner among them; Buildah's working containers carry no labels, so
the local sandbox names each after its owner (``agentkit-export_<host>_<pid>_
<start>_<random>``). An orchestrator killed mid-export leaves its container
behind (its ``rm`` never ran): :func:`prune_image_exports` (``agentkit
sandbox prune``) removes those whose owner is gone, and with ``everything``
every one.
"""

from __future__ import annotations

import json
import shutil
import subprocess

import attrs

from agentkit.images._tools import buildah_export_owner, dying_with_us
from agentkit.sandbox._reaper import owner_alive

__all__ = ["ImageExportPrune", "prune_image_exports"]

#: How long one buildah command may take (a hang guard: they take a fraction of a second).
_TIMEOUT_SEC = 120


@attrs.frozen
class ImageExportPrune:
    """What :func:`prune_image_exports` did: whether Buildah is installed (``looked``),
    the working containers it removed (their names), those whose owner still runs
    (kept), and what failed (messages)."""

    looked: bool = False
    removed: list[str] = attrs.field(factory=list)
    kept: list[str] = attrs.field(factory=list)
    errors: list[str] = attrs.field(factory=list)


def _buildah(binary: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        dying_with_us([binary, *args]),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=_TIMEOUT_SEC,
        check=False,
    )


def prune_image_exports(*, everything: bool = False) -> ImageExportPrune:
    """Remove the Buildah working containers the local sandbox exported image roots
    through and left behind: those whose owner process is gone (on this host), or with
    ``everything`` every one, its exports under way included. Nothing without Buildah;
    other working containers (``buildah from`` of anyone else) are never touched."""
    binary = shutil.which("buildah")
    if binary is None:
        return ImageExportPrune()
    report = ImageExportPrune(looked=True)
    listed = _buildah(binary, "containers", "--json")
    if listed.returncode != 0:
        report.errors.append(f"buildah containers: {listed.stderr.strip()[-500:]}")
        return report
    for container in json.loads(listed.stdout or "null") or []:
        name = str(container.get("containername", ""))
        owner = buildah_export_owner(name)
        if owner is None:
            continue
        if not everything and owner_alive(owner):
            report.kept.append(name)
            continue
        removed = _buildah(binary, "rm", str(container.get("id") or name))
        if removed.returncode == 0:
            report.removed.append(name)
        elif "container not known" not in removed.stderr:  # gone meanwhile
            report.errors.append(f"buildah container {name}: {removed.stderr.strip()[-500:]}")
    return report
