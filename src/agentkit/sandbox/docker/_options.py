"""The docker sandbox's options: one definition, read by the constructor, ``-S`` and the docs."""

from __future__ import annotations

import attrs

__all__ = ["DEFAULT_IMAGE", "DockerOptions"]

#: The image of tasks that name none (``-S default_image=...`` to change it).
DEFAULT_IMAGE = "debian:bookworm-slim"


@attrs.frozen(kw_only=True)
class DockerOptions:
    """The options of the docker sandbox (:class:`~agentkit.sandbox.docker.DockerSandbox`).

    Given as ``-S name=value`` on the command line, as ``sandbox_options`` in
    Python, or as keywords of ``DockerSandbox(root=..., allow_network=True)``;
    each is checked against the type written here.
    """

    allow_network: bool = False
    """Give network to tasks whose hints ask for it."""

    allow_host_root: bool = False
    """Run even on an engine whose container root is this machine's root (no
    userns-remap, not rootless); recorded as a warning."""

    default_image: str = DEFAULT_IMAGE
    """The image of tasks that name none."""

    max_builds: int = 2
    """How many images are built (or pulled) at once before the rollouts."""

    no_new_privileges: bool = True
    """Forbid setuid elevation inside (false for images whose non-root user needs
    ``sudo``)."""

    keep: bool = False
    """Never delete the rollout's host directory."""

    max_output_mb: int = 64
    """How much of its stdout and of its stderr each command keeps, in MB."""
