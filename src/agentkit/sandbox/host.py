"""The host "sandbox": no isolation, commands run directly in a per-rollout directory.

Chosen only explicitly (``--sandbox host``). In-sandbox paths are translated
to ``<root>/fs/<path>``: the working directory, uploads and downloads, and in
commands every word that starts with the workdir, ``/logs``, ``/tests`` or
``/solution``. ``$AGENTKIT_ROOT`` names ``<root>/fs`` for scripts that need it.
"""

from __future__ import annotations

import asyncio
import os
import re
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Unpack

import attrs

from agentkit.sandbox._base import STANDARD_DIRS, HostFSSandbox, RolloutKeywords
from agentkit.sandbox._paths import Mount, SandboxFS
from agentkit.sandbox._proctree import kill_tree

__all__ = ["HOST_WARNING", "HostKeywords", "HostOptions", "HostSandbox"]

HOST_WARNING = (
    "sandbox 'host' runs task and agent commands directly on this machine, without "
    "isolation: they can read your files and environment files, use the network and "
    "outlive the run if they escape their session; use the default 'local' sandbox "
    "(bubblewrap) for anything you do not trust"
)
_MARKER = "AGENTKIT_SANDBOX_ID"


@attrs.frozen(kw_only=True)
class HostOptions:
    """The options of the host mode (:class:`HostSandbox`): ``-S name=value`` on the
    command line, ``sandbox_options`` in Python, or keywords of ``HostSandbox``."""

    allow_network: bool = False
    """Recorded only: the host's network is always there."""

    keep: bool = False
    """Never delete the rollout's files on close."""

    max_output_mb: int = 64
    """How much of its stdout and of its stderr each command keeps, in MB."""


class HostKeywords(RolloutKeywords, total=False):
    """mypy's keywords of ``HostSandbox(...)``: the rollout's and the :class:`HostOptions`
    (see ``RolloutKeywords``)."""

    allow_network: bool
    keep: bool
    max_output_mb: int


class HostSandbox(HostFSSandbox):
    """Unisolated: runs commands on the host, in ``<root>/fs`` (see :data:`HOST_WARNING`).

    The environment is still cleared (only ``PATH`` comes from the host), and
    every process a command starts is killed on timeout and on close. Its
    options are :class:`HostOptions`'.
    """

    name: ClassVar[str] = "host"
    warning: ClassVar[str | None] = HOST_WARNING
    options_type: ClassVar[type[HostOptions]] = HostOptions
    #: The options the sandbox was made with.
    options: HostOptions

    if TYPE_CHECKING:  # the constructor is BaseSandbox's; mypy reads the options' types

        def __init__(self, *, root: Path, **options: Unpack[HostKeywords]) -> None: ...

    def _init_kind(self) -> None:
        super()._init_kind()
        # The host's network is always there; recorded so the runner can report it.
        self.network = True
        self.allow_network = self.options.allow_network
        self.fs = SandboxFS(
            mounts=[Mount("/", self.fs_root, True)], workdir=self.workdir, virtual=()
        )
        self._id = uuid.uuid4().hex
        self._sessions: set[int] = set()
        prefixes = sorted({self.workdir, *STANDARD_DIRS, "/logs"}, key=len, reverse=True)
        alternatives = "|".join(re.escape(p) for p in prefixes)
        self._pattern = re.compile(rf"(?<![\w./~-])({alternatives})(?=/|$|[^\w.-])")

    async def _start_backend(self) -> None:
        return None

    async def _stop_backend(self) -> None:
        kill_tree([], self._sessions, f"{_MARKER}={self._id}".encode())
        self._sessions.clear()

    def translate(self, text: str) -> str:
        """Rewrite in-sandbox paths (``/app/x``, ``/logs/...``) in ``text`` to host paths."""
        root = str(self.fs_root)
        return self._pattern.sub(lambda m: root + m.group(1), text)

    def base_env(self) -> dict[str, str]:
        env = super().base_env()
        env.update(
            PATH=os.environ.get("PATH", env["PATH"]),
            HOME=str(self.fs_root / "root"),
            TMPDIR=str(self.fs_root / "tmp"),
            AGENTKIT_ROOT=str(self.fs_root),
        )
        return env

    def _spawn_args(
        self, argv: list[str], cwd: str, env: dict[str, str], who: Any = None
    ) -> tuple[list[str], dict[str, str], str | None]:
        env = {**env, _MARKER: self._id}
        host_cwd = self.fs.writable(cwd).host_path
        host_cwd.mkdir(parents=True, exist_ok=True)
        return [self.translate(a) for a in argv], env, str(host_cwd)

    async def end_processes(self) -> int:
        """End every process the sandbox's commands started, as far as it can tell.

        Best effort, as everything about this sandbox: a process is found by its
        command's session or by the marker in its environment, so one that left
        both (``setsid`` and a cleared environment) is not. Returns how many ended.
        """
        async with self._lock, self._gate.closed():
            marker = f"{_MARKER}={self._id}".encode()
            return await asyncio.to_thread(kill_tree, [], set(self._sessions), marker)

    def _on_spawn(self, pid: int) -> None:
        self._sessions.add(pid)

    def _kill_process_tree(self, pid: int) -> None:
        kill_tree([pid], [pid])
