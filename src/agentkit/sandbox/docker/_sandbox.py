"""The docker sandbox: a container per rollout, from the task's image.

The image comes from the task (:class:`~agentkit.TaskImage`, made by
:mod:`agentkit.images`: built once per context digest, or pulled once);
tasks without one run in ``default_image``. The container behaves as under
Harbor 0.24's docker environment: the image's ``ENTRYPOINT`` runs with the
command ``sh -c "sleep infinity"`` (so an entrypoint that starts a service
and ``exec "$@"`` leaves it running), its ``ENV``, ``WORKDIR`` and ``USER``
apply to every command, a ``HEALTHCHECK`` is waited for, ``/logs/agent``,
``/logs/verifier`` and ``/logs/artifacts`` are directories of the rollout on
the host. Unlike Harbor, the container is killed at close (no 10 s stop
grace) and images are never rebuilt per rollout.

See ``docs/sandboxes.md`` for the network rules, the model-endpoint relay,
resources and the security checks (``allow_host_root``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import posixpath
import tarfile
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path
from typing import IO, Any, ClassVar

import anyio

from agentkit._sandbox import ExecResult, ExecutionHints, TaskImage
from agentkit.images import (
    ImageError,
    ImageUnavailableError,
    docker_client,
    prepare_images,
    resolve_image,
)
from agentkit.images._engine import require_aiodocker
from agentkit.sandbox._base import BaseSandbox, Command, argv_of, checked_env
from agentkit.sandbox._carry import Carried, distinct_paths
from agentkit.sandbox._changes import within
from agentkit.sandbox._errors import SandboxError, SandboxPathError
from agentkit.sandbox._fork import ForkStats, cannot_fork
from agentkit.sandbox._forward import Endpoint, Relay, loopback_endpoint, parse_endpoint
from agentkit.sandbox._freshdir import open_dir, reset_dir, split_path
from agentkit.sandbox._imageroot import HEALTH_TIMEOUT_SEC
from agentkit.sandbox._layercopy import copy_tree
from agentkit.sandbox.docker._compose import ComposeProject, prepare_compose
from agentkit.sandbox.docker._container import ContainerSpec
from agentkit.sandbox.docker._engine import (
    FORK_REPOSITORY,
    check_engine,
    engine_info,
    owner_labels,
    prune_orphans_once,
    remove_project,
)
from agentkit.sandbox.docker._files import extract_download, unmap_owners, upload_tar
from agentkit.sandbox.docker._netns import listen_in_netns
from agentkit.sandbox.docker._options import DockerOptions
from agentkit.sandbox.docker._process import DockerProcess

__all__ = ["HOST_DIRS", "LOG_DIRS", "DockerSandbox"]

#: The rollout's log directories, kept on the host (as Harbor mounts them).
LOG_DIRS = ("/logs/agent", "/logs/verifier", "/logs/artifacts")
#: Directories of the container that are directories of the rollout on the host: the
#: log directories and ``/tests``, which grading makes fresh from outside.
HOST_DIRS = (*LOG_DIRS, "/tests")
#: ``docker diff`` kinds of change.
_MODIFIED, _ADDED, _DELETED = 0, 1, 2
#: Runs a shell string ($0) with bash when the image has it, else with sh (same pid).
_BASH_OR_SH = 'if [ -x /bin/bash ]; then exec /bin/bash -c "$0"; fi; exec /bin/sh -c "$0"'


class DockerSandbox(BaseSandbox):
    """A container per rollout (see the module docstring and ``docs/sandboxes.md``).

    Its options are :class:`DockerOptions`' (``-S name=value`` on the command line).
    """

    name: ClassVar[str] = "docker"
    #: The Ray node label (value ``true``) of nodes that have a Docker engine: the Ray
    #: executor runs this sandbox's rollouts only there (docs/distributed.md).
    node_label: ClassVar[str] = "agentkit/docker"
    options_type: ClassVar[type[DockerOptions]] = DockerOptions
    #: The options the sandbox was made with (a fork's child is made with the same).
    options: DockerOptions
    #: No option is checked up front (``max_output_mb`` is taken as given).
    positive_options: ClassVar[tuple[str, ...]] = ()
    _procs: set[DockerProcess]  # type: ignore[assignment]

    def _init_kind(self) -> None:
        super()._init_kind()
        opts = self.options
        if opts.max_builds < 1:
            raise SandboxError(f"max_builds must be at least 1, got {opts.max_builds}")
        self.network = bool(self.hints.network and opts.allow_network)
        self.allow_host_root = opts.allow_host_root
        self.default_image = opts.default_image
        self.no_new_privileges = opts.no_new_privileges
        for path in self.hints.ro_binds:
            if not path.startswith("/") or not os.path.exists(path):
                raise SandboxError(f"ro_binds: {path!r} must be an existing absolute host path")
        # The relay: always for a loopback endpoint (the container's loopback is its
        # own); without network also for a hostname (mapped to 127.0.0.1 inside).
        self._endpoint: Endpoint | None = None
        if self.model_endpoint:
            if self.network:
                self._endpoint = loopback_endpoint(self.model_endpoint)
            else:
                self._endpoint = parse_endpoint(self.model_endpoint)
        self.image: str | None = None
        self.container_id: str | None = None
        self.container_name = _container_name(self.rollout_id)
        self._client: Any = None
        self._container: Any = None
        self._network_id: str | None = None
        self._compose: ComposeProject | None = None
        self._relay: Relay | None = None
        self._pid = 0
        self._oom_file: Path | None = None
        self._oom_base = 0
        self._workdir_ready = False
        #: The host uid and gid of the container's root (an engine with userns-remap).
        self._root_ids: tuple[int, int] | None = None
        #: A fork's child: the image committed from its parent (removed at close).
        self._fork_image: str | None = None

    # -- run-level hooks (see agentkit.SandboxFactory) ------------------------

    @classmethod
    async def preflight(cls, **options: Any) -> str | None:
        """Check the engine once per run (host root refused unless allowed); prune leftovers."""
        warning = await check_engine(allow_host_root=DockerOptions(**options).allow_host_root)
        await prune_orphans_once()
        return warning

    @classmethod
    async def prepare(
        cls,
        hints: Sequence[ExecutionHints],
        *,
        log_dir: Path | None = None,
        on_progress: Any = None,
        **options: Any,
    ) -> list[Any]:
        """Build or pull every task's image before the rollouts (bounded, with progress)."""
        opts = DockerOptions(**options)
        max_builds = opts.max_builds
        images = [h.image or TaskImage(image=opts.default_image) for h in hints]
        plain = [i for i in images if i.compose_file is None]
        report = None if on_progress is None else (lambda status: on_progress(status.line()))
        results = await prepare_images(
            plain, max_parallel=max_builds, log_dir=log_dir, on_progress=report
        )
        done = dict(zip(plain, results, strict=True))
        out: list[Any] = []
        for image in images:
            if image.compose_file is None:
                out.append(done[image])
            else:
                out.append(await prepare_compose(image, log_dir=log_dir, max_builds=max_builds))
        return out

    # -- lifecycle ------------------------------------------------------------

    def __repr__(self) -> str:
        return f"<DockerSandbox {self.rollout_id or '-'} {self.container_name} {self._state}>"

    def _who(self) -> str:
        return self.rollout_id or self.container_name

    @property
    def host_logs(self) -> Path:
        """The host directory holding the rollout's ``/logs`` (``<root>/fs/logs``)."""
        return self.fs_root / "logs"

    async def _bring_up(self) -> None:
        # the container, its image built or pulled first if needed
        try:
            await self._start()
        except BaseException:
            await self._stop()
            raise

    async def _copy_in(self, src: Path, dst: str) -> None:
        await self.upload(src, dst)

    async def _start(self) -> None:
        await check_engine(allow_host_root=self.allow_host_root)
        self.root.mkdir(parents=True, exist_ok=True)
        os.chmod(self.root, 0o700)
        remapped = (await engine_info()).remapped_root if os.geteuid() == 0 else None
        self._root_ids = remapped
        for d in HOST_DIRS:
            path = self.root / "fs" / d.lstrip("/")
            path.mkdir(parents=True, exist_ok=True)
            # the log directories writable by the container's root, a remapped uid
            os.chmod(path, 0o777 if d in LOG_DIRS else 0o755)
            if remapped is not None:
                # ...and its own, as Harbor's are the container root's (entrypoints chmod them)
                os.chown(path, *remapped)
        self._client = docker_client()
        image = self.hints.image or TaskImage(image=self.default_image)
        try:
            if image.compose_file is not None:
                self._compose = ComposeProject(
                    self.container_spec(), image, root=self.root, env=self.hints.env
                )
                container_id = await self._compose.up()
                self._container = await self._client.containers.get(container_id)
            else:
                if self._fork_image is not None:
                    self.image = self._fork_image
                else:
                    self.image = (await resolve_image(image)).reference
                self._container = await self._create(self.image)
                try:
                    await self._container.start()
                except _aiodocker().DockerError as exc:
                    raise SandboxError(
                        f"sandbox 'docker': starting the container failed: {exc.message}"
                    ) from None
        except ImageError as exc:
            raise SandboxError(f"sandbox 'docker': {exc}") from None
        self.container_id = self._container.id
        info = await self._container.show()
        self._pid = int(info["State"].get("Pid") or 0)
        if not info["State"].get("Running"):
            raise SandboxError(await self._exited_at_start(info))
        if not self._pid or not os.path.exists(f"/proc/{self._pid}"):
            raise SandboxError(
                "sandbox 'docker': the container's processes are not visible on this machine "
                f"(pid {self._pid}); the docker sandbox needs the engine to run here "
                "(DOCKER_HOST pointing at another machine is not supported)"
            )
        self._oom_file = _oom_counter(self._pid)
        self._oom_base = _read_oom(self._oom_file)
        if self._compose is None:
            await self._wait_healthy(info)
        if self._endpoint is not None:
            ep = self._endpoint
            listener = await asyncio.to_thread(listen_in_netns, self._pid, ep.bind_host, ep.port)
            self._relay = Relay(listener, ep)
            await self._relay.start()
        # The image's WORKDIR exists; another working directory is made by the first
        # command that runs there (no extra round trip per rollout).
        image_workdir = (info.get("Config") or {}).get("WorkingDir") or "/"
        self._workdir_ready = os.path.normpath(image_workdir) == os.path.normpath(self.workdir)

    async def _exited_at_start(self, info: dict[str, Any]) -> str:
        state = info["State"]
        logs = ""
        with contextlib.suppress(Exception):
            lines = await self._container.log(stdout=True, stderr=True, tail=20)
            logs = "".join(lines).strip()[-1500:]
        entrypoint = (info.get("Config") or {}).get("Entrypoint")
        return (
            f"sandbox 'docker': the container exited as it started (status "
            f"{state.get('ExitCode')}{', out of memory' if state.get('OOMKilled') else ''}"
            f"{'; its entrypoint ' + json.dumps(entrypoint) + ' ended' if entrypoint else ''})"
            + (f": {logs}" if logs else "")
        )

    def log_binds(self) -> list[str]:
        """``host:container`` binds of the rollout's host directories (logs and ``/tests``)."""
        return [f"{self.root / 'fs' / d.lstrip('/')}:{d}" for d in HOST_DIRS]

    def ro_bind_specs(self) -> list[str]:
        """Read-only binds of ``hints.ro_binds`` (a harness's binary), at the same paths."""
        paths = dict.fromkeys(os.path.normpath(b) for b in self.hints.ro_binds)
        return [f"{p}:{p}:ro" for p in paths]

    def extra_hosts(self) -> list[str]:
        """``/etc/hosts`` entries: a hostname model endpoint is the relay on 127.0.0.1."""
        if self._endpoint is not None and self._endpoint.hosts_entry:
            return [f"{self._endpoint.hosts_entry}:127.0.0.1"]
        return []

    def container_spec(self) -> ContainerSpec:
        """The rollout's container, for the engine (:meth:`_create`) or compose alike."""
        hints = self.hints
        return ContainerSpec(
            labels=owner_labels(self.rollout_id),
            binds=(*self.log_binds(), *self.ro_bind_specs()),
            no_new_privileges=self.no_new_privileges,
            cpus=hints.cpus,
            memory_mb=hints.memory_mb,
            gpus=hints.gpus,
            extra_hosts=tuple(self.extra_hosts()),
            network=self.network,
        )

    async def _create(self, image: str) -> Any:
        aiodocker = _aiodocker()
        if self.network:
            net = await self._client.networks.create(
                {
                    "Name": f"{self.container_name}-net",
                    "Driver": "bridge",
                    "Labels": owner_labels(self.rollout_id),
                }
            )
            self._network_id = net.id
        try:
            config = self.container_spec().engine_config(
                image, network_mode=self._network_id or "none"
            )
            return await self._client.containers.create(config, name=self.container_name)
        except aiodocker.DockerError as exc:
            raise SandboxError(
                f"sandbox 'docker': creating the container failed: {exc.message}"
            ) from None

    async def _wait_healthy(self, info: dict[str, Any]) -> None:
        """When the image has a HEALTHCHECK, wait until it passes (as compose up --wait)."""
        if not (info.get("Config") or {}).get("Healthcheck"):
            return
        loop = asyncio.get_running_loop()
        deadline = loop.time() + HEALTH_TIMEOUT_SEC
        while True:
            state = (await self._container.show())["State"]
            health = (state.get("Health") or {}).get("Status")
            if health == "healthy":
                return
            if health == "unhealthy" or not state.get("Running"):
                raise SandboxError(
                    f"sandbox 'docker': the container's healthcheck failed ({health or 'exited'})"
                    + _last_check(state)
                )
            if loop.time() > deadline:
                raise SandboxError("sandbox 'docker': the container did not become healthy in time")
            await asyncio.sleep(0.2)

    async def _take_down(self) -> None:
        await self._stop()

    async def _stop(self) -> None:
        aiodocker = _aiodocker()
        for proc in list(self._procs):
            with contextlib.suppress(Exception):
                await proc._close()
        self._procs.clear()
        if self._relay is not None:
            await self._relay.close()
            self._relay = None
        left_behind = None
        if self._compose is not None:
            left_behind = await self._down(self._compose)
        elif self._container is not None:
            try:
                await self._container.delete(force=True, v=True)
            except aiodocker.DockerError as exc:
                if exc.status != 404:
                    raise SandboxError(
                        f"removing container {self.container_name}: {exc.message}"
                    ) from None
        self._container = None
        if self._fork_image is not None:
            await self._remove_fork_image(self._fork_image)
            self._fork_image = None
        if self._network_id is not None:
            with contextlib.suppress(aiodocker.DockerError):
                await (await self._client.networks.get(self._network_id)).delete()
            self._network_id = None
        if self._client is not None:
            await self._client.close()
            self._client = None
        if left_behind:
            raise SandboxError(left_behind)

    async def _down(self, compose: ComposeProject) -> str | None:
        """Take the rollout's compose project down; then remove by its label whatever
        ``docker compose down`` left (it can fail part way, e.g. a network still
        detaching from a container under load), so no rollout leaves a service behind.
        What could still not be removed, as one message (None when all went)."""
        aiodocker = _aiodocker()
        problems: list[str] = []
        try:
            await compose.down()
        except (SandboxError, OSError, TimeoutError) as exc:
            problems.append(str(exc))
        if self._client is None:
            return None
        try:
            left = await remove_project(self._client, compose.name)
        except (aiodocker.DockerError, OSError) as exc:
            left = [f"listing compose project {compose.name}: {exc}"]
        if not left:
            return None
        return f"sandbox 'docker': could not remove compose project {compose.name}: " + "; ".join(
            [*problems, *left]
        )

    # -- forking ----------------------------------------------------------------

    async def fork(
        self, *, root: Path | str | None = None, rollout_id: str | None = None
    ) -> DockerSandbox:
        """A new, started container whose files are this one's now (see ``ForkableSandbox``).

        The container is paused (the engine's cgroup freezer) while the engine
        commits it to an image (``agentkit/fork:<id>``) and its host log
        directories are copied; then a container of that image starts with the
        same spec (its entrypoint runs again; anonymous volumes, which a commit
        does not hold, start empty). The image is removed when the child
        closes. A compose project cannot fork.
        """
        return await self._fork(root, rollout_id)

    def _check_forkable(self, who: str) -> None:
        if self._container is None:
            raise cannot_fork(self.name, who, "it is closed")
        if self._compose is not None:
            raise cannot_fork(
                self.name,
                who,
                "it runs a compose project, whose sidecar services a commit would not "
                "carry; only a task with a single container can fork",
            )

    async def _copy_for_fork(self, child: DockerSandbox) -> None:
        await self._commit_to(child)

    def _fork_errors(self) -> tuple[type[BaseException], ...]:
        return (OSError, _aiodocker().DockerError)

    async def _commit_to(self, child: DockerSandbox) -> None:
        """Pause the container, commit it to the child's image, copy the host log
        directories; resume it (the cost in ``child.fork_stats``)."""
        container = self._container
        assert container is not None
        started = time.monotonic()
        # a container that stopped (its processes killed from inside) still has its files
        running = bool((await container.show())["State"].get("Running"))
        if running:
            await container.pause()
        try:
            tag = f"{FORK_REPOSITORY}:{uuid.uuid4().hex[:16]}"
            repository, _, name = tag.partition(":")
            await container.commit(repository=repository, tag=name, pause=False)
            # Removed by the child's close (even if it never starts).
            child._fork_image = tag
            copied = await asyncio.to_thread(copy_tree, self.root / "fs", child.root / "fs")
        finally:
            if running:
                await container.unpause()
        child.fork_stats = ForkStats(
            parent=self.rollout_id or self.container_name,
            paused_sec=time.monotonic() - started,
            entries=copied.entries,
            bytes=copied.bytes,
        )

    async def _remove_fork_image(self, image: str) -> None:
        """Untag and remove a fork's image; one that has forks of its own is only
        untagged, and goes with the last of them (the engine prunes untagged parents)."""
        aiodocker = _aiodocker()
        client = self._client if self._client is not None else docker_client()
        try:
            with contextlib.suppress(aiodocker.DockerError):
                await client.images.delete(image, force=False, noprune=False)
        finally:
            if client is not self._client:
                await client.close()

    # -- commands -------------------------------------------------------------

    def _env(self, env: Mapping[str, str] | None) -> list[str]:
        merged = dict(self.hints.env)
        if env:
            merged.update(env)
        return [f"{k}={v}" for k, v in checked_env(merged).items()]

    def _absolute(self, path: str) -> str:
        if "\0" in path or not path:
            raise SandboxPathError(f"invalid path {path!r}")
        return path if path.startswith("/") else f"{self.workdir.rstrip('/')}/{path}"

    def _argv(self, cmd: str | list[str]) -> list[str]:
        if isinstance(cmd, str):
            # bash where the image has it (as Harbor runs commands), else sh
            return ["/bin/sh", "-c", _BASH_OR_SH, cmd]
        return argv_of(cmd)

    async def _spawn(self, command: Command) -> DockerProcess:
        await self._ensure()
        argv = self._argv(command.cmd)
        return await self._exec_argv(
            argv, command.cwd, command.env, command.user, stdin=command.stdin
        )

    async def _exec_argv(
        self,
        argv: list[str],
        cwd: str | None,
        env: Mapping[str, str] | None,
        user: str | None,
        *,
        stdin: bool,
    ) -> DockerProcess:
        aiodocker = _aiodocker()
        if self._container is None:
            raise SandboxError(f"sandbox {self.rollout_id or self.root} is not running")
        workdir = self._absolute(cwd) if cwd else self.workdir
        if not self._workdir_ready and workdir == self.workdir:
            # Make the working directory (as root) and run the command there; exec keeps
            # the command's own process (and pid).
            user = user or ""
            argv = [
                "/bin/sh", "-c",
                'mkdir -p "$0" 2>/dev/null || [ -d "$0" ]; cd "$0" && exec "$@"',
                workdir, *argv,
            ]  # fmt: skip
            self._workdir_ready = True
            workdir = "/"
        try:
            async with self._gate.passing():  # not while a fork pauses the container
                execution = await self._container.exec(
                    argv,
                    stdin=stdin,
                    user=user or "",
                    environment=self._env(env),
                    workdir=workdir,
                )
                stream = execution.start(detach=False)
                await stream.__aenter__()
        except aiodocker.DockerError as exc:
            raise SandboxError(await self._exec_failure(exc)) from None
        proc = DockerProcess(
            execution,
            stream,
            self._exec_pid,
            max_output=self._max_output,
            exit_note=self._exit_note,
            on_exit=self._procs.discard,
        )
        self._procs.add(proc)
        return proc

    async def _exec_pid(self, execution: Any) -> int:
        """The host pid of a running exec, checked to be in this container (0: none)."""
        for _ in range(100):
            with contextlib.suppress(Exception):
                info = await execution.inspect()
                if not info.get("Running") and info.get("ExitCode") is not None:
                    return 0
                pid = int(info.get("Pid") or 0)
                if pid > 1:
                    return pid if _in_container(pid, self.container_id or "") else 0
            await asyncio.sleep(0.02)  # started, but not yet reported by the engine
        return 0

    async def _exec_failure(self, exc: Any) -> str:
        detail = str(getattr(exc, "message", exc))
        with contextlib.suppress(Exception):
            state = (await self._container.show())["State"]
            if not state.get("Running"):
                why = " (killed by the out-of-memory killer)" if state.get("OOMKilled") else ""
                return (
                    f"sandbox 'docker': the container {self.container_name} is no longer running: "
                    f"its main process exited with {state.get('ExitCode')}{why}"
                )
        return f"sandbox 'docker': cannot run the command: {detail}"

    async def _exit_note(self, code: int) -> str | None:
        if code != 137 or self._oom_file is None:
            return None
        count = await asyncio.to_thread(_read_oom, self._oom_file)
        if count <= self._oom_base:
            return None
        self._oom_base = count
        limit = f" of {self.hints.memory_mb} MB" if self.hints.memory_mb else ""
        return f"killed by the out-of-memory killer: the task's memory limit{limit} was reached"

    async def _run(self, argv: list[str], *, user: str | None = None) -> ExecResult:
        proc = await self._exec_argv(argv, "/", None, user, stdin=False)
        return await proc.wait(60)

    # -- files ----------------------------------------------------------------

    async def upload(self, src: str | Path, dst: str) -> None:
        """Copy host ``src`` to ``dst`` inside: a file, or a directory's contents."""
        await self._ensure()
        aiodocker = _aiodocker()
        data = await asyncio.to_thread(upload_tar, Path(src), self._absolute(dst))
        try:
            async with self._gate.passing():  # not while a fork commits the container
                await self._container.put_archive("/", data)
        except aiodocker.DockerError as exc:
            raise SandboxPathError(f"uploading {src} to {dst}: {exc.message}") from None

    async def download(self, src: str, dst: str | Path) -> None:
        """Copy ``src`` from inside to host ``dst``: a file, or a directory's contents."""
        await self._ensure()
        aiodocker = _aiodocker()
        path = self._absolute(src)
        for _ in range(2):
            try:
                archive: tarfile.TarFile = await self._container.get_archive(path)
            except aiodocker.DockerError as exc:
                raise SandboxPathError(f"downloading {src}: {exc.message}") from None
            top = archive.getmembers()[0] if archive.getmembers() else None
            if top is not None and top.issym():
                # Follow the link inside the container, once.
                r = await self._run(["readlink", "-f", path])
                if not r.ok or not r.stdout.strip():
                    raise SandboxPathError(f"{src!r} is a dangling symbolic link")
                path = r.stdout.strip()
                continue
            await asyncio.to_thread(extract_download, archive, path, Path(dst))
            return
        raise SandboxPathError(f"{src!r}: too many levels of symbolic links")

    def host_path(self, path: str) -> Path:
        """The host file behind a path under the host directories (``/logs/agent``,
        ``/tests``, ...)."""
        full = os.path.normpath(self._absolute(path))
        for d in HOST_DIRS:
            if full == d or full.startswith(d + "/"):
                return self.root / "fs" / full.lstrip("/")
        raise SandboxPathError(
            f"{path!r} is inside the container: only {', '.join(HOST_DIRS)} are on the host "
            "(use download)"
        )

    # -- grading: processes ended, files read and made from outside -------------

    def _host_parts(self, path: str) -> list[str]:
        """The components of ``path`` below ``<root>/fs``: one of :data:`HOST_DIRS` or inside."""
        parts = split_path(path)
        full = "/" + "/".join(parts)
        if not any(full == d or full.startswith(d + "/") for d in HOST_DIRS):
            raise SandboxPathError(
                f"{path!r} is inside the container, not in a directory on the host "
                f"({', '.join(HOST_DIRS)})"
            )
        return parts

    def open_dir(self, path: str) -> int:
        """A host fd of in-container directory ``path`` (one of :data:`HOST_DIRS` or below),
        reached without following any link (see ``LocalSandbox.open_dir``)."""
        return open_dir(self.root / "fs", self._host_parts(path))

    async def reset_dir(self, path: str, *, mode: int = 0o755) -> None:
        """Make ``path`` (one of :data:`HOST_DIRS` or below) a new, empty directory of the
        container's root, from the host: nothing is followed, whatever was there removed."""
        await self._ensure()
        parts = self._host_parts(path)
        owner = self._root_ids[0] if self._root_ids is not None else None
        await asyncio.to_thread(reset_dir, self.root / "fs", parts, owner=owner, mode=mode)
        if self._root_ids is not None and self._root_ids[1] != self._root_ids[0]:
            fd = open_dir(self.root / "fs", parts)
            try:
                os.fchown(fd, *self._root_ids)
            finally:
                os.close(fd)

    async def end_processes(self) -> int:
        """End every process in the container; then start it again on the same files.

        The container is killed (every process in it, its entrypoint's and
        whatever a command detached, under any uid) and started again: the
        image's ``ENTRYPOINT`` runs again, its ``HEALTHCHECK`` is waited for,
        and the relay to the model endpoint is made again. Its files (the
        container's layer, the host directories) are kept; its memory
        (``/dev/shm``, tmpfs mounts) is not. Commands running meanwhile end;
        new ones wait until it is done. Returns how many processes ended. A
        container that stopped by itself (every process killed from inside: its
        main process exits with its child) is started again the same way: its
        files are all there, and whether it had stopped yet when this was asked
        (the engine learns of it a moment later) changes nothing.
        """
        aiodocker = _aiodocker()
        who = self.rollout_id or self.container_name
        if self._state != "running" or self._container is None:
            raise SandboxError(f"sandbox {who}: cannot end its processes: it is {self._state}")
        async with self._lock, self._gate.closed():
            running = bool((await self._container.show())["State"].get("Running"))
            count = len(_container_pids(self._pid)) if running else 0
            try:
                if running:
                    try:
                        await self._container.kill(signal="SIGKILL")
                    except aiodocker.DockerError as exc:
                        if exc.status != 409:  # 409: it stopped meanwhile
                            raise
                await self._container.wait()
                if self._relay is not None:
                    await self._relay.close()
                    self._relay = None
                await self._container.start()
            except aiodocker.DockerError as exc:
                raise SandboxError(
                    f"sandbox 'docker' ({who}): restarting the container failed: {exc.message}"
                ) from None
            info = await self._container.show()
            self._pid = int(info["State"].get("Pid") or 0)
            if not info["State"].get("Running"):
                raise SandboxError(await self._exited_at_start(info))
            self._oom_file = _oom_counter(self._pid)
            self._oom_base = _read_oom(self._oom_file)
            if self._compose is None:
                await self._wait_healthy(info)
            if self._endpoint is not None:
                ep = self._endpoint
                listener = await asyncio.to_thread(
                    listen_in_netns, self._pid, ep.bind_host, ep.port
                )
                self._relay = Relay(listener, ep)
                await self._relay.start()
        return count

    async def restart(self) -> None:
        """End everything in the container and start it again on its own files (see
        :meth:`end_processes`, which does exactly this on docker)."""
        await self.end_processes()

    async def carry_to(self, other: DockerSandbox, paths: Sequence[str]) -> Carried:
        """Copy ``paths`` of this container over the same paths of ``other``'s, through the
        engine's archive API (no tool of either container is used to read): what stood
        there in ``other`` is removed first (with ``other``'s own ``rm``: a fresh
        container's). This container is paused while its files are read (as a fork
        pauses it)."""
        if not isinstance(other, DockerSandbox) or other._container is None:
            raise SandboxError("sandbox 'docker' can carry files only to another running one")
        await self._ensure()
        if self._container is None:
            raise SandboxError(f"sandbox {self.rollout_id or self.root} is not running")
        async with self._lock, self._gate.closed():
            # a container that stopped (its processes killed from inside) still has
            # its files: they are read as they are
            running = bool((await self._container.show())["State"].get("Running"))
            if running:
                await self._container.pause()
            try:
                return await self._carry(other, paths)
            finally:
                if running:
                    await self._container.unpause()

    async def _carry(self, other: DockerSandbox, paths: Sequence[str]) -> Carried:
        out = Carried()
        changes: dict[str, int] = {}
        if other.image == self.image and self._fork_image is None:
            # the same image below both: only what this container's commands changed
            listed = await self._client._query_json(f"containers/{self.container_id}/changes")
            changes = {str(c["Path"]): int(c["Kind"]) for c in listed or () if c.get("Path")}
        for path in distinct_paths(paths):
            if not split_path(path):
                raise SandboxPathError("the container's root cannot be carried")
            if not changes:
                await self._carry_one(other, path, out)
                out.paths[path] = out.paths.get(path) or "copied"
                continue
            below = sorted(p for p in changes if within(p, [path]))
            gone = any(changes[a] == _DELETED for a in changes if within(path, [a]) and a != path)
            leaves = [
                p
                for i, p in enumerate(below)
                if not (i + 1 < len(below) and below[i + 1].startswith(p.rstrip("/") + "/"))
            ]
            if gone or (path in changes and changes[path] != _MODIFIED) or len(leaves) > 64:
                await self._carry_one(other, path, out)  # replaced whole, or changed a lot
                out.paths[path] = out.paths.get(path) or "copied"
            elif not below:
                out.paths[path] = "unchanged"
            else:
                for leaf in leaves:
                    await self._carry_one(other, leaf, out)
                out.paths[path] = "changes copied"
        return out

    async def _carry_one(self, other: DockerSandbox, path: str, out: Carried) -> None:
        """Copy ``path`` of this container over ``other``'s (removed there when missing here)."""
        aiodocker = _aiodocker()
        assert other._container is not None
        parent = posixpath.dirname(path)
        with tempfile.TemporaryFile(prefix="agentkit-carry-") as spool:
            found = await _archive_to(self._client, self.container_id or "", path, spool)
            cleared = await other._run(
                ["/bin/sh", "-c", 'rm -rf -- "$0" && mkdir -p -- "$1"', path, parent]
            )
            if not cleared.ok:
                raise SandboxError(
                    f"sandbox 'docker': could not clear {path} in the verifier's container: "
                    f"{cleared.stderr.strip()[-300:]}"
                )
            if not found:
                out.paths.setdefault(path, "missing")
                return
            spool.seek(0)
            with tempfile.TemporaryFile(prefix="agentkit-carry-") as archive:
                # not abandoned on cancellation: the files stay open until it ends
                await anyio.to_thread.run_sync(unmap_owners, spool, archive, self._root_ids)
                out.bytes += archive.tell()
                out.entries += 1
                archive.seek(0)
                try:
                    async with other._gate.passing():
                        await other._container.put_archive(parent, _chunks(archive))
                except aiodocker.DockerError as exc:
                    raise SandboxError(
                        f"sandbox 'docker': could not carry {path}: {exc.message}"
                    ) from None

    async def changed_paths(self, *, exclude: Sequence[str] = (), limit: int = 50) -> list[str]:
        """In-container paths commands added, changed or deleted since the container was
        made (the engine's ``docker diff``), the deepest of each branch, sorted, at most
        ``limit``; subtrees in ``exclude`` skipped."""
        await self._ensure()
        changes = await self._client._query_json(f"containers/{self.container_id}/changes")
        paths = sorted(str(c.get("Path")) for c in changes or () if c.get("Path"))
        leaves = [
            p
            for i, p in enumerate(paths)
            if not (i + 1 < len(paths) and paths[i + 1].startswith(p.rstrip("/") + "/"))
        ]
        return [p for p in leaves if not within(p, exclude)][:limit]


