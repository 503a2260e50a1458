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

:func:`fork_sandbox` branches a running sandbox: the child starts with the
parent's files, and the two diverge (``docs/sandboxes.md``, "Forking a
sandbox")::

    async with await fork_sandbox(sb) as child:
        await child.exec("echo only here > /app/branch")
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentkit import registry
from agentkit._sandbox import ForkableSandbox, Sandbox
from agentkit.sandbox._errors import (
    SandboxError,
    SandboxForkError,
    SandboxPathError,
    SandboxUnavailableError,
)
from agentkit.sandbox._fork import ForkStats, cannot_fork

if TYPE_CHECKING:
    from agentkit._sandbox import ExecutionHints
    from agentkit.sandbox._base import BaseSandbox

__all__ = [
    "ForkStats",
    "SandboxError",
    "SandboxForkError",
    "SandboxPathError",
    "SandboxUnavailableError",
    "fork_sandbox",
    "open_sandbox",
]


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


async def fork_sandbox(
    sandbox: Sandbox, *, root: str | Path | None = None, rollout_id: str | None = None
) -> Sandbox:
    """Fork a running sandbox: a new, started one whose files are ``sandbox``'s now.

    Calls the sandbox's own ``fork`` (:class:`~agentkit.ForkableSandbox`; the
    ``local`` and ``docker`` sandboxes have one); parent and child then
    diverge, and the caller closes the child. A sandbox whose kind has no
    ``fork`` (``host``, or a plugin's that does not offer one), or that
    cannot fork in its present state, raises :class:`SandboxForkError`
    naming it; the parent is left as it was. ``root`` and ``rollout_id``
    are the child's (see :meth:`agentkit.ForkableSandbox.fork`).
    """
    if not isinstance(sandbox, ForkableSandbox):
        who = getattr(sandbox, "rollout_id", None) or getattr(sandbox, "root", None) or sandbox
        raise cannot_fork(
            str(getattr(sandbox, "name", type(sandbox).__name__)),
            str(who),
            f"{type(sandbox).__name__} has no fork(); only sandboxes that offer it "
            "(local, docker) can branch",
        )
    return await sandbox.fork(root=root, rollout_id=rollout_id)
