"""The compose file's model: the typed services the local sandbox will start.

What :func:`agentkit.sandbox.local._composefile.load_compose` returns, and
the one error it raises.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

import attrs

from agentkit._errors import ComposeFileError
from agentkit.images._imageroot import HealthCheck

__all__ = [
    "CONDITIONS",
    "Build",
    "ComposeError",
    "ComposeFile",
    "Condition",
    "Dependency",
    "Service",
    "VolumeMount",
]

Condition = Literal["service_started", "service_healthy", "service_completed_successfully"]
#: The ``depends_on`` conditions, as compose spells them.
CONDITIONS = ("service_started", "service_healthy", "service_completed_successfully")


class ComposeError(ComposeFileError):
    """A compose file the local sandbox cannot run: every reason, one per line."""

    def __init__(self, path: str, problems: list[str], why: str | None = None) -> None:
        why = why or "the local sandbox cannot run this compose file (use --sandbox docker for it)"
        super().__init__(path, problems, why)


@attrs.frozen
class Build:
    """A service's ``build:``: its context (an absolute path) and Dockerfile (in it)."""

    context: str
    dockerfile: str = "Dockerfile"
    args: Mapping[str, str] = attrs.field(factory=dict)
    target: str | None = None


@attrs.frozen
class VolumeMount:
    """A service's volume: a named volume, a bind of the task's folder, or a tmpfs."""

    kind: Literal["volume", "bind", "tmpfs"]
    #: The volume's name, the bind's absolute host path, "" for a tmpfs.
    source: str
    target: str
    read_only: bool = False


@attrs.frozen
class Dependency:
    """One ``depends_on`` entry."""

    service: str
    condition: Condition = "service_started"


@attrs.frozen
class Service:
    """One service, as the local sandbox will start it."""

    name: str
    image: str | None = None
    build: Build | None = None
    #: A shell line (str) or an argv; None: the image's.
    command: str | tuple[str, ...] | None = None
    entrypoint: str | tuple[str, ...] | None = None
    environment: Mapping[str, str] = attrs.field(factory=dict)
    working_dir: str | None = None
    user: str | None = None
    hostname: str | None = None
    volumes: tuple[VolumeMount, ...] = ()
    depends_on: tuple[Dependency, ...] = ()
    #: None: the image's own HEALTHCHECK (``disable: true`` gives ``NONE``).
    healthcheck: HealthCheck | None = None
    healthcheck_disabled: bool = False
    restart: str = "no"
    aliases: tuple[str, ...] = ()
    #: Ports the service listens on (inside the rollout; nothing is published on the host).
    ports: tuple[int, ...] = ()


@attrs.frozen
class ComposeFile:
    """A compose file's services, and its named volumes."""

    path: str
    services: Mapping[str, Service]
    volumes: tuple[str, ...] = ()

    def start_order(self) -> list[str]:
        """The services in an order where each comes after what it depends on."""
        done: list[str] = []

        def visit(name: str) -> None:
            if name in done:
                return
            for dep in self.services[name].depends_on:
                visit(dep.service)
            done.append(name)

        for name in sorted(self.services):
            visit(name)
        return done
