"""Getting a task's image and its root file system through Docker, Podman or Buildah.

The local sandbox needs a container tool only to obtain an image (build its
Dockerfile or pull it, through :func:`agentkit.images.resolve_image`: built
once, tagged by the digest of its context) and to export its root file system
once; rollouts then run under bubblewrap with no engine involved. Whichever
of Docker (a reachable daemon), Podman or Buildah is installed is used, in
that order, or the one named by the ``image_tool`` option; a Docker passed
over (its daemon not answering, aiodocker missing) is named, with why, in the
errors of images the next tool cannot make. Podman's and Buildah's builds run
their steps with a runtime that works on this host
(:mod:`agentkit.images._buildruntime`).

**Dying with the orchestrator.** A tool's command must not outlive the process
that started it: ``podman export`` holds its own output pipe's read end too, so
when the orchestrator is killed mid-export it never sees a broken pipe, blocks
on the full pipe for ever and keeps its container locked. Every command a tool
runs is therefore started through ``setpriv --pdeathsig KILL`` (util-linux;
without it, the command as it is): the kernel kills it when the thread that
started it ends, and each such thread waits for its command. The caller's
``env`` marks the commands too (the local sandbox: its owner, as its
sandboxes' processes are marked), so that one started in the instant before
the orchestrator died is reaped by the next start (``sandbox/_reaper.py``).
"""

from __future__ import annotations

import asyncio
import functools
import importlib.util
import json
import os
import re
import shlex
import shutil
import subprocess
import tarfile
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, ClassVar

from agentkit._errors import SandboxError, SandboxUnavailableError, missing_extra
from agentkit._sandbox import TaskImage
from agentkit.images import BuildContext, DockerBackend, ImageBackend, ImageError, resolve_image
from agentkit.images._buildruntime import build_runtime, known_build_runtime
from agentkit.images._engine import pulled_id
from agentkit.images._imageroot import ImageConfig, ImageRoot, extract_root, image_root

__all__ = [
    "BUILDAH_EXPORT_PREFIX",
    "INSTALL_TOOL",
    "TOOLS",
    "CliBackend",
    "ImageTool",
    "buildah_export_name",
    "buildah_export_owner",
    "describe_image",
    "dying_with_us",
    "find_image_tool",
    "obtain_image",
    "task_image_root",
]

#: What to install so the local sandbox can run tasks in their images.
INSTALL_TOOL = (
    "install one of Docker (`apt-get install docker.io`, its daemon running, and "
    "`pip install 'agentkit[docker]'`), Podman (`apt-get install podman`) or Buildah "
    "(`apt-get install buildah`)"
)


def describe_image(image: TaskImage) -> str:
    """How a task's image is given, for messages."""
    if image.dockerfile:
        return f"its Dockerfile {image.dockerfile}"
    if image.image:
        return f"image {image.image}"
    return f"compose file {image.compose_file}"


@functools.cache
def _setpriv() -> str | None:
    return shutil.which("setpriv")


def dying_with_us(argv: Sequence[str]) -> list[str]:
    """``argv`` started so that the kernel kills it (``SIGKILL``) when the thread that
    starts it ends (``setpriv --pdeathsig KILL``; ``argv`` as it is without setpriv).
    The starting thread must wait for the command, as ``subprocess.run`` does."""
    setpriv = _setpriv()
    return [setpriv, "--pdeathsig", "KILL", "--", *argv] if setpriv else list(argv)


def _run(
    argv: list[str], *, timeout: float | None = None, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        dying_with_us(argv),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env=None if not env else {**os.environ, **env},
    )


def _tail(text: str, limit: int = 1500) -> str:
    text = text.strip()
    return text if len(text) <= limit else "[...]" + text[-limit:]


def _image_id(value: str) -> str:
    return value if ":" in value else f"sha256:{value}"


