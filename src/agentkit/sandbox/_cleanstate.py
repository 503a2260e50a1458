"""What grading asks of a sandbox from outside it: a clean state the agent cannot reach.

A verifier's result is only worth having if nothing the agent left could
have written it. These are the sandbox's optional capabilities that give
grading that, each asked for by name (the ``local`` and ``docker`` sandboxes
have them all, the ``host`` sandbox all but :func:`restart_sandbox`; a
plugin's sandbox may have none, and then each call says so):

- :func:`end_processes`: every process in the sandbox ends, whatever it did
  to detach; the image's entrypoint starts again; :func:`restart_sandbox`:
  its namespaces too (a fork's child, without the copy);
- :func:`reset_dir`: a directory made new and empty from the host, nothing
  followed on the way; :func:`open_dir`: one opened the same way, to read
  what is inside with ``O_NOFOLLOW``;
- :func:`fresh_sandbox`: a new sandbox of the same kind and task, with none
  of the agent's files; :func:`carry_paths`: chosen paths of one sandbox's
  files copied into another; :func:`fresh_sandbox_carrying`: both in one
  (a kind that can gives the paths before the new sandbox starts, which is
  cheaper); :func:`changed_paths`: what the commands changed, to name what a
  separate verifier was not given; :func:`close_with`: a verifier's sandbox
  closed without waiting, the agent's close waiting for it.

See ``docs/sandboxes.md``, "Grading from a clean state".
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from agentkit._errors import SandboxError
from agentkit._sandbox import Sandbox
from agentkit.sandbox._carry import Carried

__all__ = [
    "carry_paths",
    "changed_paths",
    "close_with",
    "end_processes",
    "fresh_sandbox",
    "fresh_sandbox_carrying",
    "open_dir",
    "reset_dir",
    "restart_sandbox",
]


def _method(sandbox: Any, name: str, what: str) -> Any:
    method = getattr(sandbox, name, None)
    if callable(method):
        return method
    kind = getattr(sandbox, "name", type(sandbox).__name__)
    who = getattr(sandbox, "rollout_id", None) or getattr(sandbox, "root", None) or sandbox
    raise SandboxError(
        f"sandbox {kind!r} ({who}) cannot {what}: {type(sandbox).__name__} has no {name}() "
        "(the local and docker sandboxes have every one of these capabilities)"
    )


async def end_processes(sandbox: Sandbox) -> int:
    """End every process running in ``sandbox`` (the image's entrypoint is started again);
    how many ended.

    Raises :class:`~agentkit.sandbox.SandboxDiedError` when the sandbox no longer
    runs, and :class:`~agentkit.sandbox.SandboxError` when its kind cannot do it.
    """
    return int(await _method(sandbox, "end_processes", "end its processes")())


async def restart_sandbox(sandbox: Sandbox) -> None:
    """End everything in ``sandbox``, its namespaces included, and start it again on its
    own files: what a fork's child would be (its files, none of its processes), without
    copying them. The same object goes on."""
    await _method(sandbox, "restart", "restart on its own files")()


def open_dir(sandbox: Sandbox, path: str) -> int:
    """A host fd of directory ``path`` of ``sandbox``, reached without following a link
    (:class:`~agentkit.sandbox.SandboxPathError` when a component is not a directory,
    :class:`FileNotFoundError` when missing). The caller closes it."""
    return int(_method(sandbox, "open_dir", "open its directories from the host")(path))


async def reset_dir(sandbox: Sandbox, path: str, *, mode: int = 0o755) -> None:
    """Make ``path`` of ``sandbox`` a new, empty directory of its root (with ``mode``), from
    the host, following nothing and removing whatever was there."""
    await _method(sandbox, "reset_dir", "make its directories fresh from the host")(path, mode=mode)


async def fresh_sandbox(
    sandbox: Sandbox, *, root: str | Path | None = None, rollout_id: str | None = None
) -> Sandbox:
    """A new, started sandbox of ``sandbox``'s kind, hints and options, with none of its
    files (started as a rollout's is: the task's image, its entrypoint). The caller
    closes it."""
    method = _method(sandbox, "fresh", "start a fresh sandbox of its task")
    child: Sandbox = await method(root=root, rollout_id=rollout_id)
    return child


async def fresh_sandbox_carrying(
    source: Sandbox, paths: Sequence[str], *, root: str | Path | None = None
) -> tuple[Sandbox, Carried]:
    """A fresh sandbox of ``source``'s task (:func:`fresh_sandbox`) given ``paths`` of
    ``source``'s files (:func:`carry_paths`): the same sandbox and files as those two
    calls make, and what was carried; ``source`` must be quiet (its processes ended).

    A kind with ``fresh_carrying`` does both in one: the local sandbox on an image root
    copies the paths from the source's upper layer into the new sandbox's before the
    new one starts, instead of through both running overlays (several times faster
    for many files). Other kinds: the two calls. The new sandbox is closed (and
    removed) when carrying fails; otherwise the caller closes it.
    """
    method = getattr(source, "fresh_carrying", None)
    if callable(method):
        made: tuple[Sandbox, Carried] = await method(list(paths), root=root)
        return made
    child = await fresh_sandbox(source, root=root)
    try:
        carried = await carry_paths(source, child, paths)
    except BaseException:
        await child.close(remove=True)
        raise
    return child, carried


async def carry_paths(source: Sandbox, target: Sandbox, paths: Sequence[str]) -> Carried:
    """Copy ``paths`` of ``source``'s files over the same paths of ``target`` (a sandbox of
    the same kind), from the host; ``source`` must be quiet (its processes ended)."""
    method = _method(source, "carry_to", "carry its files into another sandbox")
    carried: Carried = await method(target, list(paths))
    return carried


async def close_with(owner: Sandbox, sandbox: Sandbox, *, remove: bool | None = None) -> None:
    """Close ``sandbox`` without waiting for it, ``owner``'s close waiting for it instead
    (before ``owner``'s own processes end and its root is removed; it raises what that
    close raised): for a sandbox nothing more is read from, such as a verifier's once
    its rewards are read. A kind without ``close_with`` (or an ``owner`` already
    closed): ``sandbox`` is closed now."""
    method = getattr(owner, "close_with", None)
    if callable(method):
        await method(sandbox, remove=remove)
    else:
        await sandbox.close(remove=remove)


async def changed_paths(
    sandbox: Sandbox, *, exclude: Sequence[str] = (), limit: int = 50
) -> list[str]:
    """Paths of ``sandbox`` its commands added, changed or deleted since it started
    (subtrees in ``exclude`` skipped), sorted, at most ``limit``."""
    method = _method(sandbox, "changed_paths", "list what its commands changed")
    paths: list[str] = await method(exclude=list(exclude), limit=limit)
    return paths
