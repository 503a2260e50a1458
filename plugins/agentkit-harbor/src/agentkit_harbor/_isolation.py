"""Where Harbor's verifier runs: the isolation levels ``shared``, ``fork`` and ``separate``.

Whatever the level, the verifier starts from a clean state: nothing the
agent started runs beside it, ``/tests`` and ``/logs/verifier`` are made new
from the host (nothing the agent left there, no link followed), and the
reward files are read from the host, never through a link, never with a
program of the sandbox. The levels differ in what else the verifier shares
with the agent:

- ``shared``: the verifier runs in the agent's own sandbox, after every
  process in it ended (the image's entrypoint is started again, as a
  container restart does). It sees every file the agent changed, programs
  it planted on ``PATH`` or over system binaries included.
- ``fork``: the verifier runs in a fork of the agent's sandbox
  (:func:`agentkit.sandbox.fork_sandbox`): the agent's files, none of its
  processes, its own namespaces. Nothing the agent started can reach it,
  even a process ending missed; its programs are still the agent's files.
  For the last grading of a rollout (the agent's sandbox is not used after
  it) the agent's sandbox is started again on its own files instead
  (:func:`agentkit.sandbox.restart_sandbox`): the same, without the copy.
- ``separate``: the verifier runs in a fresh sandbox of the task's image
  (:func:`agentkit.sandbox.fresh_sandbox_carrying`) given only the agent's changes
  under the paths the task declares (its working directory, and
  ``[verifier] carry_paths``): the image's programs, shell and libraries,
  whatever the agent did to its own. An honest solution that changed files
  outside those paths (a tool installed in ``/usr/local/bin``) is graded
  without them: the rollout's notes name what was left behind.

See ``docs/harbor.md``, "Where the verifier runs".
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import attrs

from agentkit import EventRecorder, GradingUnavailable, Sandbox
from agentkit.sandbox import (
    SandboxDiedError,
    SandboxError,
    SandboxForkError,
    changed_paths,
    close_with,
    end_processes,
    fork_sandbox,
    fresh_sandbox_carrying,
    restart_sandbox,
)
from agentkit_harbor._errors import HarborGradingError
from agentkit_harbor._errors import SandboxDiedError as AgentSandboxDied

__all__ = [
    "DEFAULT_ISOLATION",
    "ISOLATION_LEVELS",
    "UNCARRIED_NOISE",
    "VerifierPlace",
    "check_isolation",
    "place_verifier",
    "protects",
    "strongest",
]

#: The levels, weakest first.
ISOLATION_LEVELS: tuple[str, ...] = ("shared", "fork", "separate")
#: The default: the strongest level under which every Harbor task this project runs
#: passes as it did (see docs/harbor.md, "Where the verifier runs").
DEFAULT_ISOLATION = "separate"
#: Paths whose changes are not named as left behind by a separate verifier: scratch,
#: caches, logs, and what the harness and the grading themselves put in the sandbox.
UNCARRIED_NOISE: tuple[str, ...] = (
    "/tmp",
    "/var/tmp",
    "/run",
    "/var/run",
    "/var/cache",
    "/var/log",
    "/var/lib/apt/lists",
    "/root/.cache",
    "/root/.bash_history",
    "/logs",
    "/tests",
    "/solution",
    "/installed-agent",
)
#: What a sandbox kind needs to give the verifier a clean state from outside it.
_CAPABILITIES = ("end_processes", "reset_dir", "open_dir")


def check_isolation(level: str) -> str:
    """``level`` when it is one of :data:`ISOLATION_LEVELS`, else a :class:`ValueError`."""
    if level not in ISOLATION_LEVELS:
        raise ValueError(
            f"verifier_isolation must be one of {', '.join(ISOLATION_LEVELS)}, got {level!r}"
        )
    return level


def strongest(*levels: str) -> str:
    """The strongest of ``levels`` (``separate`` over ``fork`` over ``shared``)."""
    return max(levels, key=ISOLATION_LEVELS.index)


def protects(sandbox: Sandbox) -> bool:
    """True when ``sandbox``'s kind can give the verifier a clean state from outside
    (ends its processes, makes and opens directories from the host)."""
    return all(callable(getattr(sandbox, name, None)) for name in _CAPABILITIES)


@attrs.frozen(kw_only=True)
class VerifierPlace:
    """The sandbox a verifier runs in, and how it came to be.

    ``level`` is the level it runs at; ``protected`` is False for a sandbox
    kind that cannot give a clean state from outside (graded in place, as
    before, unprotected); ``notes`` say what the rollout should know (what a
    separate verifier was not given); ``setup_sec`` what making it took.
    """

    sandbox: Sandbox
    level: str
    protected: bool
    notes: list[str]
    setup_sec: float

    def to_json(self) -> dict[str, Any]:
        """The record kept with the verifier's outcome."""
        return {
            "isolation": self.level,
            "protected": self.protected,
            "setup_sec": round(self.setup_sec, 3),
        }


def _kind(sandbox: Sandbox) -> str:
    return str(getattr(sandbox, "name", type(sandbox).__name__))


