"""The docker sandbox's options: one definition, read by the constructor, ``-S`` and the docs."""

from __future__ import annotations

import attrs

from agentkit.sandbox._base import RolloutKeywords

__all__ = ["DEFAULT_IMAGE", "DockerKeywords", "DockerOptions"]

#: The image of tasks that name none (``-S default_image=...`` to change it).
DEFAULT_IMAGE = "debian:bookworm-slim"


class DockerKeywords(RolloutKeywords, total=False):
    """mypy's keywords of ``DockerSandbox(...)``: the rollout's and the :class:`DockerOptions`
    (see ``RolloutKeywords``)."""

    allow_network: bool
    allow_host_root: bool
    default_image: str
    max_builds: int
    no_new_privileges: bool
    keep: bool
    max_output_mb: int


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
