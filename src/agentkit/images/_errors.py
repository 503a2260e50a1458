"""Errors of the image layer."""

from __future__ import annotations

from agentkit._errors import AgentkitError

__all__ = ["ImageError", "ImageUnavailableError"]


class ImageError(AgentkitError):
    """A task's image could not be built or pulled.

    ``error_kind`` classifies it for the rollouts that needed the image
    (``image_build``, ``image_pull``); ``log_path`` is the build log, when
    there is one.
    """

    def __init__(
        self, message: str, *, error_kind: str = "image_build", log_path: str | None = None
    ):
        super().__init__(message)
        self.error_kind = error_kind
        self.log_path = log_path


class ImageUnavailableError(ImageError):
    """No container engine (or its client library) to build or pull images with."""

    def __init__(self, message: str) -> None:
        super().__init__(message, error_kind="image_engine")
