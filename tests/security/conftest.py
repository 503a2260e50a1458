"""The attack and fault cases: agentkit used by an attacker or an unlucky operator.

Each test here plays one hostile or broken part and checks that agentkit
contains it and says so clearly:

- a hostile agent inside the sandbox (escapes, kernel knobs, huge outputs);
- hostile task files (symlinks out of the task, deep nesting, duplicate
  keys, values that are not what they claim to be);
- a hostile verifier (huge or sparse reward files, secrets echoed back);
- faults of the machine and the network (a model server that is down, slow
  or rate-limiting; a full disk; signals at any moment).

CI runs this directory twice: as root (the usual CI user) and as an
unprivileged user with a HOME of its own (``python3 -m nox -s security``),
because what is contained differs between the two. Tests that need root or
a tool that is missing skip with the reason, except under ``CI=true``, where
they fail (the repository's conftest.py): CI installs everything they need.
A test that needs root is marked ``needs_root``; it may skip in the
unprivileged run. See docs/security.md.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from agentkit.testing.sandbox_fixtures import need_docker

#: The archive of the stand-in images (``docker save``) that the ``security`` nox session
#: writes, as root, for its unprivileged run to import.
IMAGES_ENV = "AGENTKIT_SECURITY_IMAGES"


@pytest.fixture(scope="session")
def imported_images(image_cache: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The image-root cache with the stand-in images imported from ``$AGENTKIT_SECURITY_IMAGES``
    (``agentkit images import``, as whoever runs the suite): where an ordinary user's image
    sandboxes get their roots without any image tool. Without it, root saves the archive
    itself (``docker save``); anyone else skips, and under ``CI=true`` fails (the security
    session must have written it)."""
    archive = os.environ.get(IMAGES_ENV)
    if not archive and os.geteuid() == 0:
        need_docker()
        archive = str(tmp_path_factory.mktemp("images") / "stand-ins.tar")
        subprocess.run(["docker", "save", "-o", archive, "python:3.11-slim"], check=True)
    if not archive:
        reason = f"no image archive to import (${IMAGES_ENV}: the security nox session sets it)"
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI must run the imported-image tests, but {reason}")
        pytest.skip(reason)
    done = subprocess.run(
        [sys.executable, "-m", "agentkit", "images", "import", archive,
         "--image-cache", str(image_cache)],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return image_cache
