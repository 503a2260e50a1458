"""The local sandbox's image roots: made before a run, held while a sandbox runs.

A task with an image runs on that image's exported root file system (see
``agentkit.images._imageroot``). Before a run, :func:`prepare_images` builds or pulls every
task's image and exports its root, once each; a starting sandbox then gets
its root and holds it (:func:`hold_image_root`) so that no prune removes it
while the sandbox runs, and once started waits for the image's
``HEALTHCHECK`` (:func:`wait_healthy`), as ``compose up --wait`` does.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Literal

from agentkit._errors import SandboxError
from agentkit._sandbox import ExecutionHints, TaskImage
from agentkit.images import ArchiveImage, ImageError, PrepareStatus, import_archive, imported_root
from agentkit.images._imageroot import (
    HEALTH_TIMEOUT_SEC,
    IMAGE_ID_BASE,
    IMAGE_ID_COUNT,
    HealthCheck,
    ImageRoot,
    hold,
)
from agentkit.images._tools import ImageTool as ImageToolKind
from agentkit.images._tools import find_image_tool, task_image_root
from agentkit.sandbox._base import BaseSandbox
from agentkit.sandbox._reaper import (
    LABEL,
    OWNER_ENV,
    owner_labels,
    owner_token,
    reap_orphans_once,
    reaped,
)
from agentkit.sandbox.local._composefile import ComposeError, ComposeFile, load_compose
from agentkit.sandbox.local._hostid import needs_own_id

__all__ = [
    "check_runnable",
    "describe",
    "export_labels",
    "hold_image_root",
    "import_image",
    "prepare_images",
    "wait_healthy",
]

ImageTool = Literal["auto", "docker", "podman", "buildah"]
#: The first gap between two runs of a failing healthcheck (see :func:`wait_healthy`).
_FIRST_GAP_SEC = 0.05


def export_labels() -> dict[str, str]:
    """The labels of a container an image's root is exported through: as the docker
    sandbox's containers, so that one an orchestrator killed mid-export leaves is removed
    by ``agentkit sandbox prune``."""
    return {**owner_labels("image-export"), LABEL: "local-image-export"}


def _imported(image: TaskImage, cache: Path | None, id_base: int | None) -> ImageRoot | None:
    """The root imported from an archive under the task's image name
    (``agentkit images import``), which needs no engine; None for none (or for a build)."""
    if image.image is None or image.dockerfile is not None:
        return None
    return imported_root(image.image, cache, id_base)


async def _export_tool(choice: ImageTool) -> ImageToolKind:
    """The image tool, its commands marked with their owner as the sandboxes' processes
    are; what an earlier orchestrator's commands left running (killed mid-export) is
    reaped first."""
    if not reaped():
        await asyncio.to_thread(reap_orphans_once)
    return find_image_tool(choice, labels=export_labels(), env={OWNER_ENV: owner_token()})


def _id_base() -> int | None:
    """The host id of uid 0 in the image roots this process's sandboxes run on."""
    return IMAGE_ID_BASE if needs_own_id((IMAGE_ID_BASE, IMAGE_ID_COUNT)) else None


async def import_image(
    archive: Path, *, tag: str | None = None, image_cache: Path | None = None
) -> list[tuple[ArchiveImage, ImageRoot]]:
    """Import an image archive (``docker save``, an OCI layout) into the image-root cache
    as this user's local sandboxes use it (``agentkit images import``): a task whose
    ``image:`` names it then runs on it with no image tool at all."""
    return await import_archive(archive, tag=tag, cache_dir=image_cache, id_base=_id_base())


def check_runnable(
    image: TaskImage, env: Mapping[str, str] | None = None
) -> tuple[ComposeFile, dict[str, TaskImage]] | None:
    """Refuse what the local sandbox cannot run, before anything starts.

    For a compose project: its file read (``env`` gives ``${VAR}`` their values),
    everything it uses that the local sandbox cannot give refused in one
    :class:`~agentkit.sandbox.local._composefile.ComposeError`, and each service's
    image (the main service's is the task's own unless it has ``build:`` or
    ``image:``). None for a single image.
    """
    if not image.compose_file:
        return None
    compose = load_compose(image.compose_file, env=env or {}, main_service=image.main_service)
    images: dict[str, TaskImage] = {}
    problems: list[str] = []
    for name, svc in compose.services.items():
        if svc.build is not None:
            if svc.build.args or svc.build.target:
                problems.append(
                    f"service {name!r}: build.args and build.target are not supported by the "
                    "local sandbox yet"
                )
                continue
            images[name] = TaskImage(
                dockerfile=os.path.join(svc.build.context, svc.build.dockerfile),
                context=svc.build.context,
                build_timeout_sec=image.build_timeout_sec,
            )
        elif svc.image is not None:
            images[name] = TaskImage(image=svc.image)
    main = image.main_service
    if main not in compose.services:
        problems.append(f"no service {main!r} (the service the rollout's commands run in)")
    elif main not in images:
        if image.dockerfile is None and image.image is None:
            problems.append(
                f"service {main!r} has no image or build, and the task has no "
                "environment/Dockerfile"
            )
        else:
            images[main] = TaskImage(
                dockerfile=image.dockerfile,
                context=image.context,
                image=image.image,
                build_timeout_sec=image.build_timeout_sec,
            )
    if problems:
        raise ComposeError(image.compose_file, problems)
    return compose, images


