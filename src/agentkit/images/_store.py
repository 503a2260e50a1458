"""Turning a TaskImage into a local image: build once per context digest, or pull once.

A built image is tagged ``agentkit/env:<digest>``, the digest covering the
build context (see :mod:`agentkit.images._context`) and the ids of the images
it builds on; when that tag exists the build is skipped, in this run and in
later ones. Results (and failures) are remembered per process, keyed by the
TaskImage and a cheap fingerprint of its files, so the rollouts of a task
share one build, and an edited Dockerfile is built again.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import re
import time
import weakref
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import attrs

from agentkit._sandbox import TaskImage
from agentkit.images._context import BuildContext, base_images, build_context
from agentkit.images._engine import DockerBackend, ImageBackend
from agentkit.images._errors import ImageError

__all__ = [
    "DIGEST_LABEL",
    "REPOSITORY",
    "ImageRef",
    "PrepareStatus",
    "clear_cache",
    "default_log_dir",
    "prepare_images",
    "resolve_image",
]

#: The repository built images are tagged in (``agentkit/env:<digest>``).
REPOSITORY = "agentkit/env"
#: Label set on every image agentkit builds (value: the digest in its tag).
DIGEST_LABEL = "org.agentkit.context-digest"
_LOG_TAIL = 1500


@attrs.frozen(kw_only=True)
class ImageRef:
    """A local image ready for a TaskImage.

    ``reference`` is what to run (``agentkit/env:<digest>`` for a build, the
    task's own reference for a prebuilt image); ``image_id`` is the engine's
    content id (``sha256:...``), stable for identical images. ``source`` says
    how it was obtained this time: ``built``, ``cached`` (a build skipped
    because the tag existed), ``pulled`` or ``present`` (already there).
    """

    reference: str
    image_id: str
    source: str
    context_digest: str | None = None
    log_path: str | None = None
    seconds: float = 0.0


@attrs.frozen(kw_only=True)
class PrepareStatus:
    """Progress of :func:`prepare_images`: counts, and what is being built or pulled now."""

    total: int
    ready: int
    failed: int
    running: tuple[str, ...]
    built: int = 0

    def line(self) -> str:
        """One line for people: ``images 2/5 ready, 1 failed; building: a, b``."""
        text = f"images {self.ready}/{self.total} ready"
        if self.built:
            text += f" ({self.built} built)"
        if self.failed:
            text += f", {self.failed} failed"
        if self.running:
            text += "; preparing: " + ", ".join(self.running)
        return text


_Result = ImageRef | ImageError
#: (engine key, TaskImage) -> (fingerprint, result)
_memo: dict[tuple[str, TaskImage], tuple[Any, _Result]] = {}
_locks: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[Any, asyncio.Lock]] = (
    weakref.WeakKeyDictionary()
)


def clear_cache() -> None:
    """Forget every result remembered in this process (failed builds are tried again)."""
    _memo.clear()


def _lock(key: Any) -> asyncio.Lock:
    loop = asyncio.get_running_loop()
    return _locks.setdefault(loop, {}).setdefault(key, asyncio.Lock())


def default_log_dir() -> Path:
    """Where build logs go when no run directory is given: the user's cache directory."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "agentkit" / "image-logs"


def _slug(image: TaskImage) -> str:
    src = image.context or (os.path.dirname(image.dockerfile) if image.dockerfile else "")
    parts = [p for p in Path(src).parts if p not in ("/", "environment")]
    name = parts[-1] if parts else "image"
    return re.sub(r"[^a-z0-9._-]+", "-", name.lower()).strip("-._") or "image"


def _tail(path: Path) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    text = text.strip()
    return text if len(text) <= _LOG_TAIL else "[...]\n" + text[-_LOG_TAIL:]


async def resolve_image(
    image: TaskImage,
    *,
    log_dir: str | os.PathLike[str] | None = None,
    backend: ImageBackend | None = None,
) -> ImageRef:
    """The local image for ``image``: built, pulled, or found already there.

    - ``image.image`` set: that reference, pulled when it is not local (when
      the pull fails and a Dockerfile is given, the Dockerfile is built).
    - ``image.dockerfile``: built with ``image.context``, tagged by digest,
      skipped when the tag exists; the build output goes to a log file in
      ``log_dir`` (default: :func:`default_log_dir`).

    Raises :class:`~agentkit.images.ImageError` (``error_kind`` and
    ``log_path`` set) when the image cannot be had. The result, success or
    failure, is remembered for this process until the task's files change.
    """
    backend = backend or DockerBackend()
    if image.image is None and image.dockerfile is None:
        raise ImageError(
            "this task image names neither a Dockerfile nor an image "
            "(a compose project's main service is resolved by the docker sandbox)"
        )
    context: BuildContext | None = None
    fingerprint: Any = ()
    if image.dockerfile is not None:
        context = await asyncio.to_thread(build_context, image)
        fingerprint = await asyncio.to_thread(context.fingerprint)
    key = (backend.key, image)
    async with _lock(key):
        memo = _memo.get(key)
        if memo is not None and memo[0] == fingerprint:
            result = memo[1]
        else:
            try:
                result = await _resolve(image, context, backend, log_dir)
            except ImageError as exc:
                result = exc
            _memo[key] = (fingerprint, result)
    if isinstance(result, ImageError):
        raise result
    return result


async def _resolve(
    image: TaskImage,
    context: BuildContext | None,
    backend: ImageBackend,
    log_dir: str | os.PathLike[str] | None,
) -> ImageRef:
    started = time.perf_counter()
    logs = Path(log_dir) if log_dir is not None else default_log_dir()
    if image.image is not None:
        found = await backend.image_id(image.image)
        if found is not None:
            return ImageRef(reference=image.image, image_id=found, source="present")
        logs.mkdir(parents=True, exist_ok=True)
        log_path = (
            logs / f"pull-{_slug(image)}-{hashlib.sha1(image.image.encode()).hexdigest()[:8]}.log"
        )
        try:
            with open(log_path, "w", encoding="utf-8") as log:
                found = await backend.pull(image.image, log)
        except ImageError as exc:
            if context is None:
                raise ImageError(
                    f"{exc} (pull log: {log_path})",
                    error_kind=exc.error_kind,
                    log_path=str(log_path),
                ) from None
            # Offline, or a private image: the task's own Dockerfile makes it too.
        else:
            return ImageRef(
                reference=image.image,
                image_id=found,
                source="pulled",
                log_path=str(log_path),
                seconds=time.perf_counter() - started,
            )
    assert context is not None
    return await _build(image, context, backend, logs, started)


async def _build(
    image: TaskImage, context: BuildContext, backend: ImageBackend, logs: Path, started: float
) -> ImageRef:
    digest = hashlib.sha256()
    digest.update((await asyncio.to_thread(context.digest)).encode())
    logs.mkdir(parents=True, exist_ok=True)
    slug = _slug(image)
    pull_log = logs / f"{slug}-bases.log"
    for ref in await asyncio.to_thread(base_images, context.dockerfile):
        found = await backend.image_id(ref)
        if found is None:
            try:
                with open(pull_log, "a", encoding="utf-8") as log:
                    found = await backend.pull(ref, log)
            except ImageError as exc:
                raise ImageError(
                    f"{context.dockerfile} builds on {ref}, which is not a local image and "
                    f"could not be pulled: {exc}",
                    error_kind="image_pull",
                    log_path=str(pull_log),
                ) from None
        digest.update(f"\0{ref}\0{found}".encode())
    full = digest.hexdigest()
    tag = f"{REPOSITORY}:{full[:32]}"
    found = await backend.image_id(tag)
    if found is not None:
        return ImageRef(reference=tag, image_id=found, source="cached", context_digest=full)
    log_path = logs / f"{slug}-{full[:12]}.log"
    timeout = image.build_timeout_sec
    try:
        with open(log_path, "w", encoding="utf-8") as log:
            log.write(f"# agentkit: building {context.dockerfile} (context {context.context})\n")
            log.flush()
            built = await asyncio.wait_for(
                backend.build(context, tag=tag, labels={DIGEST_LABEL: full}, log=log),
                timeout,
            )
    except TimeoutError:
        raise ImageError(
            f"building {context.dockerfile} took longer than its build timeout of {timeout:g} s "
            f"(build log: {log_path})",
            log_path=str(log_path),
        ) from None
    except ImageError as exc:
        raise ImageError(
            f"building {context.dockerfile} failed: {exc}\n{_tail(log_path)}\n"
            f"(build log: {log_path})",
            error_kind=exc.error_kind,
            log_path=str(log_path),
        ) from None
    return ImageRef(
        reference=tag,
        image_id=built,
        source="built",
        context_digest=full,
        log_path=str(log_path),
        seconds=time.perf_counter() - started,
    )


async def prepare_images(
    images: Sequence[TaskImage],
    *,
    max_parallel: int = 2,
    log_dir: str | os.PathLike[str] | None = None,
    on_progress: Callable[[PrepareStatus], None] | None = None,
    backend: ImageBackend | None = None,
) -> list[ImageRef | ImageError]:
    """Resolve every image (the same TaskImage once), at most ``max_parallel`` at a time.

    Returns one entry per input, in order: the :class:`ImageRef`, or the
    :class:`~agentkit.images.ImageError` that made it unavailable (one failed
    build does not stop the others). ``on_progress`` is called with a
    :class:`PrepareStatus` whenever one starts or ends.
    """
    if max_parallel < 1:
        raise ValueError(f"max_parallel must be at least 1, got {max_parallel}")
    backend = backend or DockerBackend()
    unique = list(dict.fromkeys(images))
    results: dict[TaskImage, ImageRef | ImageError] = {}
    running: dict[TaskImage, str] = {}
    counts = {"ready": 0, "failed": 0, "built": 0}
    gate = asyncio.Semaphore(max_parallel)

    def report() -> None:
        if on_progress is not None:
            on_progress(
                PrepareStatus(
                    total=len(unique),
                    ready=counts["ready"],
                    failed=counts["failed"],
                    built=counts["built"],
                    running=tuple(sorted(running.values())),
                )
            )

    async def one(image: TaskImage) -> None:
        async with gate:
            running[image] = _slug(image) if image.dockerfile else str(image.image)
            report()
            try:
                ref = await resolve_image(image, log_dir=log_dir, backend=backend)
            except ImageError as exc:
                results[image] = exc
                counts["failed"] += 1
            else:
                results[image] = ref
                counts["ready"] += 1
                counts["built"] += ref.source == "built"
            finally:
                running.pop(image, None)
            report()

    report()
    await asyncio.gather(*(one(i) for i in unique))
    return [results[i] for i in images]
