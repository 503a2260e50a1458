"""Sandboxes: where a rollout's commands run.

- ``local`` (:class:`~agentkit.sandbox.local.LocalSandbox`, the default):
  bubblewrap namespaces, host ``/usr`` read-only, no network, processes
  killed with the rollout.
- ``docker`` (:class:`~agentkit.sandbox.docker.DockerSandbox`): a container
  per rollout from the task's image (``pip install 'agentkit[docker]'``).
- ``host`` (:class:`~agentkit.sandbox.host.HostSandbox`): no isolation, only
  when chosen explicitly.

For standalone use, :func:`open_sandbox` starts one and cleans it up::

    async with open_sandbox() as sb:
        print((await sb.exec("echo hi")).stdout)
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentkit import registry
from agentkit.sandbox._errors import SandboxError, SandboxPathError, SandboxUnavailableError

if TYPE_CHECKING:
    from agentkit._sandbox import ExecutionHints
    from agentkit.sandbox._base import BaseSandbox

__all__ = ["SandboxError", "SandboxPathError", "SandboxUnavailableError", "open_sandbox"]


@contextlib.asynccontextmanager
async def open_sandbox(
    name: str = "local",
    hints: ExecutionHints | None = None,
    root: str | Path | None = None,
    model_endpoint: str | None = None,
    *,
    rollout_id: str = "standalone",
    **options: Any,
) -> AsyncIterator[BaseSandbox]:
    """Start the sandbox registered as ``name`` and close it on exit.

    Without ``root`` a temporary directory is used and removed afterwards
    (unless ``keep=True``); a given ``root`` is kept.
    """
    factory = registry.resolve_sandbox(name, **options)
    owns = root is None
    path = Path(tempfile.mkdtemp(prefix="agentkit-sandbox-")) if root is None else Path(root)
    sandbox: BaseSandbox = factory(
        root=path, hints=hints, rollout_id=rollout_id, model_endpoint=model_endpoint
    )
    sandbox.owns_root = owns
    try:
        await sandbox.setup()
        yield sandbox
    finally:
        await sandbox.close()
