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

Grading asks a sandbox for a clean state from outside it (:func:`end_processes`,
:func:`restart_sandbox`, :func:`reset_dir`, :func:`open_dir`, :func:`fresh_sandbox`,
:func:`carry_paths`, :func:`fresh_sandbox_carrying`,
:func:`changed_paths`; ``docs/sandboxes.md``, "Grading from a clean state").

:func:`fork_sandbox` branches a running sandbox: the child starts with the
parent's files, and the two diverge (``docs/sandboxes.md``, "Forking a
sandbox")::

    async with await fork_sandbox(sb) as child:
        await child.exec("echo only here > /app/branch")
"""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentkit import registry
from agentkit._errors import (
    SandboxDiedError,
    SandboxError,
    SandboxForkError,
    SandboxPathError,
    SandboxUnavailableError,
)
from agentkit._sandbox import ForkableSandbox, Sandbox
from agentkit.sandbox._carry import Carried
from agentkit.sandbox._cleanstate import (
    carry_paths,
    changed_paths,
    close_with,
    end_processes,
    fresh_sandbox,
    fresh_sandbox_carrying,
    open_dir,
    reset_dir,
    restart_sandbox,
)
from agentkit.sandbox._fork import ForkStats, cannot_fork

if TYPE_CHECKING:
    from agentkit._sandbox import ExecutionHints
    from agentkit.sandbox._base import BaseSandbox

__all__ = [
    "Carried",
    "ForkStats",
    "SandboxDiedError",
    "SandboxError",
    "SandboxForkError",
    "SandboxPathError",
    "SandboxUnavailableError",
    "carry_paths",
    "changed_paths",
    "close_with",
    "end_processes",
    "fork_sandbox",
    "fork_sandboxes",
    "fresh_sandbox",
    "fresh_sandbox_carrying",
    "open_dir",
    "open_sandbox",
    "reset_dir",
    "restart_sandbox",
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


async def fork_sandboxes(
    sandbox: Sandbox, n: int, *, rollout_ids: Sequence[str] | None = None
) -> list[Sandbox]:
    """``n`` forks of a running sandbox at once: ``n`` new, started, independent sandboxes.

    A sandbox kind with a batched ``fork_many(n, rollout_ids=)`` (the
    ``local`` sandbox: the parent paused and copied once, the other children
    copied from that copy) is forked with it; any other forkable sandbox with
    ``n`` calls of its ``fork`` (each its own copy; their starts overlap).
    ``rollout_ids`` names the children (default: the parent's with
    ``.forkN``). Either way all ``n`` are made or none: on a failure the
    children already made are closed and removed, and the error (a
    :class:`SandboxForkError` naming the sandbox, as :func:`fork_sandbox`
    raises) propagates. The caller closes every child.
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise SandboxForkError(f"fork_sandboxes: n must be a positive integer, got {n!r}")
    ids: list[str | None] = list(rollout_ids) if rollout_ids is not None else [None] * n
    if len(ids) != n:
        raise SandboxForkError(f"fork_sandboxes: {len(ids)} rollout ids given for {n} children")
    many = getattr(sandbox, "fork_many", None)
    if callable(many):
        children: list[Sandbox] = await many(n, rollout_ids=rollout_ids)
        return children
    results = await asyncio.gather(
        *(fork_sandbox(sandbox, rollout_id=rid) for rid in ids), return_exceptions=True
    )
    made = [r for r in results if not isinstance(r, BaseException)]
    failed = next((r for r in results if isinstance(r, BaseException)), None)
    if failed is not None:
        for child in made:
            await child.close(remove=True)
        raise failed
    return made
