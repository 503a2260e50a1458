"""What the sandboxes share: their options, lifecycle, commands' frame, fresh siblings, forks.

:class:`BaseSandbox` is what every built-in kind (local, docker, host) shares:
the options, ``setup`` and ``close`` around the kind's own start and stop,
``exec`` and ``start`` around its own way of running a command, a fresh
sibling, and the frame of a fork (the gate closed while the kind copies its
files, the child started, everything undone on a failure).
:class:`HostFSSandbox` adds what the local and host sandboxes share beyond
it: their files are reached through mounts on the host (``fs``), and their
commands are processes spawned on the host.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import shutil
import stat
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar, Protocol, Self, TypedDict

import attrs

from agentkit._errors import OptionError, SandboxError, SandboxForkError
from agentkit._sandbox import ExecResult, ExecutionHints, Sandbox
from agentkit.sandbox._carry import Carried, carry, layer_changes
from agentkit.sandbox._fork import ForkStats, Gate, cannot_fork, fork_id, fork_root
from agentkit.sandbox._paths import SandboxFS, open_dir, reset_dir
from agentkit.sandbox._process import CommandProcess, SandboxProcess, spawn

__all__ = ["STANDARD_DIRS", "BaseSandbox", "Command", "HostFSSandbox", "RolloutKeywords"]

#: Writable directories every rollout gets (beside its workdir), as tasks expect them.
STANDARD_DIRS = ("/logs/agent", "/logs/verifier", "/logs/artifacts", "/tests", "/solution")
_ROOT_USERS = (None, "root", "0")
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def _rmtree(path: str | Path) -> None:
    def retry(func: Any, p: str, _exc: Any) -> None:
        # Directories made unreadable or read-only inside the sandbox (or by
        # overlayfs, whose work directory is mode 000): open them up, retry.
        parent = os.path.dirname(p)
        os.chmod(parent, os.stat(parent).st_mode | stat.S_IWUSR | stat.S_IXUSR)
        if os.path.isdir(p) and not os.path.islink(p):
            os.chmod(p, os.stat(p).st_mode | stat.S_IWUSR | stat.S_IXUSR | stat.S_IRUSR)
            if func is not os.rmdir:
                # It could not be opened or listed: remove it whole now.
                _rmtree(p)
                return
        func(p)

    shutil.rmtree(path, onerror=retry)


def checked_env(env: dict[str, str]) -> dict[str, str]:
    """``env``, once every name and value is a string without NUL (and no name has ``=``)."""
    for k, v in env.items():
        if not isinstance(k, str) or not isinstance(v, str) or "\0" in k + v or "=" in k:
            raise SandboxError(f"environment variable {k!r}: expected str name and value")
    return env


def argv_of(cmd: list[str]) -> list[str]:
    """A command given as an argv list, as strings (an empty one refused)."""
    if not cmd:
        raise SandboxError("empty command")
    return [str(c) for c in cmd]


@attrs.frozen
class Command:
    """A command to start in a sandbox, as :meth:`BaseSandbox.exec` or
    :meth:`BaseSandbox.start` was given it."""

    cmd: str | list[str]
    cwd: str | None
    env: Mapping[str, str] | None
    user: str | None
    #: True for :meth:`BaseSandbox.start` (its stdin a pipe), False for ``exec``.
    stdin: bool


class RolloutKeywords(TypedDict, total=False):
    """The keywords of a sandbox's constructor that name its rollout (beside ``root``).

    Each built-in kind's keywords for mypy (``LocalKeywords``, ``DockerKeywords``,
    ``HostKeywords``) add its options class's fields to them: mypy sees
    ``LocalSandbox`` as ``(*, root, **options: Unpack[LocalKeywords])`` and so refuses
    an option the kind has not or a value of another type (the constructor itself is
    :class:`BaseSandbox`'s, which the options class checks at run time).
    ``tests/test_options.py`` checks that a kind's keywords are its options class's
    fields, name for name and type for type.
    """

    hints: ExecutionHints | None
    rollout_id: str
    model_endpoint: str | None


class _Options(attrs.AttrsInstance, Protocol):
    """What every sandbox's options hold (the rest is each kind's own)."""

    @property
    def keep(self) -> bool: ...

    @property
    def max_output_mb(self) -> int: ...


class BaseSandbox:
    """What every built-in sandbox shares; each kind says how it starts, stops, runs a
    command and copies its files (see the module's docstring)."""

    name: ClassVar[str] = "base"
    #: The attrs class of the kind's options: the one place they are written (their
    #: types, defaults and docs), read by the constructor and by ``-S`` parsing.
    options_type: ClassVar[type[_Options]]
    #: The options the sandbox was made with (a fresh sibling is made with the same).
    options: _Options
    #: Printed by the runner and recorded in manifest.json when not None.
    warning: ClassVar[str | None] = None
    #: Options that, when given, must be numbers above 0 (see :meth:`check_options`).
    positive_options: ClassVar[tuple[str, ...]] = ("max_output_mb",)

    @classmethod
    def check_options(cls, **options: Any) -> None:
        """Refuse option values no rollout could use, once, before a run starts.

        ``registry.resolve_sandbox`` calls it; a bad value is one clear error
        instead of every rollout's sandbox failing to start.
        """
        for name in cls.positive_options:
            value = options.get(name)
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise OptionError(
                    f"option {name!r} for sandbox {cls.name!r}: expected a number above 0, "
                    f"got {value!r}"
                )

    def __init__(
        self,
        *,
        root: Path,
        hints: ExecutionHints | None = None,
        rollout_id: str = "",
        model_endpoint: str | None = None,
        **options: Any,
    ) -> None:
        """A sandbox for one rollout, not started yet; ``options`` are the kind's
        (:attr:`options_type`: their types are checked where they are parsed)."""
        self.options = self.options_type(**options)
        self.root = Path(root).absolute()
        self.hints = hints or ExecutionHints()
        self.rollout_id = rollout_id
        self.workdir = self.hints.workdir or "/app"
        if not self.workdir.startswith("/"):
            raise SandboxError(f"execution hints: workdir {self.workdir!r} must be absolute")
        self.model_endpoint = model_endpoint
        self.keep = self.options.keep
        self.owns_root = False
        self._max_output = self.options.max_output_mb * 1024 * 1024
        self._procs: set[CommandProcess] = set()
        self._state = "new"
        self._lock = asyncio.Lock()
        #: Closed while a fork copies the files: commands and uploads wait.
        self._gate = Gate()
        #: True for a fork's child: it starts with the parent's files (``hints.paths``
        #: included), which it neither makes nor copies in again.
        self._fork_child = False
        self._forks = itertools.count(1)
        #: What the fork that made this sandbox cost (None: not a fork's child).
        self.fork_stats: ForkStats | None = None
        #: Closes of other sandboxes this one's close waits for (:meth:`close_with`).
        self._closing: set[asyncio.Task[None]] = set()
        #: What :meth:`close` is doing now, in words (None before it begins): a close
        #: that takes long is logged with it.
        self.close_step: str | None = None
        self._init_kind()

    def _init_kind(self) -> None:
        """The kind's own state and checks, once the shared state above is set."""

    def option_values(self) -> dict[str, Any]:
        """The options the sandbox was made with, as keywords of its constructor."""
        return attrs.asdict(self.options, recurse=False)

    @property
    def fs_root(self) -> Path:
        """The host directory that is the sandbox's ``/`` (the docker sandbox's host
        directories: its ``/logs`` and ``/tests``)."""
        return self.root / "fs"

    def _who(self) -> str:
        """The sandbox, as its errors name it."""
        return self.rollout_id or str(self.root)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.rollout_id or '-'} root={self.root} {self._state}>"

    # -- lifecycle ------------------------------------------------------------

    async def __aenter__(self) -> Self:
        await self.setup()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def setup(self) -> None:
        """Start the sandbox (its writable directories made, its image built or pulled if
        needed), then copy ``hints.paths`` in.

        Called by ``async with``; commands call it on first use too.
        """
        async with self._lock:
            if self._state == "running":
                return
            if self._state == "closed":
                raise SandboxError(f"sandbox {self.rollout_id or self.root} is closed")
            await self._bring_up()
            self._state = "running"
        try:
            for dst, src in () if self._fork_child else self.hints.paths.items():
                await self._copy_in(Path(src), dst)
            await self._after_start()
        except BaseException:
            await self.close()
            raise

    async def _bring_up(self) -> None:
        """Start the sandbox (under the lock; :meth:`setup` marks it running after)."""
        raise NotImplementedError

    async def _copy_in(self, src: Path, dst: str) -> None:
        """Copy one of ``hints.paths`` in, as the sandbox starts."""
        raise NotImplementedError

    async def _after_start(self) -> None:
        """Called once the sandbox runs and ``hints.paths`` are in."""

    async def _ensure(self) -> None:
        """Start the sandbox unless it runs."""
        if self._state != "running":
            await self.setup()

    async def close(self, *, remove: bool | None = None) -> None:
        """Kill every process the sandbox runs (the docker sandbox: its container, with
        no stop grace, removed with its network and compose project); then remove
        ``root`` if asked.

        ``remove=None`` removes only a root the sandbox created itself
        (:func:`agentkit.sandbox.open_sandbox` without ``root``); ``keep=True``
        never removes.
        """
        # the closes this sandbox took on (close_with) end first: their files may be in root
        self.close_step = "waiting for the sandboxes it closes (close_with)"
        failed = await self._closes_waited()
        self.close_step = "waiting for a start, fork or restart under way to end"
        async with self._lock:
            if self._state != "closed":
                self._state = "closed"
                self.close_step = "taking it down"
                await self._take_down()
        if remove is None:
            remove = self.owns_root
        if remove and not self.keep and self.root.exists():
            self.close_step = "removing its directory"
            await asyncio.to_thread(_rmtree, self.root)
        self.close_step = "closed"
        if failed is not None:
            raise failed

    async def close_with(self, other: Sandbox, *, remove: bool | None = None) -> None:
        """Close ``other`` (``other.close(remove=remove)``) without waiting for it: this
        sandbox's :meth:`close` waits for it, before its own processes end and its
        ``root`` is removed, and raises what it raised. Once this sandbox is closed,
        ``other`` is closed at once. For a sandbox nothing more is read from (a
        verifier's, its rewards read), whose files may be in this one's ``root``."""
        if self._state == "closed":
            await other.close(remove=remove)
            return
        task = asyncio.create_task(other.close(remove=remove))
        self._closing.add(task)

    async def _closes_waited(self) -> BaseException | None:
        """Wait for the closes :meth:`close_with` started; the first one's error."""
        failed: BaseException | None = None
        while self._closing:
            done, _ = await asyncio.wait(set(self._closing))
            self._closing -= done
            for task in done:
                if failed is None and not task.cancelled() and task.exception() is not None:
                    failed = task.exception()
        return failed

    async def _take_down(self) -> None:
        """Kill everything the sandbox runs and stop it (under the lock, once)."""
        raise NotImplementedError

    # -- commands -------------------------------------------------------------

    async def _spawn(self, command: Command) -> CommandProcess:
        """Start ``command`` in the sandbox (started first if need be)."""
        raise NotImplementedError

    async def exec(
        self,
        cmd: str | list[str],
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        timeout: float | None = None,
        user: str | None = None,
    ) -> ExecResult:
        """Run ``cmd`` (a shell string for bash, or an argv list) to completion.

        On timeout the command's whole process tree is killed and the result
        has ``timed_out=True``. ``user``: on the docker sandbox any user of the
        image (``docker exec -u``; None is the image's ``USER``); on the local
        one on an image, a user of the image; else root.
        """
        proc = await self._spawn(Command(cmd, cwd, env, user, stdin=False))
        return await proc.wait(timeout)

    async def start(
        self,
        cmd: str | list[str],
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        user: str | None = None,
    ) -> CommandProcess:
        """Start a long-running command: read ``stdout_lines()`` live, write its stdin."""
        return await self._spawn(Command(cmd, cwd, env, user, stdin=True))

    # -- files ----------------------------------------------------------------

    async def upload(self, src: str | Path, dst: str) -> None:
        """Copy host ``src`` to ``dst`` inside: a file, or a directory's contents."""
        raise NotImplementedError

    async def download(self, src: str, dst: str | Path) -> None:
        """Copy ``src`` from inside to host ``dst``: a file, or a directory's contents."""
        raise NotImplementedError

    def host_path(self, path: str) -> Path:
        """The host file behind in-sandbox ``path``."""
        raise NotImplementedError

    # -- a fresh sibling, and forks ---------------------------------------------

    async def fresh(self, *, root: str | Path | None = None, rollout_id: str | None = None) -> Self:
        """A new, started sandbox of this one's kind, hints and options, with none of its files.

        It starts as a rollout's sandbox does (``hints.paths`` copied in, the
        image's entrypoint started; a compose task: a new project): what a
        separate verifier runs in. Its root is ``root`` (a directory that does
        not exist yet, or is empty; kept at close) or a new directory beside
        this one's (removed at close). The caller closes it.
        """
        child = self._sibling(root, rollout_id or f"{self.rollout_id or 'sandbox'}.fresh")
        self._fresh_child(child)
        try:
            await child.setup()
        except BaseException:
            await child.close(remove=True)
            raise
        return child

    def _sibling(self, root: str | Path | None, rollout_id: str) -> Self:
        """A sandbox of this one's kind, hints, endpoint and options, not started: its root
        ``root``, or a new one beside this one's that it owns (removed if it cannot be
        made)."""
        child_root = fork_root(self.root, root, kind=self.name, who=self._who())
        try:
            child = type(self)(
                root=child_root,
                hints=self.hints,
                rollout_id=rollout_id,
                model_endpoint=self.model_endpoint,
                **self.option_values(),
            )
        except BaseException:
            shutil.rmtree(child_root, ignore_errors=True)
            raise
        child.owns_root = root is None
        return child

    def _fresh_child(self, child: Self) -> None:
        """Set up what a sibling (a fresh one or a fork's child, not started yet) takes
        from this sandbox."""

    def _fork_child_of(self, root: str | Path | None, rollout_id: str) -> Self:
        """A fork's child, not started yet (see :meth:`_sibling`)."""
        child = self._sibling(root, rollout_id)
        child._fork_child = True
        self._fresh_child(child)
        return child

    async def _fork(self, root: str | Path | None, rollout_id: str | None) -> Self:
        """The frame of a kind's ``fork``: checked, a child made, this sandbox's files
        copied to it with the gate closed (:meth:`_copy_for_fork`), the child started;
        on a failure the child is closed and removed, and this sandbox left as it was."""
        who = self._who()
        if self._state != "running":
            state = "not started yet" if self._state == "new" else "closed"
            raise cannot_fork(self.name, who, f"it is {state}")
        self._check_forkable(who)
        child = self._fork_child_of(root, rollout_id or fork_id(self.rollout_id, next(self._forks)))
        try:
            async with self._lock, self._gate.closed():
                if self._state != "running":
                    raise cannot_fork(self.name, who, "it was closed as the fork began")
                await self._copy_for_fork(child)
            await child.setup()
        except BaseException as exc:
            await self._undo_fork([child], exc, who)
            raise
        return child

    async def _undo_fork(self, children: Sequence[Self], exc: BaseException, who: str) -> None:
        """A fork failed with ``exc``: remove its children, then raise the fork's own error
        when ``exc`` makes one (else the caller raises ``exc`` again)."""
        for child in children:
            await child.close(remove=True)
        if (failed := self._fork_failed(exc, who)) is not None:
            raise failed from None

    def _check_forkable(self, who: str) -> None:
        """Raise when this running sandbox cannot fork now."""

    async def _copy_for_fork(self, child: Self) -> None:
        """Copy this sandbox's files to ``child`` (the gate closed; the cost in
        ``child.fork_stats``)."""
        raise NotImplementedError

    def _fork_errors(self) -> tuple[type[BaseException], ...]:
        """The errors of a failed copy that a fork reports as :class:`SandboxForkError`."""
        return (OSError,)

    def _fork_failed(self, exc: BaseException, who: str) -> SandboxForkError | None:
        """The one error naming the sandbox that a fork failing with one of
        :meth:`_fork_errors` raises instead; None for any other exception (raised as it is)."""
        if isinstance(exc, self._fork_errors()) and not isinstance(exc, SandboxError):
            detail = getattr(exc, "message", None) or str(exc)
            return SandboxForkError(f"sandbox {self.name!r} ({who}): the fork failed: {detail}")
        return None


