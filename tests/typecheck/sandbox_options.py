"""mypy checks every caller of the built-in sandboxes' constructors (``nox -s types``).

Not a pytest module: the types session runs ``mypy --strict`` on this
directory. The first calls type-check. Each line ending in ``# type:
ignore[...]`` is a mistake mypy must refuse: an option the kind has not, a
value of the wrong type. Were mypy to accept one (the options taken as
``**options: Any`` again), its ``ignore`` would be unused, which strict mode
reports as an error, and the session fails.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agentkit._sandbox import ExecutionHints
from agentkit.sandbox.docker import DockerSandbox
from agentkit.sandbox.host import HostSandbox
from agentkit.sandbox.local import LocalSandbox


def callers_mypy_accepts(root: Path, hints: ExecutionHints, kw: dict[str, Any]) -> None:
    LocalSandbox(root=root, hints=hints, allow_network=True, network_mode="private")
    LocalSandbox(root=root, max_memory_mb=None, ro_binds=["/opt"], image_tool="podman")
    DockerSandbox(root=root, rollout_id="r", default_image="alpine", max_builds=1)
    HostSandbox(root=root, model_endpoint="http://127.0.0.1:1/v1", keep=True)
    LocalSandbox(root=root, **kw)  # a dict of Any is the caller's to check


def callers_mypy_refuses(root: Path) -> None:
    LocalSandbox(root=root, network_mode="open")  # type: ignore[arg-type]
    LocalSandbox(root=root, alow_network=True)  # type: ignore[call-arg]
    LocalSandbox(root=root, max_memory_mb="64")  # type: ignore[arg-type]
    DockerSandbox(root=root, default_image=None)  # type: ignore[arg-type]
    DockerSandbox(root=root, bwrap="/usr/bin/bwrap")  # type: ignore[call-arg]
    HostSandbox(root=root, max_output_mb=1.5)  # type: ignore[arg-type]
    HostSandbox(root="/tmp/r")  # type: ignore[arg-type]