class ImageTool:
    """A container tool: an image backend (build, pull), inspect and export."""

    name: ClassVar[str] = ""
    #: The words that build an image (``build``; Podman and Buildah ask for Docker's image
    #: format, as OCI's has no HEALTHCHECK).
    build_words: ClassVar[tuple[str, ...]] = ("build",)

    def __init__(
        self,
        binary: str,
        passed_over: tuple[str, ...] = (),
        labels: Mapping[str, str] | None = None,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.binary = binary
        #: The tools tried before this one and why each was passed over
        #: (``docker: ...``), for the errors of images this tool cannot make.
        self.passed_over = passed_over
        #: The labels of a container made to export an image (whose owner they name,
        #: so that one an orchestrator killed mid-export leaves is found and removed).
        self.labels = dict(labels or {})
        #: What the tool's commands' environment has besides this process's (their
        #: owner, so that one an orchestrator killed leaves is reaped).
        self.env = dict(env or {})

    def run(self, argv: list[str]) -> subprocess.CompletedProcess[str]:
        """Run one of the tool's commands to its end (its output captured as text)."""
        return _run(argv, env=self.env)

    def environ(self) -> dict[str, str] | None:
        """The environment of the tool's commands (None: this process's)."""
        return {**os.environ, **self.env} if self.env else None

    def backend(self) -> ImageBackend:
        """What :func:`agentkit.images.resolve_image` builds and pulls with."""
        return CliBackend(self)

    def inspect(self, reference: str) -> tuple[str, ImageConfig] | None:
        """(image id, config) of a local image, or None when it is not there."""
        raise NotImplementedError

    def pull_argv(self, reference: str) -> list[str]:
        """The command that pulls ``reference``."""
        return [self.binary, "pull", reference]

    def build_argv(
        self,
        dockerfile: str,
        context: str,
        tag: str,
        labels: dict[str, str],
        extra: tuple[str, ...] = (),
    ) -> list[str]:
        """The command that builds ``dockerfile`` in ``context`` as ``tag`` (``extra``
        arguments before the context: how build steps run, see ``_buildruntime``)."""
        argv = [self.binary, *self.build_words, "-t", tag, "-f", dockerfile]
        for k, v in labels.items():
            argv += ["--label", f"{k}={v}"]
        return [*argv, *extra, context]

    def export(self, reference: str, dest: Path, id_base: int | None) -> None:
        """Write the root file system of ``reference`` into ``dest`` (a new directory)."""
        raise NotImplementedError

    def _stream_into(self, argv: list[str], dest: Path, id_base: int | None) -> None:
        proc = subprocess.Popen(
            dying_with_us(argv),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=self.environ(),
        )
        assert proc.stdout is not None and proc.stderr is not None
        unreadable: tarfile.TarError | None = None
        try:
            extract_root(proc.stdout, dest, id_base)
        except tarfile.TarError as exc:
            # the tool's own failure (an empty or cut stream) says more than the archive's
            unreadable = exc
        except BaseException:
            proc.kill()
            raise
        finally:
            proc.stdout.close()
            err = proc.stderr.read().decode(errors="replace")
            proc.stderr.close()
            proc.wait()
        if proc.returncode != 0:
            raise SandboxError(f"exporting the image with {self.name} failed: {_tail(err)}")
        if unreadable is not None:
            raise SandboxError(
                f"exporting the image with {self.name} gave no readable archive "
                f"({unreadable}){': ' + _tail(err) if err.strip() else ''}"
            )


class CliBackend:
    """An :class:`agentkit.images.ImageBackend` over a tool's command line."""

    def __init__(self, tool: ImageTool) -> None:
        self.tool = tool
        self.key = f"{tool.name}:{tool.binary}"

    async def image_id(self, reference: str) -> str | None:
        """The id of a local image, or None when it is not there."""
        found = await asyncio.to_thread(self.tool.inspect, reference)
        return None if found is None else found[0]

    async def _logged(self, argv: list[str], log: IO[str], what: str, kind: str) -> None:
        def run() -> int:
            log.flush()
            done = subprocess.run(
                dying_with_us(argv),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                check=False,
                env=self.tool.environ(),
            )
            return done.returncode

        if await asyncio.to_thread(run) != 0:
            raise ImageError(f"{what} failed ({self.tool.name})", error_kind=kind)

    async def pull(self, reference: str, log: IO[str]) -> str:
        """Pull ``reference`` (output to ``log``); its id."""
        await self._logged(
            self.tool.pull_argv(reference), log, f"pulling {reference}", "image_pull"
        )
        return await pulled_id(self, reference)

    async def build(
        self, context: BuildContext, *, tag: str, labels: dict[str, str], log: IO[str]
    ) -> str:
        """Build ``context`` as ``tag`` (output to ``log``); its id.

        When the build fails, whether the tool's build steps can run here at all
        is found out (once per process, :mod:`agentkit.images._buildruntime`):
        with another runtime (or chroot isolation) that works, the build is made
        again with it, as every later one is; when none works, the error says so.
        """
        tool = self.tool

        async def run(flags: tuple[str, ...]) -> None:
            argv = tool.build_argv(
                str(context.dockerfile), str(context.context), tag, labels, flags
            )
            await self._logged(argv, log, f"building {context.dockerfile}", "image_build")

        runtime = known_build_runtime(tool.name, tool.binary)
        try:
            await run(runtime.flags if runtime is not None else ())
        except ImageError as failed:
            if runtime is None:
                runtime = await asyncio.to_thread(build_runtime, tool.name, tool.binary)
                if runtime.works and runtime.flags:
                    log.write(f"\n# agentkit: {runtime.switched(tool.name)}\n")
                    await run(runtime.flags)
                    return await self._built(tag)
            if not runtime.works:
                raise ImageError(f"{failed}: {runtime.failure(tool.name)}") from None
            raise
        return await self._built(tag)

    async def _built(self, tag: str) -> str:
        found = await self.image_id(tag)
        if found is None:
            raise ImageError(f"the build reported success but left no image {tag}")
        return found


class DockerTool(ImageTool):
    """Docker: images built and pulled through agentkit's image layer, exported by its CLI."""

    name: ClassVar[str] = "docker"

    def backend(self) -> ImageBackend:
        return DockerBackend()

    def inspect(self, reference: str) -> tuple[str, ImageConfig] | None:
        done = self.run([self.binary, "image", "inspect", "--format", "{{json .}}", reference])
        if done.returncode != 0:
            err = (done.stderr + done.stdout).lower()
            if "no such image" in err or "not known" in err or "not found" in err:
                return None
            raise SandboxError(f"{self.name} image inspect {reference}: {_tail(done.stderr)}")
        data = json.loads(done.stdout)
        if isinstance(data, list):
            data = data[0]
        config = dict(data.get("Config") or {})
        if "Healthcheck" not in config and data.get("Healthcheck"):
            config["Healthcheck"] = data["Healthcheck"]  # Podman keeps it beside Config
        return _image_id(str(data["Id"])), ImageConfig.from_engine(config)

    def export(self, reference: str, dest: Path, id_base: int | None) -> None:
        # Labelled as the caller says (the local sandbox: as the docker sandbox's
        # containers, so that `agentkit sandbox prune` removes one left behind).
        argv = [self.binary, "create"]
        for key, value in self.labels.items():
            argv += ["--label", f"{key}={value}"]
        created = self.run([*argv, reference, "/agentkit"])
        if created.returncode != 0:
            raise SandboxError(
                f"{self.name} could not create a container of {reference} to export it: "
                f"{_tail(created.stderr)}"
            )
        cid = created.stdout.strip().splitlines()[-1]
        try:
            self._stream_into([self.binary, "export", cid], dest, id_base)
        finally:
            self.run([self.binary, "rm", "-f", cid])


class PodmanTool(DockerTool):
    """Podman's command line (rootless or not): Docker's commands, no daemon."""

    name: ClassVar[str] = "podman"
    # Docker's image format: OCI's (Podman's default) has no HEALTHCHECK.
    build_words: ClassVar[tuple[str, ...]] = ("build", "--format", "docker")

    def backend(self) -> ImageBackend:
        return CliBackend(self)


#: Buildah's working containers carry no labels: the one an image is exported through is
#: named after its owner instead (the caller's ``org.agentkit.owner`` label,
#: ``host:pid:start``), ``agentkit-export_<host>_<pid>_<start>_<random>``, for
#: ``agentkit sandbox prune`` to find one an orchestrator killed mid-export left.
BUILDAH_EXPORT_PREFIX = "agentkit-export_"


def buildah_export_name(owner: str) -> str:
    """The name of a Buildah working container ``owner`` exports an image through."""
    host, _, rest = owner.partition(":")
    pid, _, start = rest.partition(":")
    host = re.sub(r"[^A-Za-z0-9.-]", "-", host) or "-"  # buildah's names: [A-Za-z0-9_.-]
    start = start if start.isdigit() else ""  # '?' (not known): the pid alone judges
    return f"{BUILDAH_EXPORT_PREFIX}{host}_{pid}_{start}_{uuid.uuid4().hex[:12]}"


def buildah_export_owner(name: str) -> str | None:
    """The owner (``host:pid:start``) a working container's name gives, None when it is
    not one :func:`buildah_export_name` made."""
    if not name.startswith(BUILDAH_EXPORT_PREFIX):
        return None
    parts = name[len(BUILDAH_EXPORT_PREFIX) :].rsplit("_", 3)
    return ":".join(parts[:3]) if len(parts) == 4 else None


_BUILDAH_EXPORT = (
    'd=$(buildah mount "$1") || exit 1; tar -C "$d" --numeric-owner -cf - .; rc=$?; '
    'buildah umount "$1" >/dev/null; exit $rc'
)


class BuildahTool(ImageTool):
    """Buildah's command line (its root file system is read inside ``buildah unshare``)."""

    name: ClassVar[str] = "buildah"
    # Docker's image format: OCI's has no HEALTHCHECK.
    build_words: ClassVar[tuple[str, ...]] = ("bud", "--format", "docker")

    def inspect(self, reference: str) -> tuple[str, ImageConfig] | None:
        done = self.run([self.binary, "inspect", "--type", "image", reference])
        if done.returncode != 0:
            return None
        data = json.loads(done.stdout)
        # The Docker-format config keeps HEALTHCHECK (builds here use that format).
        config = (data.get("Docker") or {}).get("config") or {}
        config = config or (data.get("OCIv1") or {}).get("config") or {}
        return _image_id(str(data.get("FromImageID") or "")), ImageConfig.from_engine(config)

    def export(self, reference: str, dest: Path, id_base: int | None) -> None:
        owner = self.labels.get("org.agentkit.owner")  # sandbox._reaper.OWNER_LABEL
        named = ["--name", buildah_export_name(owner)] if owner else []
        created = self.run([self.binary, "from", "--pull-never", *named, reference])
        if created.returncode != 0:
            raise SandboxError(f"buildah from {reference} failed: {_tail(created.stderr)}")
        cid = created.stdout.strip().splitlines()[-1]
        # Root mounts the container directly; anyone else needs buildah's user namespace.
        # (`buildah unshare` as root fails on some kernels: memfd_create: invalid argument.)
        shell = ["sh", "-c", _BUILDAH_EXPORT.replace("buildah", shlex.quote(self.binary))]
        argv = shell if os.geteuid() == 0 else [self.binary, "unshare", *shell]
        try:
            self._stream_into([*argv, "sh", cid], dest, id_base)
        finally:
            self.run([self.binary, "rm", cid])


TOOLS: dict[str, type[ImageTool]] = {
    "docker": DockerTool,
    "podman": PodmanTool,
    "buildah": BuildahTool,
}


@functools.cache
def _docker_unusable(binary: str) -> str | None:
    """None when Docker can be used (its daemon answers, aiodocker is there), else why not."""
    try:
        done = _run([binary, "version", "--format", "{{.Server.Version}}"], timeout=20)
    except subprocess.TimeoutExpired:
        return "its daemon did not answer within 20 s"
    if done.returncode != 0 or not done.stdout.strip():
        return f"its daemon is not reachable ({_tail(done.stderr, 300) or 'no answer'})"
    if importlib.util.find_spec("aiodocker") is None:
        return missing_extra("talking to it", "aiodocker", "docker")
    return None


def find_image_tool(
    choice: str = "auto",
    *,
    labels: Mapping[str, str] | None = None,
    env: Mapping[str, str] | None = None,
) -> ImageTool:
    """The tool to obtain images with: ``choice`` by name, or the first one usable
    (``labels``: those of the containers it exports images through; ``env``: what its
    commands' environment has besides this process's)."""
    if choice != "auto" and choice not in TOOLS:
        raise SandboxError(f"option image_tool={choice!r}: expected auto, {', '.join(TOOLS)}")
    names = list(TOOLS) if choice == "auto" else [choice]
    notes = []
    passed_over = []
    for name in names:
        binary = shutil.which(name)
        if binary is None:
            if choice != "auto":
                notes.append(f"{name} is not installed")
            continue
        if name == "docker" and (why := _docker_unusable(binary)) is not None:
            notes.append(f"docker is installed but {why}")
            passed_over.append(f"docker: installed, but {why}")
            continue
        return TOOLS[name](binary, tuple(passed_over), labels, env)
    note = f" ({'; '.join(notes)})" if notes else ""
    raise SandboxUnavailableError(
        f"no container tool can produce the task's image{note}: {INSTALL_TOOL}; "
        "or run the task on the host's userland on purpose with -S image=host"
    )


_configs: dict[tuple[str, str], ImageConfig] = {}


async def obtain_image(
    tool: ImageTool, image: TaskImage, log_dir: Path | None = None
) -> tuple[str, str, ImageConfig]:
    """(reference, image id, config) of ``image``: built or pulled by ``tool`` when needed,
    through :func:`agentkit.images.resolve_image` (once per process, tagged by digest)."""
    try:
        ref = await resolve_image(image, log_dir=log_dir, backend=tool.backend())
    except ImageError as exc:
        if not tool.passed_over:
            raise
        # Another tool might have had the image (Docker's store is not Podman's):
        # say which were tried before this one and why each was passed over.
        raise ImageError(
            f"{exc}\n(image tools tried, in order: {'; '.join(tool.passed_over)}; "
            f"then {tool.name}, which failed as above)",
            error_kind=exc.error_kind,
            log_path=exc.log_path,
        ) from None
    key = (tool.name, ref.image_id)
    config = _configs.get(key)
    if config is None:
        found = await asyncio.to_thread(tool.inspect, ref.reference)
        if found is None:
            raise SandboxError(f"{tool.name} has no image {ref.reference} after making it")
        config = _configs[key] = found[1]
    return ref.reference, ref.image_id, config


async def task_image_root(
    image: TaskImage,
    *,
    tool: ImageTool,
    cache_dir: Path | None,
    id_base: int | None,
    log_dir: Path | None = None,
) -> ImageRoot:
    """The exported root of a task's image: obtained and exported once, then cached."""
    reference, image_id, config = await obtain_image(tool, image, log_dir)

    async def export(ref: str, dest: Path, base: int | None) -> None:
        await asyncio.to_thread(tool.export, ref, dest, base)

    return await image_root(
        reference=reference,
        image_id=image_id,
        config=config,
        tool=tool.name,
        export=export,
        cache_dir=cache_dir,
        id_base=id_base,
    )