def _aiodocker() -> Any:
    try:
        return require_aiodocker()
    except ImageUnavailableError as exc:
        raise SandboxError(f"sandbox 'docker': {exc}") from None


def _container_name(rollout_id: str) -> str:
    import re

    slug = re.sub(r"[^a-zA-Z0-9_.-]+", "-", rollout_id or "sandbox").strip("-._")[:48] or "sandbox"
    return f"agentkit-{slug}-{uuid.uuid4().hex[:6]}"


def _last_check(state: dict[str, Any]) -> str:
    """The last healthcheck's exit code and output, for an error message."""
    log = (state.get("Health") or {}).get("Log") or []
    if not log:
        return ""
    last = log[-1]
    output = " ".join(str(last.get("Output") or "").split())[:300]
    return f": its last check exited {last.get('ExitCode')}" + (f" ({output})" if output else "")


def _in_container(pid: int, container_id: str) -> bool:
    """True when host ``pid`` runs in the container (its cgroup names the container)."""
    if not container_id:
        return False
    try:
        return container_id in Path(f"/proc/{pid}/cgroup").read_text()
    except OSError:
        return False


async def _chunks(f: IO[bytes]) -> AsyncIterator[bytes]:
    """``f``'s bytes, read a chunk at a time in a thread that is never abandoned (a file
    handed to aiohttp is read in its executor, which may still read once the request
    is over, after the file was closed)."""
    while chunk := await anyio.to_thread.run_sync(f.read, 1 << 20):
        yield chunk