class HostFSSandbox(BaseSandbox):
    """A sandbox whose files the host reaches through mounts (:attr:`fs`) and whose
    commands are processes spawned on the host: the local and host sandboxes."""

    _procs: set[SandboxProcess]  # type: ignore[assignment]

    def _init_kind(self) -> None:
        self.fs: SandboxFS = SandboxFS(mounts=(), workdir=self.workdir)

    # -- lifecycle ------------------------------------------------------------

    async def _bring_up(self) -> None:
        self._make_dirs()
        await self._start_backend()

    async def _copy_in(self, src: Path, dst: str) -> None:
        await asyncio.to_thread(self.fs.copy_in, src, dst)

    def _make_dirs(self) -> None:
        """Create the writable directories every rollout gets, under ``fs_root``."""
        for d in ("/", self.workdir, *STANDARD_DIRS, "/root", "/tmp"):
            self._fs_dir(d).mkdir(parents=True, exist_ok=True)
        os.chmod(self._fs_dir("/tmp"), 0o1777)

    def _fs_dir(self, sandbox_dir: str) -> Path:
        rel = os.path.normpath(sandbox_dir).lstrip("/")
        if rel.startswith(".."):
            raise SandboxError(f"{sandbox_dir!r} is not inside the sandbox")
        return self.fs_root / rel if rel else self.fs_root

    async def _start_backend(self) -> None:
        raise NotImplementedError

    async def _stop_backend(self) -> None:
        raise NotImplementedError

    async def _take_down(self) -> None:
        procs = list(self._procs)
        for proc in procs:
            await proc.kill()
        self._procs.clear()
        await self._stop_backend()
        for proc in procs:
            # Everything inside is gone: read their output to the end and
            # close their pipes in this event loop.
            await proc.wait()

    # -- commands -------------------------------------------------------------

    def _check_user(self, user: str | None) -> None:
        if user not in _ROOT_USERS:
            raise SandboxError(
                f"{self.name} sandbox: commands run as root inside the sandbox; "
                f"user={user!r} is not supported"
            )

    def base_env(self) -> dict[str, str]:
        """The environment every command starts from (before hints.env and env)."""
        return {
            "PATH": DEFAULT_PATH,
            "HOME": "/root",
            "USER": "root",
            "LOGNAME": "root",
            "SHELL": "/bin/bash",
            "LANG": "C.UTF-8",
            "TERM": "dumb",
        }

    def _resolve_user(self, user: str | None) -> Any:
        """What ``user`` (already checked) means to :meth:`_spawn_args`; None: root."""
        return None

    def _user_env(self, who: Any) -> dict[str, str]:
        """``HOME``, ``USER`` and ``LOGNAME`` of a user from :meth:`_resolve_user`."""
        return {}

    def _env(self, env: Mapping[str, str] | None, who: Any = None) -> dict[str, str]:
        out = self.base_env()
        if who is not None:
            out.update(self._user_env(who))
        out.update(self.hints.env)
        if env:
            out.update(env)
        return checked_env(out)

    def _argv(self, cmd: str | list[str]) -> list[str]:
        if isinstance(cmd, str):
            shell = "/bin/bash" if os.path.exists("/usr/bin/bash") else "/bin/sh"
            return [shell, "-c", cmd]
        return argv_of(cmd)

    def _spawn_args(
        self, argv: list[str], cwd: str, env: dict[str, str], who: Any = None
    ) -> tuple[list[str], dict[str, str], str | None]:
        """(host argv, host env, host cwd) that run ``argv`` inside the sandbox
        (as ``who``, from :meth:`_resolve_user`)."""
        raise NotImplementedError

    def _spawn_fds(self) -> tuple[int, ...]:
        """Descriptors the command's host process inherits (see :meth:`_spawn_args`)."""
        return ()

    def _kill_process_tree(self, pid: int) -> None:
        raise NotImplementedError

    def _on_spawn(self, pid: int) -> None:
        """Called with the host pid of every command started (its session id too)."""

    async def _spawn(self, command: Command) -> SandboxProcess:
        self._check_user(command.user)
        await self._ensure()
        who = self._resolve_user(command.user)
        wd = self.fs.absolute(command.cwd) if command.cwd else self.workdir
        async with self._gate.passing():
            # Started and registered while no fork copies the files (a fork
            # pauses the processes it finds registered).
            argv, host_env, host_cwd = self._spawn_args(
                self._argv(command.cmd), wd, self._env(command.env, who), who
            )
            proc, exited, transport = await spawn(
                argv, stdin=command.stdin, env=host_env, cwd=host_cwd, pass_fds=self._spawn_fds()
            )
            pid = proc.pid
            self._on_spawn(pid)
            sp = SandboxProcess(
                proc,
                exited,
                lambda: self._kill_process_tree(pid),
                max_output=self._max_output,
                on_exit=self._procs.discard,
                transport=transport,
            )
            self._procs.add(sp)
        return sp

    # -- files ----------------------------------------------------------------

    async def upload(self, src: str | Path, dst: str) -> None:
        """Copy host ``src`` to ``dst`` inside: a file, or a directory's contents."""
        await self._ensure()
        async with self._gate.passing():
            await asyncio.to_thread(self.fs.copy_in, Path(src), dst)

    async def download(self, src: str, dst: str | Path) -> None:
        """Copy ``src`` from inside to host ``dst``: a file, or a directory's contents."""
        await self._ensure()
        await asyncio.to_thread(self.fs.copy_out, src, Path(dst))

    def host_path(self, path: str) -> Path:
        """The host file behind in-sandbox ``path`` (resolved inside the sandbox, contained)."""
        return self.fs.host_path(path)

    # -- grading: files read and made from outside -----------------------------

    def open_dir(self, path: str) -> int:
        """A host fd of in-sandbox directory ``path``, reached without following any link.

        Every component is opened with ``O_NOFOLLOW`` from the sandbox's own
        mount, so what a command left (a link where a directory was, a file)
        is never followed: :class:`~agentkit.sandbox.SandboxPathError` says
        so, :class:`FileNotFoundError` when it is missing. The caller closes
        the fd and opens what is inside with ``O_NOFOLLOW`` too.
        """
        mount, parts = self.fs.mount_parts(path)
        return open_dir(mount.source, parts)

    async def reset_dir(self, path: str, *, mode: int = 0o755) -> None:
        """Make in-sandbox ``path`` a new, empty directory of the sandbox's root, from outside.

        Whatever stood there or on the way (a link, a file, a FIFO, a
        directory of files owned by anyone, an ACL) is removed without being
        followed; the directory gets ``mode``. See ``docs/sandboxes.md``,
        "Grading from a clean state".
        """
        await self._ensure()
        mount, parts = self.fs.mount_parts(path, writable=True)
        async with self._gate.passing():
            await asyncio.to_thread(reset_dir, mount.source, parts, owner=self.fs.owner, mode=mode)

    async def carry_to(self, other: BaseSandbox, paths: Sequence[str]) -> Carried:
        """Copy ``paths`` of this sandbox's files over the same paths of ``other`` (a
        sandbox of the same kind), from the host: what stood there in ``other`` is
        removed first, nothing is followed, owners are remapped to ``other``'s host id.
        This sandbox must be quiet (its processes ended)."""
        if type(other) is not type(self):
            raise SandboxError(
                f"sandbox {self.name!r} can carry files only to another {self.name!r} sandbox"
            )
        assert isinstance(other, HostFSSandbox)
        await other._ensure()
        ids = None
        mine, theirs = self.fs.owner, other.fs.owner
        if mine is not None and theirs is not None and mine != theirs:
            ids = {mine: theirs}
        async with other._gate.passing():
            return await asyncio.to_thread(carry, self.fs, other.fs, paths, ids=ids)

    def _change_layer(self) -> tuple[Path, tuple[str, ...]]:
        """The host directory holding this sandbox's writes, and paths in it that are the
        sandbox's own (not a command's)."""
        return self.fs_root, ()

    async def changed_paths(self, *, exclude: Sequence[str] = (), limit: int = 50) -> list[str]:
        """In-sandbox paths commands added, changed or deleted since the sandbox started
        (files, links, deletions, directories that replaced the image's), sorted, at
        most ``limit``; subtrees in ``exclude`` are skipped."""
        layer, own = self._change_layer()
        return await asyncio.to_thread(layer_changes, layer, exclude=[*own, *exclude], limit=limit)
