"""Task images: a task's environment (a :class:`~agentkit.TaskImage`) made a local image.

One small layer, shared by every sandbox that runs tasks in their images::

    from agentkit.images import resolve_image, prepare_images

    ref = await resolve_image(hints.image)        # build (once) or pull (once)
    print(ref.reference, ref.image_id)            # agentkit/env:3f2a... sha256:...

- A Dockerfile is built with its context (honouring ``.dockerignore``) and
  tagged ``agentkit/env:<digest>``, the digest covering the context and the
  ids of its base images: built once, reused by every rollout and later run.
- A prebuilt ``image`` is used when local, pulled when not.
- :func:`prepare_images` resolves many in parallel (bounded), with progress;
  a failure is returned for that image, the others go on.

The engine is Docker through aiodocker (``pip install 'agentkit[docker]'``);
:class:`ImageBackend` is the seam for others. See ``docs/sandboxes.md``.

The local sandbox runs a task on its image's root file system, without an
engine at run time: ``_tools`` makes the image with Docker, Podman or Buildah
(whichever is there; their build steps run with a runtime that works on this
host, ``_buildruntime``) and exports its root, which ``_imageroot`` keeps in a
cache on disk, once per image. Without any engine, ``_archive`` makes an image's
root from its archive (``docker save``, an OCI layout: :func:`import_archive`,
``agentkit images import``), found by its name before any tool is asked
(:func:`imported_root`).
"""

from __future__ import annotations

from agentkit.images._archive import (
    ArchiveImage,
    import_archive,
    imported_root,
    normalize_reference,
    read_archive,
)
from agentkit.images._context import BuildContext, base_images, build_context
from agentkit.images._dockerignore import IgnoreRules, parse_dockerignore, read_dockerignore
from agentkit.images._engine import DockerBackend, ImageBackend, docker_client
from agentkit.images._errors import ImageError, ImageUnavailableError
from agentkit.images._store import (
    DIGEST_LABEL,
    REPOSITORY,
    ImageRef,
    PrepareStatus,
    clear_cache,
    default_log_dir,
    prepare_images,
    resolve_image,
)

__all__ = [
    "DIGEST_LABEL",
    "REPOSITORY",
    "ArchiveImage",
    "BuildContext",
    "DockerBackend",
    "IgnoreRules",
    "ImageBackend",
    "ImageError",
    "ImageRef",
    "ImageUnavailableError",
    "PrepareStatus",
    "base_images",
    "build_context",
    "clear_cache",
    "default_log_dir",
    "docker_client",
    "import_archive",
    "imported_root",
    "normalize_reference",
    "parse_dockerignore",
    "prepare_images",
    "read_archive",
    "read_dockerignore",
    "resolve_image",
]
