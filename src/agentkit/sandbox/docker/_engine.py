"""The Docker engine behind the docker sandbox: is its root host root, and leftovers.

**Inside-root is never host root.** A rootful engine without user-namespace
remapping runs a container's root as this machine's root: an escape from the
container is an escape to root. :func:`check_engine` accepts an engine with
``userns-remap`` or a rootless one, and refuses any other unless the user
opted in (``allow_host_root``), which is then a warning for the run.

**Nothing left behind.** Every container and network the sandbox makes
carries :data:`LABEL` and its owner (host name, pid and that process's start
time), and so does the image a fork commits (:data:`FORK_REPOSITORY`).
:func:`prune` removes those whose owner is gone (an orchestrator killed with
``kill -9``), or all of them; the next run does it before it starts, and
``agentkit sandbox prune`` on demand.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

import attrs

from agentkit._errors import SandboxError, SandboxUnavailableError
from agentkit.images import REPOSITORY
from agentkit.images._engine import docker_client, engine_error, require_aiodocker
from agentkit.images._errors import ImageUnavailableError
from agentkit.sandbox._reaper import LABEL, OWNER_LABEL, owner_alive, owner_labels

__all__ = [
    "FORK_REPOSITORY",
    "HOST_ROOT_WARNING",
    "LABEL",
    "EngineInfo",
    "PruneReport",
    "check_engine",
    "decide_engine",
    "engine_info",
    "owner_labels",
    "prune",
]

COMPOSE_PROJECT_LABEL = "com.docker.compose.project"
#: Where a fork's commit of its parent container goes (``agentkit/fork:<id>``); the
#: image carries the parent's labels, so leftovers are found like containers.
FORK_REPOSITORY = "agentkit/fork"

HOST_ROOT_WARNING = (
    "sandbox 'docker' runs on an engine that maps containers' root to this machine's root "
    "(no userns-remap, not rootless), allowed with allow_host_root=true: a task that escapes "
    "its container is root on this machine"
)

REFUSAL = (
    "the Docker engine runs containers' root as this machine's root (no user-namespace "
    "remapping, not rootless), so a task escaping its container would be root here. "
    'Enable remapping: add {"userns-remap": "default"} to /etc/docker/daemon.json and '
    "restart dockerd (or start it with dockerd --userns-remap=default), or use rootless "
    "Docker (dockerd-rootless-setuptool.sh install). To accept the risk anyway: "
    "-S allow_host_root=true"
)


@attrs.frozen
class EngineInfo:
    """What the docker sandbox needs to know about the engine."""

    version: str
    userns_remap: bool
    rootless: bool
    root_dir: str

    @property
    def remapped_root(self) -> tuple[int, int] | None:
        """The host uid/gid of a container's root under ``userns-remap`` (None otherwise).

        The engine keeps its data in ``<root>/<uid>.<gid>`` for the remapped root.
        """
        if not self.userns_remap:
            return None
        uid, _, gid = os.path.basename(self.root_dir.rstrip("/")).partition(".")
        return (int(uid), int(gid)) if uid.isdigit() and gid.isdigit() else None

    @property
    def root_is_host_root(self) -> bool:
        """True when a container's uid 0 is this machine's uid 0."""
        return not (self.userns_remap or self.rootless)


_info: dict[str, EngineInfo] = {}


async def engine_info() -> EngineInfo:
    """``docker info``, read once per engine address and process."""
    key = os.environ.get("DOCKER_HOST", "")
    found = _info.get(key)
    if found is not None:
        return found
    try:
        client = docker_client()
    except ImageUnavailableError as exc:
        raise SandboxUnavailableError(f"sandbox 'docker': {exc}") from None
    aiodocker = require_aiodocker()
    try:
        async with client:
            data: dict[str, Any] = dict(await client.system.info())
    except aiodocker.DockerError as exc:
        raise SandboxUnavailableError(f"sandbox 'docker': docker info failed: {exc}") from None
    except OSError as exc:
        raise SandboxUnavailableError(
            f"sandbox 'docker': {engine_error(exc, 'docker info')}"
        ) from None
    options = " ".join(str(o) for o in data.get("SecurityOptions") or [])
    info = EngineInfo(
        version=str(data.get("ServerVersion", "")),
        userns_remap="name=userns" in options,
        rootless="name=rootless" in options,
        root_dir=str(data.get("DockerRootDir", "")),
    )
    _info[key] = info
    return info


def decide_engine(info: EngineInfo, *, allow_host_root: bool) -> str | None:
    """None for a safe engine; for a host-root one, the warning if allowed, else refuse."""
    if not info.root_is_host_root:
        return None
    if not allow_host_root:
        raise SandboxError(REFUSAL)
    return HOST_ROOT_WARNING


async def check_engine(*, allow_host_root: bool) -> str | None:
    """Refuse an engine whose container root is host root, unless allowed (then a warning)."""
    return decide_engine(await engine_info(), allow_host_root=allow_host_root)


@attrs.define
class PruneReport:
    """What :func:`prune` removed (names) and what it could not."""

    containers: list[str] = attrs.field(factory=list)
    networks: list[str] = attrs.field(factory=list)
    projects: list[str] = attrs.field(factory=list)
    images: list[str] = attrs.field(factory=list)
    errors: list[str] = attrs.field(factory=list)

    @property
    def empty(self) -> bool:
        """True when nothing was there to remove."""
        return not (self.containers or self.networks or self.images or self.errors)


async def prune(*, everything: bool = False, images: bool = False) -> PruneReport:
    """Remove the docker sandbox's leftovers: containers, networks, compose projects,
    the images forks committed.

    Without ``everything`` only those whose owner process is gone; with it,
    every one (including those of runs still going). ``images`` also removes
    the images agentkit built (``agentkit/env:*``; they are built again when
    needed).
    """
    aiodocker = require_aiodocker()
    report = PruneReport()
    try:
        client = docker_client()
    except ImageUnavailableError as exc:
        raise SandboxUnavailableError(f"sandbox 'docker': {exc}") from None
    async with client:
        try:
            found = await client.containers.list(all=True, filters={"label": [LABEL]})
        except (aiodocker.DockerError, OSError) as exc:
            raise SandboxUnavailableError(f"sandbox 'docker': listing containers: {exc}") from None
        doomed_projects: set[str] = set()
        for container in found:
            labels = container["Labels"] or {}
            if not everything and owner_alive(str(labels.get(OWNER_LABEL, ""))):
                continue
            name = str((container["Names"] or [container.id])[0]).lstrip("/")
            try:
                await container.delete(force=True, v=True)
                report.containers.append(name)
            except aiodocker.DockerError as exc:
                if exc.status != 404:
                    report.errors.append(f"container {name}: {exc.message}")
            project = labels.get(COMPOSE_PROJECT_LABEL)
            if project:
                doomed_projects.add(str(project))
        report.projects = sorted(doomed_projects)
        networks = await client.networks.list(filters={"label": [LABEL]})
        for net in networks:
            labels = net.get("Labels") or {}
            project = labels.get(COMPOSE_PROJECT_LABEL)
            alive = owner_alive(str(labels.get(OWNER_LABEL, "")))
            if not everything and project not in doomed_projects and alive:
                continue
            try:
                await (await client.networks.get(net["Id"])).delete()
                report.networks.append(str(net["Name"]))
            except aiodocker.DockerError as exc:
                if exc.status != 404:
                    report.errors.append(f"network {net['Name']}: {exc.message}")
        forks = await client.images.list(
            filters={"reference": [f"{FORK_REPOSITORY}:*"], "label": [LABEL]}
        )
        for image in forks:
            labels = image.get("Labels") or {}
            if everything or not owner_alive(str(labels.get(OWNER_LABEL, ""))):
                await _delete_tags(client, image, report)
        if images:
            for image in await client.images.list(filters={"reference": [f"{REPOSITORY}:*"]}):
                await _delete_tags(client, image, report)
    return report


async def remove_project(client: Any, project: str) -> list[str]:
    """Remove every container and network of one compose project still there (what a
    ``docker compose down`` that failed or was cut short left), by its project label.

    Returns what could not be removed, as messages (an empty list when all went).
    """
    aiodocker = require_aiodocker()
    label = {"label": [f"{COMPOSE_PROJECT_LABEL}={project}"]}
    errors: list[str] = []
    for container in await client.containers.list(all=True, filters=label):
        try:
            await container.delete(force=True, v=True)
        except aiodocker.DockerError as exc:
            if exc.status != 404:
                errors.append(f"container {container.id[:12]}: {exc.message}")
    for net in await client.networks.list(filters=label):
        try:
            await (await client.networks.get(net["Id"])).delete()
        except aiodocker.DockerError as exc:
            if exc.status != 404:
                errors.append(f"network {net['Name']}: {exc.message}")
    return errors


async def _delete_tags(client: Any, image: dict[str, Any], report: PruneReport) -> None:
    """Remove an image by each of its tags, noting what went and what could not."""
    aiodocker = require_aiodocker()
    for tag in image.get("RepoTags") or []:
        try:
            await client.images.delete(tag, force=False)
            report.images.append(tag)
        except aiodocker.DockerError as exc:
            if exc.status != 404:
                report.errors.append(f"image {tag}: {exc.message}")


_pruned: set[str] = set()


async def prune_orphans_once() -> None:
    """Remove leftovers of dead orchestrators, once per process (before a run starts)."""
    key = os.environ.get("DOCKER_HOST", "")
    if key in _pruned:
        return
    _pruned.add(key)
    report = await prune()
    if report.containers or report.networks:
        import logging

        logging.getLogger("agentkit").warning(
            "agentkit: removed %d container(s) and %d network(s) left by a run that was killed",
            len(report.containers),
            len(report.networks),
        )


async def wait_until(predicate: Any, timeout: float, interval: float = 0.1) -> bool:
    """Poll ``await predicate()`` until it is true or ``timeout`` passes."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        if await predicate():
            return True
        if loop.time() >= deadline:
            return False
        await asyncio.sleep(interval)
