"""An environment in which no container engine can be found (tests' helper)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

__all__ = ["no_engines"]


def no_engines(tmp_path: Path) -> dict[str, str]:
    """PATH without docker, podman or buildah; DOCKER_HOST a socket nothing listens on."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for directory in ("/usr/local/bin", "/usr/bin", "/usr/sbin"):
        for entry in os.scandir(directory):
            if entry.name.startswith(("docker", "podman", "buildah")):
                continue
            if not (bin_dir / entry.name).exists():
                (bin_dir / entry.name).symlink_to(entry.path)
    path = os.pathsep.join([os.path.dirname(sys.executable), str(bin_dir)])
    return {"PATH": path, "DOCKER_HOST": f"unix://{tmp_path}/no-docker.sock"}
