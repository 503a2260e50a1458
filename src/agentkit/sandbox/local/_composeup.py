"""A compose task's rollout on the local sandbox: its services up, and down again.

:class:`ComposeProject` is what ``compose up --wait`` and ``compose down`` do
for one rollout, without a daemon. The rollout's sandbox is the main
service; every other service is a local sandbox of its own on its own image
root (its command, environment, working directory, user, volumes and tmpfs
as the compose file says), and all of them start inside one network holder
(``_netholder``): one private network and pid namespace per rollout, each
service reachable by its name and aliases (one ``/etc/hosts`` per rollout,
service *k* at ``127.0.0.(k+2)``).

Services start as soon as what they depend on is reached (``depends_on``:
started, healthy, or completed successfully); a service's ``healthcheck``
(or its image's ``HEALTHCHECK``) is waited for as ``up --wait`` does. A
service that exits, fails its healthcheck, or cannot start fails the whole
start with one error naming it and its last output. After the start,
``restart`` policies (``always``, ``unless-stopped``, ``on-failure[:N]``)
start an exited service again, with compose's doubling delay. Closing kills
every service and the holder; should agentkit die, every lifeline closes and
the kernel kills the holder's whole pid namespace.

Named volumes are directories of the rollout (shared by the services that
mount them), a bind mount of the task's folder is the folder itself when
read-only, else a copy private to the rollout (a rollout never writes into
the task). The main service keeps its own commands: its ``environment``,
volumes and tmpfs apply to it, its ``command``/``entrypoint`` do not (the
rollout's commands run there; its image's ``ENTRYPOINT`` starts as for any
image task).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shlex
import shutil
import stat
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentkit._errors import SandboxError
from agentkit._sandbox import ExecResult, ExecutionHints, TaskImage
from agentkit.images._imageroot import HealthCheck, ImageRoot
from agentkit.sandbox._layercopy import copy_tree
from agentkit.sandbox._process import CommandProcess
from agentkit.sandbox.local._composemodel import ComposeFile, Dependency, Service
from agentkit.sandbox.local._hostid import chown_tree
from agentkit.sandbox.local._hosttools import host_tools
from agentkit.sandbox.local._image import hold_image_root, wait_healthy
from agentkit.sandbox.local._netholder import Joined, NetHolder

if TYPE_CHECKING:
    from agentkit.sandbox.local._core import LocalCore

__all__ = ["ComposeProject", "service_argv"]

#: How much of a service's last output an error quotes.
_TAIL = 1500
#: compose's restart delay: doubling from this, up to the most.
_RESTART_DELAY_SEC = 0.1
_RESTART_DELAY_MAX_SEC = 10.0


def service_argv(spec: Service, root: ImageRoot) -> list[str]:
    """What a service runs: its ``entrypoint`` (else its image's) and its ``command`` (else
    its image's ``CMD``, unless ``entrypoint`` is set), strings split as compose splits
    them (shell words, no shell)."""

    def words(value: str | tuple[str, ...]) -> list[str]:
        return shlex.split(value) if isinstance(value, str) else list(value)

    config = root.config
    if spec.entrypoint is not None:
        entry = words(spec.entrypoint)
        cmd = words(spec.command) if spec.command is not None else []
    else:
        entry = list(config.entrypoint)
        cmd = words(spec.command) if spec.command is not None else list(config.cmd)
    argv = entry + cmd
    if not argv:
        raise SandboxError(
            f"compose service {spec.name!r} has no command: neither the compose file nor its "
            "image gives one"
        )
    return argv


def _restarts(policy: str, exit_code: int, done: int) -> bool:
    """Whether a service that exited with ``exit_code`` starts again under ``policy``."""
    if policy in ("always", "unless-stopped"):
        return True
    if policy.startswith("on-failure"):
        most = policy.partition(":")[2]
        return exit_code != 0 and (not most or done < int(most))
    return False


def _tail(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _TAIL else "..." + text[-_TAIL:]


class _Service:
    """One service of the rollout while it runs."""

    def __init__(self, spec: Service, image: TaskImage) -> None:
        self.spec = spec
        self.image = image
        self.box: LocalCore | None = None
        self.root: ImageRoot | None = None
        self.argv: list[str] = []
        self.proc: CommandProcess | None = None
        self.restarts = 0
        self.started = asyncio.Event()
        self.healthy = asyncio.Event()
        #: Its command's result once it ended for good (no restart left).
        self.ended: asyncio.Future[ExecResult] = asyncio.get_running_loop().create_future()
        self.supervisor: asyncio.Task[None] | None = None

    @property
    def name(self) -> str:
        return self.spec.name

    def output(self) -> str:
        """Its command's last output (as far as it got), for an error."""
        if self.ended.done() and not self.ended.cancelled():
            r = self.ended.result()
            text = r.stdout + r.stderr
        elif self.proc is not None:
            text = self.proc.output_so_far()
        else:
            text = ""
        return _tail(text) or "(none)"


class ComposeProject:
    """One rollout's services (see the module's docstring). ``main`` is the rollout's
    sandbox (the main service); ``kind`` makes the other services' sandboxes."""

    def __init__(self, main: LocalCore, kind: type[LocalCore]) -> None:
        assert main.compose is not None and main.hints.image is not None
        self.main = main
        self.kind = kind
        self.compose: ComposeFile = main.compose
        self.main_name = main.hints.image.main_service
        self._holder: NetHolder | None = None
        self._locks: list[int] = []
        self._services: dict[str, _Service] = {}
        self._closing = False

    def _where(self, name: str) -> str:
        return f"compose service {name!r} of {self.compose.path}"

    # -- up -------------------------------------------------------------------

    async def up(self, start_main: Callable[[], Awaitable[None]]) -> None:
        """Start every service in dependency order, ``start_main`` (this rollout's own
        sandbox) as the main service's turn comes; return once every service started
        and every healthcheck passed. Raises :class:`SandboxError` naming the service
        that failed (the caller closes the project)."""
        main = self.main
        self._services = {
            name: _Service(spec, main.compose_images[name])
            for name, spec in self.compose.services.items()
        }
        roots = await self._hold_roots()
        base = main.root / "compose"
        hosts = self._hosts()
        mounts = await asyncio.to_thread(self._mounts, base)
        read_only = [str(r.rootfs) for r in roots]
        read_only += [*main.ro_binds, *([main._python_prefix] if main._python_prefix else [])]
        read_only += [src for src, _ in host_tools("setpriv", "env").files]
        read_only.append(os.path.realpath(main._tools.bwrap))
        read_only += [src for vols in mounts.values() for src, _, ro in vols if ro]
        self._holder = NetHolder(main._tools, root_mode=main.host_id is not None)
        await self._holder.start(
            writable=[str(main.root)],
            read_only=[p for p in read_only if not p.startswith("/usr/")],
            slirp_program=main._compose_slirp,
        )
        for s in self._services.values():
            spec = s.spec
            joined = Joined(
                holder=self._holder,
                hostname=spec.hostname or spec.name,
                hosts=hosts,
                volumes=tuple(mounts[spec.name]),
                tmpfs=tuple(v.target for v in spec.volumes if v.kind == "tmpfs"),
                slirp=main._compose_slirp is not None,
            )
            if s.name == self.main_name:
                main._joined = joined
            else:
                s.box = self._sidecar(s, base / s.name, joined)
        tasks = {
            asyncio.ensure_future(self._start_one(s, start_main)): s
            for s in self._services.values()
        }
        try:
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
            failed = next((t for t in done if t.exception() is not None), None)
            if failed is not None:
                raise failed.exception()  # type: ignore[misc]
        finally:
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(BaseException):
                    await task
        self._check_still_running()

    async def _hold_roots(self) -> list[ImageRoot]:
        """Every service's image root, held until the project closes (the main service's
        by the main sandbox itself)."""
        main = self.main
        await main._use_image_root()
        assert main.image_root is not None
        roots = [main.image_root]
        for s in self._services.values():
            if s.name == self.main_name:
                s.root = main.image_root
                continue
            root, fd = await hold_image_root(
                s.image,
                image_tool=main.options.image_tool,
                image_cache=main._image_cache,
                id_base=main.host_id,
            )
            self._locks.append(fd)
            s.root = root
            roots.append(root)
        return roots

    def _hosts(self) -> str:
        """The rollout's ``/etc/hosts``: service *k* (by name) at ``127.0.0.(k+2)``."""
        names = sorted(self.compose.services)
        if len(names) > 250:
            raise SandboxError(f"{self.compose.path}: more than 250 services")
        lines = ["127.0.0.1 localhost", "::1 localhost ip6-localhost ip6-loopback"]
        for k, name in enumerate(names):
            spec = self.compose.services[name]
            also = [a for a in dict.fromkeys((spec.hostname or name, *spec.aliases)) if a != name]
            lines.append(" ".join([f"127.0.0.{k + 2}", name, *also]))
        return "\n".join(lines) + "\n"

    def _mounts(self, base: Path) -> dict[str, list[tuple[str, str, bool]]]:
        """Each service's (host path, in-sandbox path, read-only): named volumes as
        directories of the rollout, read-only binds as the task's own folder, writable
        ones as the rollout's copy of it. Sidecars' directories from an earlier start
        are removed (as ``compose down`` removes containers; volumes stay)."""
        owner = self.main.host_id
        for name in self._services:
            shutil.rmtree(base / name, ignore_errors=True)
        copies: dict[str, str] = {}
        out: dict[str, list[tuple[str, str, bool]]] = {}
        for s in self._services.values():
            found: list[tuple[str, str, bool]] = []
            for vol in s.spec.volumes:
                if vol.kind == "volume":
                    path = base / "volumes" / vol.source
                    if not path.is_dir():
                        path.mkdir(parents=True, mode=0o755)
                        if owner is not None:
                            os.chown(path, owner, owner)
                    found.append((str(path), vol.target, vol.read_only))
                elif vol.kind == "bind" and vol.read_only:
                    found.append((vol.source, vol.target, True))
                elif vol.kind == "bind":
                    if vol.source not in copies:
                        copies[vol.source] = str(self._copy_bind(vol.source, base, len(copies)))
                    found.append((copies[vol.source], vol.target, False))
            out[s.name] = found
        return out

    def _copy_bind(self, source: str, base: Path, n: int) -> Path:
        """The rollout's own copy of a writable bind mount's source (never the task's)."""
        dest = base / "binds" / str(n)
        if not dest.exists():
            dest.parent.mkdir(parents=True, exist_ok=True)
            st = os.lstat(source)
            if stat.S_ISDIR(st.st_mode):
                copy_tree(source, dest)  # (a FIFO or device in it is made, never read)
            elif stat.S_ISREG(st.st_mode):
                shutil.copyfile(source, dest, follow_symlinks=False)
            else:
                raise SandboxError(
                    f"{self.compose.path}: the bind mount {source} is neither a file nor a folder"
                )
            if self.main.host_id is not None:
                if dest.is_dir():
                    chown_tree(dest, self.main.host_id)
                else:
                    os.chown(dest, self.main.host_id, self.main.host_id, follow_symlinks=False)
        return dest

    def _sidecar(self, s: _Service, root_dir: Path, joined: Joined) -> LocalCore:
        """The sandbox of a service other than main (not started)."""
        main = self.main
        assert s.root is not None
        config = s.root.config
        options = {**main.option_values(), "entrypoint": False, "ro_binds": None, "keep": True}
        hints = ExecutionHints(
            image=s.image,
            workdir=s.spec.working_dir or config.workdir or "/",
            env=dict(s.spec.environment),
            network=main.network,
        )
        box = self.kind(
            root=root_dir,
            hints=hints,
            rollout_id=f"{main.rollout_id or 'sandbox'}.{s.name}",
            **options,
        )
        # its network is the holder's, slirp4netns and all
        box._slirp_program = None
        box.host_network = False
        box._parent_image_root = s.root
        box._joined = joined
        return box

    async def _start_one(self, s: _Service, start_main: Callable[[], Awaitable[None]]) -> None:
        for dep in s.spec.depends_on:
            await self._reached(s, dep)
        if s.name == self.main_name:
            await start_main()
            s.box = self.main
        else:
            await self._start_sidecar(s)
        s.started.set()
        check = self._healthcheck(s)
        if check is not None:
            await self._wait_healthy(s, check)
        s.healthy.set()

    async def _start_sidecar(self, s: _Service) -> None:
        box = s.box
        assert box is not None and s.root is not None
        try:
            await box.setup()
            s.argv = service_argv(s.spec, s.root)
            s.proc = await self._run(s)
        except SandboxError as exc:
            raise SandboxError(f"{self._where(s.name)} could not start: {exc}") from None
        s.supervisor = asyncio.ensure_future(self._supervise(s))

    async def _run(self, s: _Service) -> CommandProcess:
        box = s.box
        assert box is not None and s.root is not None
        user = s.spec.user or (s.root.config.user if box.host_id is not None else None)
        return await box.start(s.argv, cwd=box.workdir, user=user)

    def _healthcheck(self, s: _Service) -> HealthCheck | None:
        if s.spec.healthcheck_disabled:
            return None
        if s.spec.healthcheck is not None:
            return s.spec.healthcheck
        if s.name == self.main_name:
            return None  # the image's: waited for as for any image task (_start_entrypoint)
        return s.root.config.healthcheck if s.root is not None else None

    async def _reached(self, s: _Service, dep: Dependency) -> None:
        target = self._services[dep.service]
        if dep.condition == "service_started":
            await target.started.wait()
        elif dep.condition == "service_healthy":
            if self._healthcheck(target) is None and target.name != self.main_name:
                raise SandboxError(
                    f"{self._where(s.name)} depends on {dep.service!r} being healthy, but "
                    f"{dep.service!r} has no healthcheck"
                )
            await target.healthy.wait()
        else:
            if target.name == self.main_name:
                raise SandboxError(
                    f"{self._where(s.name)} waits for the main service {dep.service!r} to "
                    "complete, which it never does"
                )
            await target.started.wait()
            r = await asyncio.shield(target.ended)
            if r.exit_code != 0:
                raise SandboxError(
                    f"{self._where(dep.service)} did not complete successfully (exit "
                    f"{r.exit_code}), which {s.name!r} waits for; its last output: "
                    f"{target.output()}"
                )

    async def _wait_healthy(self, s: _Service, check: HealthCheck) -> None:
        box = s.box
        assert box is not None
        user = s.spec.user or (
            s.root.config.user if s.root is not None and box.host_id is not None else None
        )
        health = asyncio.ensure_future(
            wait_healthy(
                box, check, shell=box._shell or "/bin/sh", user=user, what="its healthcheck"
            )
        )
        try:
            waiting: set[asyncio.Future[Any]] = {health, s.ended}
            done, _ = await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
            if health in done:
                try:
                    health.result()
                except SandboxError as exc:
                    raise SandboxError(
                        f"{self._where(s.name)} is unhealthy: {exc}; its last output: {s.output()}"
                    ) from None
                return
            r = s.ended.result()
            raise SandboxError(
                f"{self._where(s.name)} exited (exit {r.exit_code}) before it was healthy; "
                f"its last output: {s.output()}"
            )
        finally:
            if not health.done():
                health.cancel()
                with contextlib.suppress(BaseException):
                    await health

    def _check_still_running(self) -> None:
        """A service that exited during the start, with no restart left, and that no
        service waited for to complete, fails the start (as ``up --wait`` fails)."""
        awaited = {
            d.service
            for s in self._services.values()
            for d in s.spec.depends_on
            if d.condition == "service_completed_successfully"
        }
        for s in self._services.values():
            if s.name in awaited or not s.ended.done():
                continue
            r = s.ended.result()
            if r.exit_code != 0:
                raise SandboxError(
                    f"{self._where(s.name)} exited (exit {r.exit_code}) as the rollout started; "
                    f"its last output: {s.output()}"
                )

    async def _supervise(self, s: _Service) -> None:
        """Wait for the service's command; start it again as its ``restart`` says."""
        while True:
            proc = s.proc
            assert proc is not None
            r = await proc.wait()
            if self._closing or not _restarts(s.spec.restart, r.exit_code, s.restarts):
                s.ended.set_result(r)
                return
            s.restarts += 1
            delay = _RESTART_DELAY_SEC * 2 ** (s.restarts - 1)
            await asyncio.sleep(min(delay, _RESTART_DELAY_MAX_SEC))
            try:
                s.proc = await self._run(s)
            except SandboxError as exc:
                s.ended.set_result(ExecResult(exit_code=-1, stdout="", stderr=str(exc)))
                return

    # -- down -----------------------------------------------------------------

    async def close(self) -> None:
        """Kill every service (the main sandbox is the caller's to stop) and the holder."""
        self._closing = True
        for s in self._services.values():
            if s.supervisor is not None:
                s.supervisor.cancel()
                with contextlib.suppress(BaseException):
                    await s.supervisor
            if not s.ended.done():
                s.ended.cancel()
        # The holder first: the kernel ends its whole pid namespace, every service at once.
        if self._holder is not None:
            await self._holder.close()
            self._holder = None
        for s in self._services.values():
            if s.box is not None and s.box is not self.main:
                await s.box.close(remove=False)
        for fd in self._locks:
            os.close(fd)
        self._locks.clear()
