"""Talking to a Docker-compatible engine through aiodocker (the ``docker`` extra).

:class:`ImageBackend` is what the image layer needs from an engine; the
Docker one is :class:`DockerBackend`. Other engines (Podman, Buildah) can
implement the same four members.
"""

from __future__ import annotations

import asyncio
import os
from types import ModuleType
from typing import IO, TYPE_CHECKING, Any, Protocol, runtime_checkable

from agentkit._errors import missing_extra
from agentkit.images._errors import ImageError, ImageUnavailableError

if TYPE_CHECKING:
    from agentkit.images._context import BuildContext

__all__ = [
    "DockerBackend",
    "ImageBackend",
    "docker_client",
    "engine_error",
    "pulled_id",
    "require_aiodocker",
]


def require_aiodocker() -> ModuleType:
    """The aiodocker module, or a clear error saying how to install it."""
    try:
        import aiodocker
    except ImportError:
        raise ImageUnavailableError(
            missing_extra("talking to Docker", "aiodocker", "docker")
        ) from None
    return aiodocker


def docker_client() -> Any:
    """A new ``aiodocker.Docker`` client for ``DOCKER_HOST`` or the local socket (close it)."""
    aiodocker = require_aiodocker()
    try:
        return aiodocker.Docker()
    except (ValueError, OSError) as exc:
        raise ImageUnavailableError(
            f"no Docker engine found ({exc}); start dockerd, or point DOCKER_HOST at one"
        ) from None


def engine_error(exc: BaseException, what: str) -> ImageUnavailableError:
    """An engine that cannot be reached, said in one line."""
    host = os.environ.get("DOCKER_HOST", "the local Docker socket")
    return ImageUnavailableError(
        f"{what}: cannot reach the Docker engine at {host} ({type(exc).__name__}: {exc}); "
        "is dockerd running?"
    )


@runtime_checkable
class ImageBackend(Protocol):
    """What the image layer needs from a container engine."""

    #: Identifies the engine in the process-wide cache (its address).
    key: str

    async def image_id(self, reference: str) -> str | None:
        """The id (``sha256:...``) of a local image, or None when it is not there."""
        ...

    async def pull(self, reference: str, log: IO[str]) -> str:
        """Pull ``reference``, writing progress to ``log``; its id. Raises ImageError."""
        ...

    async def build(
        self, context: BuildContext, *, tag: str, labels: dict[str, str], log: IO[str]
    ) -> str:
        """Build ``context`` as ``tag``, writing the build output to ``log``; its id."""
        ...


def _split_reference(reference: str) -> tuple[str, str | None]:
    """(name, tag) of an image reference; a digest reference keeps its digest in the name."""
    if "@" in reference:
        return reference, None
    slash = reference.rfind("/")
    colon = reference.rfind(":")
    if colon > slash:
        return reference[:colon], reference[colon + 1 :]
    return reference, "latest"


async def pulled_id(backend: ImageBackend, reference: str) -> str:
    """The id of the image a pull of ``reference`` left (an :class:`ImageError` when it
    left none)."""
    found = await backend.image_id(reference)
    if found is None:
        raise ImageError(f"pulling {reference} left no image", error_kind="image_pull")
    return found


class DockerBackend:
    """The Docker engine at ``DOCKER_HOST`` (or the local socket), through aiodocker."""

    def __init__(self) -> None:
        self.key = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")

    async def image_id(self, reference: str) -> str | None:
        aiodocker = require_aiodocker()
        async with docker_client() as client:
            try:
                info = await client.images.inspect(reference)
            except aiodocker.DockerError as exc:
                if exc.status == 404:
                    return None
                raise ImageError(f"inspecting image {reference}: {exc.message}") from None
            except OSError as exc:
                raise engine_error(exc, f"inspecting image {reference}") from None
        return str(info["Id"])

    async def pull(self, reference: str, log: IO[str]) -> str:
        aiodocker = require_aiodocker()
        name, tag = _split_reference(reference)
        async with docker_client() as client:
            try:
                async for chunk in client.images.pull(name, tag=tag, stream=True):
                    _log_chunk(log, chunk)
                    if "error" in chunk:
                        raise ImageError(
                            f"pulling {reference} failed: {chunk['error']}", error_kind="image_pull"
                        )
            except aiodocker.DockerError as exc:
                raise ImageError(
                    f"pulling {reference} failed: {exc.message}", error_kind="image_pull"
                ) from None
            except OSError as exc:
                raise engine_error(exc, f"pulling {reference}") from None
        return await pulled_id(self, reference)

    async def build(
        self, context: BuildContext, *, tag: str, labels: dict[str, str], log: IO[str]
    ) -> str:
        aiodocker = require_aiodocker()
        tar = await asyncio.to_thread(context.spooled_tar)
        image_id: str | None = None
        try:
            async with docker_client() as client:
                stream = client.images.build(
                    fileobj=tar,
                    encoding="identity",
                    path_dockerfile=context.dockerfile_name,
                    tag=tag,
                    labels=labels,
                    rm=True,
                    forcerm=True,
                    stream=True,
                )
                async for chunk in stream:
                    _log_chunk(log, chunk)
                    if "error" in chunk:
                        raise ImageError(str(chunk["error"]).strip())
                    aux = chunk.get("aux")
                    if isinstance(aux, dict) and aux.get("ID"):
                        image_id = str(aux["ID"])
        except aiodocker.DockerError as exc:
            log.write(f"\n{exc.message}\n")
            raise ImageError(str(exc.message).strip()) from None
        except OSError as exc:
            raise engine_error(exc, f"building {context.dockerfile}") from None
        finally:
            tar.close()
        found = await self.image_id(tag)
        if found is None:
            raise ImageError(f"the build reported success but left no image {tag}")
        return image_id or found


def _log_chunk(log: IO[str], chunk: dict[str, Any]) -> None:
    if "stream" in chunk:
        log.write(str(chunk["stream"]))
    elif "status" in chunk:
        line = str(chunk["status"])
        if chunk.get("id"):
            line = f"{chunk['id']}: {line}"
        if chunk.get("progress") is None:
            log.write(line + "\n")
    elif "error" in chunk:
        log.write(f"ERROR: {chunk['error']}\n")
    log.flush()
