"""What a task's compose project may ask of the Docker engine, checked before ``up``.

A task folder is untrusted input, and the engine runs as root: a compose
file that bind-mounts ``/`` or the engine's socket, runs ``privileged`` with
``userns_mode: host``, joins the host's namespaces or reads a file outside
the task (``env_file``, a secret's ``file``) would escape its sandbox.
:func:`check_compose_config` reads the project as ``docker compose config
--format json --no-env-resolution`` prints it (compose has then merged the
files, resolved ``extends`` and ``include``, interpolated variables and
made every path absolute) and raises :class:`ComposePolicyError` naming the
file, each service and every refused feature at once.

It is an allowlist: a service key that is not listed here is refused, so a
key compose adds later (``use_api_socket``, ``provider``...) is refused too
until it is read. Paths count after symlinks are resolved: a bind mount's
source, an ``env_file``, a secret's or config's ``file`` and a build context
must be inside the task's folder. What the docker sandbox keeps that the
local one cannot give: named volumes (not ``external``, no driver options),
``tmpfs``, resource limits, ``secrets``/``configs`` from the task's folder,
``extra_hosts``, ``sysctls`` (the engine accepts only namespaced ones).
Ports are published on no host port: a ``published`` port would listen on
the host's addresses, outside the sandbox and its network policy, and two
rollouts of one task would collide. ``logging`` keeps the engine's own
drivers (``json-file``, ``local``, ``none``): another (``syslog``, ``gelf``,
``fluentd``...) would ship the container's output to an address. A
``container_name`` is rewritten per rollout (:mod:`._compose`); at ``up``
one that is not the rollout's own is refused.

What compose reads before it prints the project (the files ``include`` and
``extends`` name, ``label_file``, ``.env``) is checked before compose runs,
by :mod:`agentkit.sandbox.compose`.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any

from agentkit._errors import ComposeFileError

__all__ = ["ComposePolicyError", "check_compose_config"]


class ComposePolicyError(ComposeFileError):
    """A task's compose project asks for something the docker sandbox refuses: every
    reason, one per line."""

    def __init__(
        self,
        path: str,
        problems: list[str],
        why: str = "the docker sandbox refuses this compose file (it would reach outside the task)",
    ) -> None:
        super().__init__(path, problems, why)


#: Service keys allowed as they are (their values stay inside the project).
_PLAIN = frozenset(
    {
        "image", "command", "entrypoint", "environment", "working_dir", "user", "hostname",
        "domainname", "tmpfs", "depends_on", "healthcheck", "restart", "expose", "labels",
        "tty", "stdin_open", "init", "stop_signal", "stop_grace_period", "pull_policy",
        "platform", "cap_drop", "mem_limit", "memswap_limit",
        "mem_reservation", "cpus", "cpu_shares", "cpu_quota", "cpu_period", "cpuset",
        "pids_limit", "shm_size", "ulimits", "extra_hosts", "sysctls", "dns", "dns_search",
        "dns_opt", "mac_address", "scale", "profiles", "oom_score_adj", "post_start",
        "pre_stop", "annotations", "read_only",
    }
)  # fmt: skip
#: Service keys checked one by one below.
_CHECKED = frozenset(
    {
        "build", "volumes", "env_file", "secrets", "configs", "networks", "network_mode",
        "ports", "cap_add", "security_opt", "privileged", "pid", "ipc", "uts", "cgroup",
        "volumes_from", "links", "deploy", "devices", "logging", "container_name",
    }
)  # fmt: skip
#: Why a key is refused (any other unknown key: "not allowed by the docker sandbox").
_WHY = {
    "userns_mode": "would turn off the engine's user-namespace remapping",
    "cgroup_parent": "would place the containers in a cgroup of the host's",
    "device_cgroup_rules": "would open host devices",
    "external_links": "would reach containers outside the task",
    "runtime": "would choose another container runtime",
    "isolation": "would choose another isolation",
    "storage_opt": "would change the engine's storage",
    "use_api_socket": "would hand the container the engine's socket",
    "provider": "would run a program on the host",
    "credential_spec": "would read the host's credentials",
    "gpus": "would open host devices",
}
#: Docker's default capabilities (a container has them without asking).
_DEFAULT_CAPS = frozenset(
    {
        "chown", "dac_override", "fowner", "fsetid", "kill", "setgid", "setuid", "setpcap",
        "net_bind_service", "net_raw", "sys_chroot", "mknod", "audit_write", "setfcap",
    }
)  # fmt: skip
_TOP_LEVEL = frozenset({"name", "services", "networks", "volumes", "secrets", "configs"})
#: Logging drivers that keep a container's output on this machine, in the engine.
_LOCAL_LOGGING = frozenset({"json-file", "local", "none"})


def _inside(path: str, roots: Collection[Path]) -> bool:
    resolved = Path(os.path.realpath(path))
    return os.path.isabs(path) and any(resolved.is_relative_to(root) for root in roots)


class _Check:
    def __init__(
        self,
        task_dir: Path,
        binds: Collection[str],
        services: Collection[str],
        project: str | None,
    ) -> None:
        self.roots = (Path(os.path.realpath(task_dir)),)
        self.binds = frozenset(os.path.realpath(b) for b in binds)
        self.services = frozenset(services)
        self.project = project
        self.problems: list[str] = []

    def bad(self, where: str, what: str) -> None:
        self.problems.append(f"{where}: {what}")

    def path(self, where: str, raw: object, what: str) -> None:
        if isinstance(raw, str) and _inside(raw, self.roots):
            return
        real = os.path.realpath(raw) if isinstance(raw, str) else raw
        via = f" (through a symlink, to {real!r})" if real != raw else ""
        self.bad(where, f"{what} {raw!r}{via} is outside the task's folder ({self.roots[0]})")

    def volumes(self, at: str, items: list[Any], declared: Mapping[str, Any]) -> None:
        for item in items:
            kind, source = item.get("type"), item.get("source")
            if kind == "bind":
                if os.path.realpath(str(source)) not in self.binds:
                    self.path(f"{at}: volumes", source, "bind mount")
            elif kind == "volume":
                if not source or source not in declared:
                    self.bad(f"{at}: volumes", f"volume {source!r} is not a volume of the project")
            elif kind != "tmpfs":
                self.bad(f"{at}: volumes", f"a {kind!r} mount is not allowed")

    def namespaces(self, at: str, svc: Mapping[str, Any]) -> None:
        if svc.get("privileged"):
            self.bad(f"{at}: privileged", "would give the container the host's devices and root")
        for key in ("pid", "ipc", "uts", "cgroup", "network_mode"):
            mode = svc.get(key)
            own = mode in (None, "", "private", "shareable", "bridge", "default", "none")
            service = str(mode).startswith("service:") and str(mode)[8:] in self.services
            if not own and not service:
                self.bad(f"{at}: {key}", f"{mode!r} would join a namespace outside the project")
        for ref in svc.get("volumes_from") or []:
            name = str(ref).removeprefix("service:").split(":", 1)[0]
            if str(ref).startswith("container:") or name not in self.services:
                self.bad(f"{at}: volumes_from", f"{ref!r} is not a service of the project")
        for link in svc.get("links") or []:
            if str(link).split(":", 1)[0] not in self.services:
                self.bad(f"{at}: links", f"{link!r} is not a service of the project")
        if svc.get("devices"):
            self.bad(f"{at}: devices", "would open host devices")

    def privileges(self, at: str, svc: Mapping[str, Any]) -> None:
        beyond = [
            str(c)
            for c in svc.get("cap_add") or []
            if str(c).lower().removeprefix("cap_") not in _DEFAULT_CAPS
        ]
        if beyond:
            self.bad(f"{at}: cap_add", f"{', '.join(beyond)} beyond Docker's default capabilities")
        for opt in svc.get("security_opt") or []:
            if str(opt).replace("=", ":") not in ("no-new-privileges", "no-new-privileges:true"):
                self.bad(f"{at}: security_opt", f"{opt!r} would loosen the container's confinement")
        for port in svc.get("ports") or []:
            if port.get("published") or port.get("host_ip") or port.get("mode") == "host":
                self.bad(
                    f"{at}: ports",
                    f"publishing {port.get('published') or port.get('target')} on the host is "
                    "not allowed (services reach each other on the project's network)",
                )
        resources = (svc.get("deploy") or {}).get("resources") or {}
        devices = (resources.get("reservations") or {}).get("devices") or []
        for device in devices:
            if set(device) - {"capabilities", "count"} or device.get("capabilities") != ["gpu"]:
                self.bad(f"{at}: deploy", "reserves devices other than GPUs")

    def service(self, name: str, svc: Mapping[str, Any], top: Mapping[str, Any]) -> None:
        at = f"service {name!r}"
        for key in svc:
            if key not in _PLAIN and key not in _CHECKED and not str(key).startswith("x-"):
                self.bad(f"{at}: {key}", _WHY.get(str(key), "not allowed by the docker sandbox"))
        self.volumes(at, list(svc.get("volumes") or []), top.get("volumes") or {})
        for env_file in svc.get("env_file") or []:
            self.path(f"{at}: env_file", env_file.get("path"), "file")
        build = svc.get("build")
        if isinstance(build, Mapping):
            context = str(build.get("context") or "")
            self.path(f"{at}: build", context, "build context")
            dockerfile = os.path.join(context, str(build.get("dockerfile") or "Dockerfile"))
            self.path(f"{at}: build", dockerfile, "Dockerfile")
            for extra in (build.get("additional_contexts") or {}).values():
                self.path(f"{at}: build", extra, "build context")
        for key in ("networks", "secrets", "configs"):
            known = top.get(key) or {}
            for ref in svc.get(key) or {}:
                source = ref.get("source") if isinstance(ref, Mapping) else ref
                if source not in known and not (key == "networks" and source == "default"):
                    self.bad(f"{at}: {key}", f"{source!r} is not one of the project's {key}")
        self.namespaces(at, svc)
        self.privileges(at, svc)
        self.logging(at, svc.get("logging"))
        ours = f"{self.project}-{name}"
        given = svc.get("container_name")
        if self.project is not None and given is not None and given != ours:
            self.bad(
                f"{at}: container_name",
                f"{given!r} is not the rollout's own name ({ours!r})",
            )

    def logging(self, at: str, logging: object) -> None:
        if not isinstance(logging, Mapping):
            return
        driver = logging.get("driver")
        if driver is not None and driver not in _LOCAL_LOGGING:
            self.bad(
                f"{at}: logging",
                f"driver {driver!r} would send the container's output off this machine's "
                f"engine (allowed: {', '.join(sorted(_LOCAL_LOGGING))})",
            )

    def top_level(self, data: Mapping[str, Any]) -> None:
        for key in data:
            if key not in _TOP_LEVEL and not str(key).startswith("x-"):
                self.bad(f"top-level {key}", "not allowed by the docker sandbox")
        for kind in ("volumes", "networks", "secrets", "configs"):
            for name, spec in (data.get(kind) or {}).items():
                spec = spec or {}
                at = f"{kind[:-1]} {name!r}"
                if spec.get("external"):
                    self.bad(f"{at}: external", "would reach outside the project")
                for key in ("driver", "driver_opts"):
                    if key in spec and spec[key] not in ("bridge", "local", {}):
                        self.bad(f"{at}: {key}", "only the engine's default driver is allowed")
                if "file" in spec:
                    self.path(f"{at}: file", spec["file"], "file")


def check_compose_config(
    config: Mapping[str, Any],
    *,
    compose_file: str,
    task_dir: str | os.PathLike[str],
    allowed_binds: Collection[str] = (),
    project: str | None = None,
) -> None:
    """Raise :class:`ComposePolicyError` if the project ``config`` (the JSON ``docker
    compose config --format json --no-env-resolution`` prints) reaches outside the task.

    Bind sources, ``env_file`` and secret files and build contexts must be
    inside ``task_dir`` once symlinks are resolved; ``allowed_binds`` are
    the sources agentkit itself mounts (the rollout's log directories).
    ``project`` is the rollout's compose project, given at ``up``: a service's
    ``container_name`` must then be the one agentkit gave it (``<project>-<service>``).
    """
    services: Mapping[str, Any] = config.get("services") or {}
    check = _Check(Path(task_dir), allowed_binds, services, project)
    check.top_level(config)
    for name, svc in services.items():
        check.service(str(name), svc or {}, config)
    if check.problems:
        raise ComposePolicyError(compose_file, check.problems)