@contextlib.asynccontextmanager
async def place_verifier(
    agent: Sandbox,
    level: str,
    carry: Sequence[str],
    *,
    recorder: EventRecorder | None = None,
    step: str | None = None,
    final: bool = False,
) -> AsyncIterator[VerifierPlace]:
    """The verifier's sandbox at ``level`` for the agent's sandbox ``agent`` (see the module
    docstring); a fork or fresh sandbox is closed on exit without waiting for it, the
    agent's sandbox's close waiting for it instead (:func:`agentkit.sandbox.close_with`;
    its files, kept in the agent's sandbox's directory, go with the agent's).

    ``carry`` are the paths a ``separate`` verifier is given. ``final`` says the agent's
    sandbox is not used after this verifier (the last grading of its rollout): at
    ``fork`` it is then started again on its own files (new namespaces, none of its
    processes: a fork's child without the copy) rather than copied. Raises the Harbor
    plugin's :class:`~agentkit_harbor.SandboxDiedError` when the agent's sandbox
    no longer runs (scored as a failure), :class:`~agentkit.GradingUnavailable`
    when the verifier's own sandbox cannot be made (the rollout could not run),
    and :class:`HarborGradingError` when the sandbox's kind cannot run ``level``.
    """
    started = time.monotonic()
    if not protects(agent):
        if level != "shared":
            raise HarborGradingError(
                f"the {_kind(agent)!r} sandbox cannot isolate the verifier at level {level!r} "
                "(it cannot end its processes or reach its files from outside); "
                "choose -T verifier_isolation=shared",
                step=step,
            )
        note = (
            f"the {_kind(agent)!r} sandbox cannot end the agent's processes or make the "
            "verifier's folders from outside: graded in place, unprotected"
        )
        yield VerifierPlace(
            sandbox=agent, level=level, protected=False, notes=[note], setup_sec=0.0
        )
        return
    child: Sandbox | None = None
    notes: list[str] = []
    try:
        if level == "shared":
            ended = await end_processes(agent)
            notes.append(f"shared: {ended} process(es) of the agent's turn ended before grading")
        elif level == "fork" and final and callable(getattr(agent, "restart", None)):
            await restart_sandbox(agent)
            notes.append(
                "fork: the agent's turn is over, so its sandbox was started again on its own "
                "files (new namespaces, none of its processes) instead of copied"
            )
        elif level == "fork":
            try:
                child = await fork_sandbox(agent, root=_child_root(agent, "fork"))
            except SandboxForkError as exc:
                if "cannot fork" not in str(exc):
                    raise
                # a kind (or a compose project) that cannot fork: the stronger level
                notes.append(f"fork: {exc}; graded separate instead")
                level = "separate"
        if level == "separate":
            root = _child_root(agent, "separate")
            child, carried = await fresh_sandbox_carrying(agent, carry, root=root)
            notes += _left_behind(carried.paths, await _changed(agent, carry, carried.changed))
    except SandboxDiedError as exc:
        if child is not None:
            await child.close(remove=not _inside(agent, child))
        raise AgentSandboxDied(
            f"the agent's sandbox no longer runs, so it cannot be graded: {exc}", step=step
        ) from None
    except (SandboxError, OSError) as exc:
        if child is not None:
            await child.close(remove=not _inside(agent, child))
        raise GradingUnavailable(
            f"the verifier's {level} sandbox could not be made: {type(exc).__name__}: {exc}"
        ) from None
    place = VerifierPlace(
        sandbox=child if child is not None else agent,
        level=level,
        protected=True,
        notes=notes,
        setup_sec=time.monotonic() - started,
    )
    if recorder is not None:
        await recorder.emit("harbor.verifier", step=step, **place.to_json(), notes=notes)
    try:
        yield place
    finally:
        if child is not None:
            # Nothing more is read from it: closed without grading waiting, the agent's
            # close waiting instead (inside the agent's own directory, its files go, or
            # stay, with the agent's).
            await close_with(agent, child, remove=not _inside(agent, child))


def _child_root(agent: Sandbox, level: str) -> Path | None:
    """Where the verifier's own sandbox keeps its files: in the agent's sandbox's directory
    (removed, or kept, with it: removing them costs grading nothing), when it has one."""
    root = getattr(agent, "root", None)
    if not isinstance(root, (str, Path)) or not Path(root).is_dir():
        return None
    return Path(root) / f"verifier-{level}-{uuid.uuid4().hex[:8]}"


def _inside(agent: Sandbox, child: Sandbox) -> bool:
    parent, own = getattr(agent, "root", None), getattr(child, "root", None)
    if not isinstance(parent, (str, Path)) or not isinstance(own, (str, Path)):
        return False
    return Path(own).is_relative_to(Path(parent))


async def _changed(
    agent: Sandbox, carry: Sequence[str], listed: Sequence[str] | None = None
) -> list[str]:
    """What the agent changed outside ``carry`` (scratch folders aside), at most 20: from
    ``listed`` when the carry listed it (``Carried.changed``), else asked of the sandbox."""
    if listed is not None:
        noise = [*carry, *UNCARRIED_NOISE]
        return [p for p in listed if not _within(p, noise)][:20]
    try:
        return await changed_paths(agent, exclude=[*carry, *UNCARRIED_NOISE], limit=20)
    except (SandboxError, OSError):
        return []


def _within(path: str, prefixes: Sequence[str]) -> bool:
    return any(path == p or path.startswith(p.rstrip("/") + "/") for p in prefixes)


def _left_behind(carried: dict[str, str], changed: list[str]) -> list[str]:
    """The notes of a separate verifier: what it was given, and what it was not."""
    given = ", ".join(f"{path} ({how})" for path, how in carried.items())
    notes = [f"separate: a fresh sandbox of the task was given {given}"]
    if changed:
        shown = ", ".join(changed[:10]) + (", ..." if len(changed) > 10 else "")
        notes.append(
            "separate: the agent also changed files the verifier was not given (outside "
            f"the carried paths): {shown}; a task whose solution needs them can carry them "
            "([verifier] carry_paths in task.toml)"
        )
    return notes
