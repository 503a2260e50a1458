"""The Sandbox contract: where a rollout's commands run."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import attrs

__all__ = [
    "ExecResult",
    "ExecutionHints",
    "ForkableSandbox",
    "Process",
    "Sandbox",
    "SandboxFactory",
    "TaskImage",
]


@attrs.frozen(kw_only=True)
class ExecResult:
    """The outcome of one command in a sandbox."""

    exit_code: int
    stdout: str = ""
    stderr: str = ""
    timed_out: bool = False

    @property
    def ok(self) -> bool:
        """True when the command exited 0 in time."""
        return self.exit_code == 0 and not self.timed_out


@attrs.frozen(kw_only=True)
class TaskImage:
    """Where a task's environment comes from: an image to build or pull.

    ``dockerfile`` (a host path) is built with ``context`` (a host
    directory; the Dockerfile's own by default) as its build context;
    ``image`` is a prebuilt reference to pull. At least one of the two, or a
    ``compose_file``: a compose project whose ``main_service`` is where the
    rollout's commands run and whose other services are sidecars (its own
    ``build:`` or ``image:`` says how that service is made; ``dockerfile`` or
    ``image`` here, when set too, make the main service's image).
    ``build_timeout_sec`` bounds a build.
    """

    dockerfile: str | None = None
    context: str | None = None
    image: str | None = None
    compose_file: str | None = None
    main_service: str = "main"
    build_timeout_sec: float | None = None


@attrs.frozen(kw_only=True)
class ExecutionHints:
    """What a task needs from its sandbox, as declared by its taskset.

    ``paths`` maps in-sandbox paths (``/app``, ``/tests``) to host directories
    to copy there first; ``network`` asks for full network, which the user must
    also allow; limits are enforced where the sandbox can. ``ro_binds`` lists
    host paths (an interpreter's prefix, say) a harness needs to see read-only
    at the same path inside. ``image`` says which image the task's
    environment is (None: the sandbox's default userland).
    """

    workdir: str = "/app"
    paths: dict[str, str] = attrs.field(factory=dict)
    env: dict[str, str] = attrs.field(factory=dict)
    network: bool = False
    cpus: float | None = None
    memory_mb: int | None = None
    storage_mb: int | None = None
    timeout_sec: float | None = None
    tools: list[str] = attrs.field(factory=list)
    docs: str | None = None
    image: TaskImage | None = None
    gpus: int | None = None
    ro_binds: list[str] = attrs.field(factory=list)


@runtime_checkable
class Process(Protocol):
    """A process started with :meth:`Sandbox.start`, whose output is read live."""

    def stdout_lines(self) -> AsyncIterator[str]:
        """Lines of standard output as they come (without the newline)."""
        ...

    async def write_stdin(self, data: bytes, *, close: bool = True) -> None:
        """Send ``data`` to the process's standard input (closed after, by default)."""
        ...

    async def wait(self, timeout: float | None = None) -> ExecResult:
        """Wait for the exit; on timeout the process tree is killed and ``timed_out`` set."""
        ...

    async def kill(self) -> None:
        """Kill the process and all its children."""
        ...


@runtime_checkable
class Sandbox(Protocol):
    """A place to run a rollout's commands: exec, upload, download, close.

    Usable as ``async with sandbox: ...``; :meth:`close` kills every process
    the sandbox started.
    """

    @property
    def name(self) -> str:
        """The sandbox kind (``local``, ``host``, ...); a class attribute is fine."""
        ...

    @property
    def workdir(self) -> str:
        """The working directory commands start in (``/app`` by default)."""
        ...

    async def exec(
        self,
        cmd: str | list[str],
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        timeout: float | None = None,
        user: str | None = None,
    ) -> ExecResult:
        """Run a command (a shell string or an argv list) to completion."""
        ...

    async def start(
        self,
        cmd: list[str],
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        user: str | None = None,
    ) -> Process:
        """Start a long-running command whose output is read live (an agent CLI)."""
        ...

    async def upload(self, src: str | Path, dst: str) -> None:
        """Copy a host file or directory to ``dst`` inside the sandbox."""
        ...

    async def download(self, src: str, dst: str | Path) -> None:
        """Copy ``src`` from inside the sandbox to a host path."""
        ...

    async def close(self, *, remove: bool | None = None) -> None:
        """Kill everything the sandbox runs and release it.

        ``remove=True`` also deletes the sandbox's files (its ``root``);
        ``None`` lets the sandbox decide (it removes only a root it created).
        """
        ...

    async def __aenter__(self) -> Sandbox: ...

    async def __aexit__(self, *exc: object) -> None: ...


@runtime_checkable
class ForkableSandbox(Sandbox, Protocol):
    """A sandbox that can branch: an optional capability beside :class:`Sandbox`.

    A sandbox kind that can copy its state offers :meth:`fork`; one that
    cannot simply has no such method (the :class:`Sandbox` contract does not
    ask for it). Callers go through :func:`agentkit.sandbox.fork_sandbox`,
    which raises :class:`~agentkit.sandbox.SandboxForkError` naming the
    sandbox when it cannot fork. See ``docs/sandboxes.md``, "Forking a
    sandbox".
    """

    async def fork(
        self, *, root: str | Path | None = None, rollout_id: str | None = None
    ) -> Sandbox:
        """A new, started, independent sandbox whose files are this one's now.

        Parent and child then diverge: each sees only its own writes. The
        child carries files, not processes: nothing running in the parent
        runs in the child, whose start runs what a fresh start runs (the
        image's entrypoint) but copies no ``hints.paths`` in. It has the
        parent's hints, options and model endpoint, its own network and, where
        the sandbox has them, its own host ids. The parent's processes are
        paused only while its files are copied, and the child has each file as
        it was at the pause: each of their writes whole or not at all, but a
        file written in several writes (truncated, then written) maybe between
        them (docs/sandboxes.md, "What a fork guarantees of a file being written").

        ``root``: where the child's files live (a directory that does not
        exist yet, or is empty; kept at close unless ``close(remove=True)``);
        by default a new directory beside the parent's, removed when the child
        closes. ``rollout_id``: the child's (default: the parent's with a
        ``.forkN`` suffix). The caller closes the child (``async with``
        works). Raises :class:`~agentkit.sandbox.SandboxForkError` when this
        sandbox cannot fork now (not started, closed, or a kind of it that
        cannot), leaving the parent as it was.
        """
        ...


class SandboxFactory(Protocol):
    """What a sandbox plugin registers: builds one sandbox per rollout.

    Two optional members (classmethods of a registered class), called by the
    runner with the user's sandbox options:

    - ``async preflight(**options) -> str | None``: once per run, before
      anything is created. Raise ``SandboxError`` to refuse the run (one clear
      message); a returned string is a warning, printed and recorded in
      ``manifest.json`` beside the class's ``warning``.
    - ``async prepare(hints, *, log_dir, on_progress, **options)``: once per
      run, before the first rollout, with the hints of every task to run
      (``log_dir``: ``<run dir>/images`` or None; ``on_progress(line)``: a
      progress line for people, or None). Returns one entry per hints, in
      order: an exception means every rollout of that task fails with it
      (its ``error_kind`` attribute classifies it; it is not retried),
      anything else means ready. The docker sandbox builds images here.
    """

    name: str

    def __call__(
        self,
        *,
        root: Path,
        hints: ExecutionHints,
        rollout_id: str,
        model_endpoint: str | None = None,
        **options: Any,
    ) -> Sandbox:
        """Create (not yet start) a sandbox whose files live under ``root``.

        ``model_endpoint`` is the run's OpenAI-compatible base URL: a sandbox
        without network still lets commands reach it.
        """
        ...
