"""A rollout's container, said once: what the docker sandbox starts, by the engine or by compose.

The docker sandbox makes one :class:`ContainerSpec` per rollout (its labels,
binds, resource limits, hosts entries and whether it has network) and hands
it to the path that starts the container: the Docker Engine API
(:meth:`ContainerSpec.engine_config`) or, for a compose task, the ``main``
service of the rollout's compose project (:meth:`ContainerSpec.compose_service`).
"""

from __future__ import annotations

from typing import Any

import attrs

__all__ = ["KEEP_ALIVE", "ContainerSpec"]

#: What the container runs after the image's entrypoint (Harbor's command).
KEEP_ALIVE = ("sh", "-c", "sleep infinity")


@attrs.frozen(kw_only=True)
class ContainerSpec:
    """Everything about a rollout's container but its image (given when it is started).

    ``binds`` are ``host:container[:ro]`` specs; ``cpus``, ``memory_mb`` and
    ``gpus`` the task's limits (0 or None: none); ``extra_hosts`` are
    ``name:address`` entries of the container's ``/etc/hosts``; ``network``
    whether it reaches the outside.
    """

    labels: dict[str, str]
    binds: tuple[str, ...] = ()
    no_new_privileges: bool = True
    cpus: float | None = None
    memory_mb: int | None = None
    gpus: int | None = None
    extra_hosts: tuple[str, ...] = ()
    network: bool = False
    hostname: str = "sandbox"
    command: tuple[str, ...] = KEEP_ALIVE

    def engine_config(self, image: str, *, network_mode: str) -> dict[str, Any]:
        """The Docker Engine API's container create body (``network_mode``: a network id,
        or ``none``)."""
        host: dict[str, Any] = {
            "Binds": list(self.binds),
            "NetworkMode": network_mode,
            "Init": False,
        }
        if self.no_new_privileges:
            host["SecurityOpt"] = ["no-new-privileges"]
        if self.cpus:
            host["NanoCpus"] = int(self.cpus * 1e9)
        if self.memory_mb:
            host["Memory"] = host["MemorySwap"] = int(self.memory_mb) * 1024 * 1024
        if self.gpus:
            host["DeviceRequests"] = [
                {"Driver": "", "Count": int(self.gpus), "Capabilities": [["gpu"]]}
            ]
        if self.extra_hosts:
            host["ExtraHosts"] = list(self.extra_hosts)
        return {
            "Image": image,
            "Cmd": list(self.command),
            "Labels": dict(self.labels),
            "Hostname": self.hostname,
            "AttachStdin": False,
            "AttachStdout": False,
            "AttachStderr": False,
            "OpenStdin": False,
            "HostConfig": host,
        }

    def compose_service(self, image: str) -> dict[str, Any]:
        """The same container as a compose service (the ``main`` service's base; the
        project's network and labels are the compose project's)."""
        service: dict[str, Any] = {
            "image": image,
            "command": list(self.command),
            "hostname": self.hostname,
            "volumes": list(self.binds),
        }
        if self.no_new_privileges:
            service["security_opt"] = ["no-new-privileges"]
        if self.cpus:
            service["cpus"] = float(self.cpus)
        if self.memory_mb:
            service["mem_limit"] = service["memswap_limit"] = f"{int(self.memory_mb)}m"
        if self.gpus:
            service["deploy"] = {
                "resources": {
                    "reservations": {
                        "devices": [{"capabilities": ["gpu"], "count": int(self.gpus)}]
                    }
                }
            }
        if self.extra_hosts:
            service["extra_hosts"] = list(self.extra_hosts)
        return service
