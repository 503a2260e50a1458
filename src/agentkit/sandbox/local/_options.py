"""The local sandbox's options: one definition, read by the constructor, ``-S`` and the docs."""

from __future__ import annotations

from typing import Literal

import attrs

from agentkit.sandbox._base import RolloutKeywords

__all__ = ["LocalKeywords", "LocalOptions"]


@attrs.frozen(kw_only=True)
class LocalOptions:
    """The options of the local sandbox (:class:`~agentkit.sandbox.local.LocalSandbox`).

    Given as ``-S name=value`` on the command line, as ``sandbox_options`` in
    Python (``AgentEnv(..., sandbox_options={"allow_network": True})``), or as
    keywords of ``LocalSandbox(root=..., allow_network=True)``; each is checked
    against the type written here (``agentkit list sandboxes --json``
    lists them).
    """

    allow_network: bool = False
    """Give network to tasks whose hints ask for it."""

    network_mode: Literal["auto", "private", "host"] = "auto"
    """How such a task gets it: ``private`` (its own network namespace, as a Docker
    container has, with outbound traffic carried by slirp4netns; the host's loopback is
    out of reach), ``host`` (the host's network namespace, shared), or ``auto``
    (``private`` when slirp4netns is installed, else ``host``)."""

    keep: bool = False
    """Never delete the rollout's files on close."""

    ro_binds: list[str] | None = None
    """Extra host paths visible read-only at the same path inside."""

    max_processes: int | None = None
    """The most processes the sandbox's uid may have (``RLIMIT_NPROC``), on every command."""

    max_memory_mb: int | None = None
    """The most address space a command's process may have, in MB (``RLIMIT_AS``)."""

    max_file_size_mb: int | None = None
    """The largest file a command may write, in MB (``RLIMIT_FSIZE``)."""

    max_cpu_seconds: int | None = None
    """The most CPU time a command's process may use, in seconds (``RLIMIT_CPU``)."""

    max_open_files: int | None = None
    """The most files a command's process may have open (``RLIMIT_NOFILE``)."""

    max_output_mb: int = 64
    """How much of its stdout and of its stderr each command keeps, in MB."""

    bwrap: str | None = None
    """The bubblewrap program to run (default: ``bwrap`` on ``PATH``)."""

    image: Literal["auto", "host"] = "auto"
    """``auto`` runs a task that has an image (``hints.image``) on that image's root
    file system; ``host`` runs every task on the host's userland (``/usr``) on purpose."""

    image_tool: Literal["auto", "docker", "podman", "buildah"] = "auto"
    """What builds or pulls images and exports their root once: ``auto`` (Docker, else
    Podman, else Buildah), ``docker``, ``podman`` or ``buildah``."""

    image_cache: str | None = None
    """Where exported image roots are kept (default ``~/.cache/agentkit/image-roots``)."""

    entrypoint: bool = True
    """Start the image's ``ENTRYPOINT`` in the background, as a container would."""

    max_builds: int = 2
    """How many images are built (or pulled and exported) at once before a run
    (:meth:`LocalSandbox.prepare`)."""


class LocalKeywords(RolloutKeywords, total=False):
    """mypy's keywords of ``LocalSandbox(...)``: the rollout's and the :class:`LocalOptions`
    (see ``RolloutKeywords``)."""

    allow_network: bool
    network_mode: Literal["auto", "private", "host"]
    keep: bool
    ro_binds: list[str] | None
    max_processes: int | None
    max_memory_mb: int | None
    max_file_size_mb: int | None
    max_cpu_seconds: int | None
    max_open_files: int | None
    max_output_mb: int
    bwrap: str | None
    image: Literal["auto", "host"]
    image_tool: Literal["auto", "docker", "podman", "buildah"]
    image_cache: str | None
    entrypoint: bool
    max_builds: int