async def _archive_to(client: Any, container_id: str, path: str, spool: IO[bytes]) -> bool:
    """Write the engine's tar archive of ``path`` in the container to ``spool`` as it comes
    (never held whole in memory); False when the path does not exist."""
    aiodocker = _aiodocker()
    try:
        # aiodocker's get_archive reads the whole archive into memory: stream it instead
        async with client._query(
            f"containers/{container_id}/archive", method="GET", params={"path": path}
        ) as response:
            async for chunk in response.content.iter_chunked(1 << 20):
                spool.write(chunk)
    except aiodocker.DockerError as exc:
        if exc.status == 404:
            return False
        raise SandboxError(f"sandbox 'docker': could not read {path}: {exc.message}") from None
    return True


def _container_pids(pid: int) -> list[int]:
    """Host pids of every process in the container whose main process is ``pid`` (its
    cgroup's ``cgroup.procs``: cgroup v2, or v1's pids controller)."""
    try:
        lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
    except OSError:
        return []
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controllers == "":
            procs = Path("/sys/fs/cgroup") / path.lstrip("/") / "cgroup.procs"
        elif "pids" in controllers.split(","):
            procs = Path("/sys/fs/cgroup/pids") / path.lstrip("/") / "cgroup.procs"
        else:
            continue
        try:
            return [int(p) for p in procs.read_text().split()]
        except (OSError, ValueError):
            continue
    return []


def _oom_counter(pid: int) -> Path | None:
    """The cgroup file counting the container's OOM kills (cgroup v1 or v2), if readable."""
    try:
        lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controllers == "":
            candidate = Path("/sys/fs/cgroup") / path.lstrip("/") / "memory.events"
        elif "memory" in controllers.split(","):
            candidate = Path("/sys/fs/cgroup/memory") / path.lstrip("/") / "memory.oom_control"
        else:
            continue
        if candidate.exists():
            return candidate
    return None


def _read_oom(path: Path | None) -> int:
    if path is None:
        return 0
    try:
        for line in path.read_text().splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill":
                return int(value)
    except (OSError, ValueError):
        pass
    return 0
