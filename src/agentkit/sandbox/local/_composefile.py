"""A compose file as the local sandbox will run it: typed services, and what it refuses.

:func:`load_compose` reads a task's ``docker-compose.yaml`` (YAML through
PyYAML, with compose's ``${VAR}`` interpolation) into :class:`ComposeFile`:
for each service what the local sandbox can give it without a daemon
(``build``/``image``, ``command``/``entrypoint``, ``environment``,
``working_dir``, ``user``, ``hostname``, named and bind ``volumes``,
``tmpfs``, ``depends_on`` with its three conditions, ``healthcheck``,
``restart``, network ``aliases`` and ``container_name`` as a name,
``ports``), with ``include`` and ``extends`` merged in (both by
:mod:`agentkit.sandbox.compose`: :func:`~agentkit.sandbox.compose.merge_sources`
once :func:`~agentkit.sandbox.compose.read_compose_sources` knows every file they
name is inside the task's folder). Every other key a service or
the file uses is refused, all of them in one :class:`ComposeError` naming
the file, the service and why, before anything starts: what needs root or a
daemon (``privileged``, ``network_mode: host``, ``devices``, ``cap_add``
beyond the capabilities a sandbox already keeps in its user namespace, host
namespaces...), what would reach outside the task (a bind mount or build
context outside the task's folder, an ``external`` volume), and what is not
built yet. Keys that change nothing inside a rollout (``labels``,
``expose``, ``tty``...) and ``x-`` extensions are accepted and have no
effect. A malformed value is reported the same way, with the field and what
was expected.

``_image.check_runnable`` reads it before a compose task's sandbox starts
(and before a run's images are made); ``_composeup`` starts its services.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs

from agentkit.sandbox.compose import merge_sources, read_compose_sources
from agentkit.sandbox.local._composemodel import (
    Build,
    ComposeError,
    ComposeFile,
    Dependency,
    Service,
    VolumeMount,
)
from agentkit.sandbox.local._composeread import FieldReader, interpolate_all
from agentkit.sandbox.local._stage import DOCKER_CAPS

__all__ = [
    "Build",
    "ComposeError",
    "ComposeFile",
    "Dependency",
    "Service",
    "VolumeMount",
    "load_compose",
]

_RESTART = re.compile(r"no|always|unless-stopped|on-failure(:[0-9]+)?")

#: Service keys that change nothing inside a rollout: accepted, no effect.
_NO_EFFECT = frozenset(
    {
        "labels",
        "expose",
        "tty",
        "stdin_open",
        "init",
        "stop_signal",
        "stop_grace_period",
        "logging",
        "pull_policy",
        "container_name",  # an alias (below)
        "platform",
        "cap_drop",
    }
)
#: Why a service key is refused (keys not listed here nor supported: "not supported").
_REFUSED = {
    "privileged": "needs root on the host",
    "devices": "host devices need a daemon or root",
    "device_cgroup_rules": "host devices need a daemon or root",
    "pid": "host namespaces are out of reach",
    "ipc": "host namespaces are out of reach",
    "uts": "host namespaces are out of reach",
    "userns_mode": "host namespaces are out of reach",
    "cgroup": "host namespaces are out of reach",
    "cgroup_parent": "cgroups need a daemon",
    "security_opt": "seccomp/AppArmor profiles need a daemon",
    "sysctls": "not supported by the local sandbox",
    "extra_hosts": "not supported by the local sandbox yet",
    "dns": "not supported by the local sandbox",
    "links": "legacy links are not supported (services reach each other by name)",
    "external_links": "containers outside the task are out of reach",
    "volumes_from": "not supported by the local sandbox yet",
    "env_file": "not supported by the local sandbox yet",
    "secrets": "not supported by the local sandbox yet",
    "configs": "not supported by the local sandbox yet",
    "deploy": "resource limits and replicas are not supported by the local sandbox yet",
    "ulimits": "not supported by the local sandbox yet",
    "mem_limit": "not supported by the local sandbox yet",
    "cpus": "not supported by the local sandbox yet",
    "shm_size": "not supported by the local sandbox yet",
    "scale": "replicas are not supported by the local sandbox",
    "profiles": "not supported by the local sandbox yet",
}
_SUPPORTED = frozenset(
    {
        "build",
        "image",
        "command",
        "entrypoint",
        "environment",
        "working_dir",
        "user",
        "hostname",
        "volumes",
        "tmpfs",
        "depends_on",
        "healthcheck",
        "restart",
        "networks",
        "ports",
        "cap_add",
        "network_mode",
    }
)
_TOP_LEVEL = frozenset({"version", "name", "services", "volumes", "networks"})


def _service(
    r: FieldReader,
    name: str,
    raw: object,
    volumes: Mapping[str, object],
    networks: Mapping[str, object],
) -> Service | None:
    at = f"service {name!r}"
    if not isinstance(raw, dict):
        r.bad(at, "expected a mapping")
        return None
    for key in raw:
        if key in _SUPPORTED or key in _NO_EFFECT or str(key).startswith("x-"):
            continue
        r.bad(f"{at}: {key}", _REFUSED.get(str(key), "not supported by the local sandbox"))
    mode = raw.get("network_mode")
    if mode is not None and mode not in ("bridge", "default"):
        why = "the host's network" if mode == "host" else f"{mode!r}"
        r.bad(f"{at}: network_mode", f"{why} is not supported (services share the rollout's)")
    cap_add = raw.get("cap_add") or []
    if not isinstance(cap_add, list):
        r.bad(f"{at}: cap_add", "expected a list")
    else:
        beyond = [
            str(c)
            for c in cap_add
            if str(c).upper().removeprefix("CAP_").lower() not in DOCKER_CAPS
        ]
        if beyond:
            r.bad(
                f"{at}: cap_add",
                f"{', '.join(beyond)} would need root on the host (a service keeps Docker's "
                "default capabilities in its own user namespace only)",
            )
    restart = str(raw.get("restart", "no"))
    if not _RESTART.fullmatch(restart):
        r.bad(f"{at}: restart", "expected no, always, on-failure[:N] or unless-stopped")
    build = r.build(f"{at}: build", raw["build"]) if "build" in raw else None
    image = r.text(f"{at}: image", raw.get("image"))
    health, disabled = r.healthcheck(f"{at}: healthcheck", raw.get("healthcheck"))
    return Service(
        name=name,
        image=image,
        build=build,
        command=r.words(f"{at}: command", raw.get("command")),
        entrypoint=r.words(f"{at}: entrypoint", raw.get("entrypoint")),
        environment=r.environment(f"{at}: environment", raw.get("environment")),
        working_dir=r.text(f"{at}: working_dir", raw.get("working_dir")),
        user=r.text(f"{at}: user", raw.get("user")),
        hostname=r.text(f"{at}: hostname", raw.get("hostname")),
        volumes=(
            *r.volumes(f"{at}: volumes", raw.get("volumes"), volumes),
            *r.tmpfs(f"{at}: tmpfs", raw.get("tmpfs")),
        ),
        depends_on=tuple(r.depends_on(f"{at}: depends_on", raw.get("depends_on"))),
        healthcheck=health,
        healthcheck_disabled=disabled,
        restart=restart,
        aliases=(
            *r.networks(f"{at}: networks", raw.get("networks"), networks),
            *_container_name(r, at, raw.get("container_name")),
        ),
        ports=tuple(r.ports(f"{at}: ports", raw.get("ports"))),
    )


def _container_name(r: FieldReader, at: str, value: object) -> tuple[str, ...]:
    """A ``container_name`` is one more name of the service (as the docker sandbox keeps
    it: an alias on the rollout's network, the container named per rollout)."""
    name = r.text(f"{at}: container_name", value)
    return () if name is None else (name,)


def _top_level(r: FieldReader, data: dict[str, Any]) -> tuple[dict[str, object], dict[str, object]]:
    for key in data:
        if key not in _TOP_LEVEL and not str(key).startswith("x-"):
            r.bad(f"top-level {key}", "not supported by the local sandbox")
    volumes = data.get("volumes") or {}
    networks = data.get("networks") or {}
    if not isinstance(volumes, dict):
        r.bad("top-level volumes", "expected a mapping")
        volumes = {}
    if not isinstance(networks, dict):
        r.bad("top-level networks", "expected a mapping")
        networks = {}
    for name, spec in volumes.items():
        for key in spec or {}:
            if key != "name" and not str(key).startswith("x-"):
                r.bad(f"volume {name!r}: {key}", "not supported (a volume lives in the rollout)")
    for name, spec in networks.items():
        for key in spec or {}:
            if key not in ("name", "internal") and not str(key).startswith("x-"):
                r.bad(f"network {name!r}: {key}", "not supported (one private network per rollout)")
    if len(networks) > 1:
        r.bad(
            "top-level networks",
            "several networks are not supported (every service of a rollout shares one)",
        )
    return dict(volumes), dict(networks)


def load_compose(
    path: str | os.PathLike[str],
    *,
    env: Mapping[str, str] | None = None,
    task_dir: str | os.PathLike[str] | None = None,
    main_service: str = "main",
) -> ComposeFile:
    """Read a compose file; raise :class:`ComposeError` listing everything it cannot run.

    ``env`` is what ``${VAR}`` takes its values from (the task's environment,
    as Harbor interpolates). Bind mounts and build contexts must stay inside
    ``task_dir`` (default: the folder above the compose file's, a Harbor
    task's folder). The ``main`` service may have neither ``image`` nor
    ``build`` (the task's own image is used); every other service needs one.
    """
    name = os.fspath(path)
    base = Path(name).resolve().parent
    root = Path(task_dir).resolve() if task_dir is not None else base.parent
    sources = read_compose_sources(name, task_dir=root)
    if sources.problems:
        why = "the local sandbox refuses this compose file (it would reach outside the task)"
        raise ComposeError(name, sources.problems, why)
    if sources.unreadable:
        raise ComposeError(name, sources.unreadable)
    top = next(iter(sources.documents))
    if not isinstance(sources.documents[top], dict):
        raise ComposeError(name, ["expected a mapping with a 'services' mapping"])
    problems: list[str] = []
    # compose fills each file's variables, then merges
    documents = {
        file: interpolate_all(doc, env or {}, problems, "file" if file == top else str(file))
        for file, doc in sources.documents.items()
    }
    data, merging = merge_sources(top, attrs.evolve(sources, documents=documents))
    problems += merging
    if not isinstance(data.get("services"), dict):
        raise ComposeError(name, ["expected a mapping with a 'services' mapping"])
    r = FieldReader(name, root, base, problems)
    volumes, networks = _top_level(r, data)
    services: dict[str, Service] = {}
    for sname, raw in data["services"].items():
        svc = _service(r, str(sname), raw, volumes, networks)
        if svc is None:
            continue
        if svc.image is None and svc.build is None and svc.name != main_service:
            r.bad(f"service {svc.name!r}", "has neither image nor build")
        services[svc.name] = svc
    for svc in services.values():
        for dep in svc.depends_on:
            if dep.service not in data["services"]:
                r.bad(f"service {svc.name!r}: depends_on", f"no service {dep.service!r}")
    if not problems:
        _check_cycles(services, problems)
    if problems:
        raise ComposeError(name, problems)
    return ComposeFile(path=name, services=services, volumes=tuple(volumes))


def _check_cycles(services: Mapping[str, Service], problems: list[str]) -> None:
    state: dict[str, int] = {}

    def visit(name: str, trail: list[str]) -> None:
        if state.get(name) == 2:
            return
        if state.get(name) == 1:
            loop = [*trail[trail.index(name) :], name]
            problems.append(f"depends_on has a cycle: {' -> '.join(loop)}")
            return
        state[name] = 1
        for dep in services[name].depends_on:
            visit(dep.service, [*trail, name])
        state[name] = 2

    for name in sorted(services):
        if not problems:
            visit(name, [])