def describe(image: TaskImage) -> str:
    """A short name for a task's image, for progress lines."""
    if image.image:
        return image.image
    parts = Path(image.context or os.path.dirname(image.dockerfile or "") or "image").parts
    return parts[-2] if len(parts) > 1 and parts[-1] == "environment" else parts[-1]


async def prepare_images(
    hints: Sequence[ExecutionHints],
    *,
    log_dir: Path | None,
    on_progress: Callable[[str], None] | None,
    image_tool: ImageTool,
    image_cache: str | None,
    max_builds: int,
) -> list[BaseException | None]:
    """Build or pull every task's image and export its root, once each.

    At most ``max_builds`` at a time, with a progress line. One entry per
    hints: None when ready (or no image), else the error every rollout of
    that task then fails with (what to install when no tool can make
    images; a failed build with its log).
    """
    if not any(h.image for h in hints):
        return [None] * len(hints)
    id_base = _id_base()
    cache = Path(image_cache) if image_cache else None
    wanted = list(dict.fromkeys(h.image for h in hints if h.image))
    # a compose file's ${VAR} take the task's environment (the first task's, per image)
    envs: dict[TaskImage, Mapping[str, str]] = {}
    for h in hints:
        if h.image is not None:
            envs.setdefault(h.image, h.env)
    results: dict[TaskImage, BaseException | None] = {}
    tools: list[ImageToolKind] = []
    tool_lock = asyncio.Lock()

    async def get_tool() -> ImageToolKind:
        # only when an image was not imported from an archive; its failure is that image's
        async with tool_lock:
            if not tools:
                tools.append(await _export_tool(image_tool))
            return tools[0]

    gate = asyncio.Semaphore(max_builds)
    running: dict[TaskImage, str] = {}

    def report() -> None:
        if on_progress is not None:
            failed = sum(r is not None for r in results.values())
            on_progress(
                PrepareStatus(
                    total=len(wanted),
                    ready=len(results) - failed,
                    failed=failed,
                    running=tuple(sorted(running.values())),
                ).line()
            )

    async def one(task_image: TaskImage) -> None:
        async with gate:
            running[task_image] = describe(task_image)
            report()
            try:
                compose = check_runnable(task_image, envs.get(task_image))
                for one_image in [task_image] if compose is None else compose[1].values():
                    if await asyncio.to_thread(_imported, one_image, cache, id_base) is None:
                        await task_image_root(
                            one_image,
                            tool=await get_tool(),
                            cache_dir=cache,
                            id_base=id_base,
                            log_dir=log_dir,
                        )
            except (SandboxError, ImageError) as exc:
                results[task_image] = exc
            else:
                results[task_image] = None
            finally:
                running.pop(task_image, None)
            report()

    await asyncio.gather(*(one(i) for i in wanted))
    return [results[h.image] if h.image else None for h in hints]


async def hold_image_root(
    image: TaskImage, *, image_tool: ImageTool, image_cache: Path | None, id_base: int | None
) -> tuple[ImageRoot, int]:
    """The task's image root (imported from an archive, else made by an image tool), and
    the shared lock that keeps a prune from removing it."""
    tool: ImageToolKind | None = None
    for _ in range(3):
        root = await asyncio.to_thread(_imported, image, image_cache, id_base)
        if root is None:
            tool = tool or await _export_tool(image_tool)
            root = await task_image_root(image, tool=tool, cache_dir=image_cache, id_base=id_base)
        fd = await asyncio.to_thread(hold, root)
        if fd is not None:
            return root, fd
    raise SandboxError(
        f"the exported root of {describe(image)} was removed as the sandbox started, "
        "three times (is `agentkit sandbox prune --image-roots` running in a loop?)"
    )


async def wait_healthy(
    sandbox: BaseSandbox,
    check: HealthCheck,
    *,
    shell: str,
    user: str | None,
    what: str = "the image's HEALTHCHECK",
) -> None:
    """Wait until the image's ``HEALTHCHECK`` passes in ``sandbox``, as ``compose up --wait`` does.

    It turns unhealthy when Docker's would: once ``retries`` intervals after the
    start period have passed with the check still failing (or a wait past
    :data:`HEALTH_TIMEOUT_SEC`). Docker first checks after one ``interval``
    (``start_interval`` in the start period); here the check runs at once and
    then again sooner, its gap doubling from 50 ms up to that interval, so a
    service is seen healthy soon after it is (a check costs one command). It
    runs with ``shell`` (for a shell-form check), as ``user`` when given;
    ``what`` names the check in the error.
    """
    loop = asyncio.get_running_loop()
    started = loop.time()
    argv = check.argv(shell)
    gap = _FIRST_GAP_SEC / 2
    while True:
        r = await sandbox.exec(argv, user=user, timeout=check.timeout)
        if r.ok:
            return
        now = loop.time()
        past_start = now - started - check.start_period
        if past_start >= check.retries * check.interval or now - started > HEALTH_TIMEOUT_SEC:
            output = " ".join((r.stdout + r.stderr).split())[:300]
            raise SandboxError(
                f"{what} failed ({check.retries} time(s) after its start "
                f"period; last: exit {r.exit_code}{', timed out' if r.timed_out else ''}"
                f"{': ' + output if output else ''})"
            )
        gap = min(gap * 2, check.start_interval if past_start < 0 else check.interval)
        await asyncio.sleep(gap)
