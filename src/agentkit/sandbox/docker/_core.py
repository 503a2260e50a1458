"""The docker sandbox's container: made, started, taken down; its commands and files.

:class:`DockerCore` holds what a docker sandbox is (its options applied, its
container, network or compose project, the relay of the model endpoint) and
how it starts and stops, runs a command (an engine exec, as the image's
``USER`` unless another is asked for) and copies files in and out through
the engine's archives. Forks and grading are
:class:`~agentkit.sandbox.docker.DockerSandbox`'s.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import tarfile
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

from agentkit._errors import SandboxError, SandboxPathError
from agentkit._sandbox import ExecResult, TaskImage
from agentkit.images import (
    ImageError,
    ImageUnavailableError,
    docker_client,
    resolve_image,
)
from agentkit.images._engine import require_aiodocker
from agentkit.images._imageroot import HEALTH_TIMEOUT_SEC
from agentkit.sandbox._base import BaseSandbox, Command, argv_of, checked_env
from agentkit.sandbox._forward import Endpoint, Relay, loopback_endpoint, parse_endpoint
from agentkit.sandbox.docker._cgroup import in_container, oom_counter, read_oom
from agentkit.sandbox.docker._compose import ComposeProject
from agentkit.sandbox.docker._container import ContainerSpec
from agentkit.sandbox.docker._engine import (
    check_engine,
    engine_info,
    owner_labels,
    remove_project,
)
from agentkit.sandbox.docker._files import extract_download, upload_tar
from agentkit.sandbox.docker._netns import listen_in_netns
from agentkit.sandbox.docker._options import DockerOptions
from agentkit.sandbox.docker._process import DockerProcess

__all__ = ["HOST_DIRS", "LOG_DIRS", "DockerCore"]

#: The rollout's log directories, kept on the host (as Harbor mounts them).
LOG_DIRS = ("/logs/agent", "/logs/verifier", "/logs/artifacts")
#: Directories of the container that are directories of the rollout on the host: the
#: log directories and ``/tests``, which grading makes fresh from outside.
HOST_DIRS = (*LOG_DIRS, "/tests")
#: Runs a shell string ($0) with bash when the image has it, else with sh (same pid).
_BASH_OR_SH = 'if [ -x /bin/bash ]; then exec /bin/bash -c "$0"; fi; exec /bin/sh -c "$0"'


class DockerCore(BaseSandbox):
    """A docker sandbox's container, commands and files (see the module's docstring)."""

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
        info = await self._started()
        if not self._pid or not os.path.exists(f"/proc/{self._pid}"):
            raise SandboxError(
                "sandbox 'docker': the container's processes are not visible on this machine "
                f"(pid {self._pid}); the docker sandbox needs the engine to run here "
                "(DOCKER_HOST pointing at another machine is not supported)"
            )
        await self._serve(info)
        # The image's WORKDIR exists; another working directory is made by the first
        # command that runs there (no extra round trip per rollout).
        image_workdir = (info.get("Config") or {}).get("WorkingDir") or "/"
        self._workdir_ready = os.path.normpath(image_workdir) == os.path.normpath(self.workdir)

    async def _started(self) -> dict[str, Any]:
        """The container's state once it was (re)started, its main process's pid kept;
        a container that exited as it started is an error saying why."""
        info: dict[str, Any] = await self._container.show()
        self._pid = int(info["State"].get("Pid") or 0)
        if not info["State"].get("Running"):
            raise SandboxError(await self._exited_at_start(info))
        return info

    async def _serve(self, info: dict[str, Any]) -> None:
        """What a (re)started container needs beside it: its OOM counter read, its
        ``HEALTHCHECK`` waited for, the relay to the model endpoint in its network."""
        self._oom_file = oom_counter(self._pid)
        self._oom_base = read_oom(self._oom_file)
        if self._compose is None:
            await self._wait_healthy(info)
        if self._endpoint is not None:
            ep = self._endpoint
            listener = await asyncio.to_thread(listen_in_netns, self._pid, ep.bind_host, ep.port)
            self._relay = Relay(listener, ep)
            await self._relay.start()

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
        try:
            self.close_step = "ending its commands"
            for proc in list(self._procs):
                with contextlib.suppress(Exception):
                    await proc._close()
            self._procs.clear()
            if self._relay is not None:
                self.close_step = "closing its model-endpoint relay"
                await self._relay.close()
                self._relay = None
            left_behind = None
            if self._compose is not None:
                left_behind = await self._down(self._compose)
            elif self._container is not None:
                self.close_step = f"removing container {self.container_name}"
                await self._remove_container(self._container)
            self._container = None
            if self._fork_image is not None:
                self.close_step = f"removing its fork's image {self._fork_image}"
                await self._remove_fork_image(self._fork_image)
                self._fork_image = None
            if self._network_id is not None:
                self.close_step = "removing its network"
                with contextlib.suppress(aiodocker.DockerError):
                    await (await self._client.networks.get(self._network_id)).delete()
                self._network_id = None
        finally:
            # also when cut short: the engine's connections are not left open
            if self._client is not None:
                await self._client.close()
                self._client = None
        if left_behind:
            raise SandboxError(left_behind)

    async def _remove_container(self, container: Any) -> None:
        """Remove the container (killed first, its anonymous volumes too).

        When the engine says a removal of it is already under way (409: one a close
        cut short by its timeout started, or a prune's), the engine's wait API is
        asked until that removal is over (its ``removed`` condition, which also
        answers when the removal fails), and the container removed again if it is
        still there; at most three tries. Gone already (404) is done."""
        aiodocker = _aiodocker()
        for attempt in range(3):
            try:
                await container.delete(force=True, v=True)
                return
            except aiodocker.DockerError as exc:
                if exc.status == 404:
                    return
                if exc.status != 409 or "in progress" not in exc.message or attempt == 2:
                    raise SandboxError(
                        f"removing container {self.container_name}: {exc.message}"
                    ) from None
            try:
                await container.wait(condition="removed")
            except aiodocker.DockerError as exc:
                if exc.status == 404:
                    return
                raise SandboxError(
                    f"waiting for container {self.container_name} to be removed: {exc.message}"
                ) from None

    async def _down(self, compose: ComposeProject) -> str | None:
        """Take the rollout's compose project down; then remove by its label whatever
        ``docker compose down`` left (it can fail part way, e.g. a network still
        detaching from a container under load), so no rollout leaves a service behind.
        What could still not be removed, as one message (None when all went)."""
        aiodocker = _aiodocker()
        problems: list[str] = []
        self.close_step = f"docker compose down of {compose.name}"
        try:
            await compose.down()
        except (SandboxError, OSError, TimeoutError) as exc:
            problems.append(str(exc))
        if self._client is None:  # never connected: only what compose said
            return f"sandbox 'docker': {problems[0]}" if problems else None
        self.close_step = f"removing what is left of compose project {compose.name}"
        try:
            left = await remove_project(self._client, compose.name)
        except (aiodocker.DockerError, OSError) as exc:
            left = [f"listing compose project {compose.name}: {exc}"]
        if not left:
            return None
        return f"sandbox 'docker': could not remove compose project {compose.name}: " + "; ".join(
            [*problems, *left]
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
                    return pid if in_container(pid, self.container_id or "") else 0
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
        count = await asyncio.to_thread(read_oom, self._oom_file)
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
