"""How Podman and Buildah can run a Dockerfile's ``RUN`` steps on this host.

A build's ``RUN`` steps run in containers made by the tool's OCI runtime, and
some hosts refuse the default one: crun refuses a kernel's hybrid cgroup
layout (cgroup v1 controllers plus a v2 mount that has controllers too:
"cgroups in hybrid mode not supported, drop all controllers from
cgroupv2"), where runc works. Debian's apt gives Podman and Buildah crun
whenever runc is not installed yet, so such a host can have both runtimes
and a default that fails.

Nothing is checked while builds succeed. When a build fails, whether the
tool can run a build step here at all is found out once per process (and
per containers configuration in the environment): a trial build of an empty
image whose one ``RUN`` step runs the host's ``true`` (the host's ``/usr``
and library directories mounted read-only), first with the tool's defaults,
then with ``--runtime runc`` and ``--runtime crun`` (the ones that are not
the default), then with ``--isolation chroot`` (no OCI runtime). The first
that works is used from then on (:func:`known_build_runtime`): the failed
build is made again with it, and later builds start with it. When the
defaults work the failure was the Dockerfile's own; when nothing works the
error says what each trial said and what to change.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import threading
import uuid
from pathlib import Path

import attrs

__all__ = ["PROBE_LABEL", "BuildRuntime", "build_runtime", "known_build_runtime"]

#: Environment variables that change which runtime (or isolation) a tool uses.
_CONFIG_ENV = (
    "CONTAINERS_CONF",
    "CONTAINERS_CONF_OVERRIDE",
    "BUILDAH_RUNTIME",
    "BUILDAH_ISOLATION",
)
#: Host directories a trial step needs to run the host's ``true``.
_HOST_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
#: The longest a trial build may take (a runtime that hangs is one that does not work).
_TRIAL_TIMEOUT_SEC = 120.0
#: Label on trial images (removed at once; one left by a killed process is recognisable).
PROBE_LABEL = "org.agentkit.runtime-probe"


@attrs.frozen(kw_only=True)
class BuildRuntime:
    """How a tool runs build steps here: the flags its builds get, or why none works."""

    #: Extra arguments for the tool's build command (empty: its defaults work).
    flags: tuple[str, ...]
    #: True when some way of running build steps works.
    works: bool
    #: What each trial said, in order, for messages: ``with its default runtime (crun): ...``.
    trials: tuple[str, ...]

    def switched(self, tool: str) -> str:
        """One line for the build log: why the build is made again, and how."""
        return (
            f"{tool} cannot run build steps here {'; '.join(self.trials[:-1])}; "
            f"building with {' '.join(self.flags)} instead"
        )

    def failure(self, tool: str) -> str:
        """Why no build step can run here, and what to change (when ``works`` is false)."""
        hint = ""
        if any("hybrid" in t for t in self.trials):
            hint = (
                "; crun refuses this kernel's hybrid cgroups: runc works with them, or boot "
                "with cgroup v2 only (systemd.unified_cgroup_hierarchy=1)"
            )
        install = ""
        if shutil.which("runc") is None:
            install = "install runc (apt-get install runc), which agentkit then uses, or "
        return (
            f"{tool} cannot run a build step on this host: {'; '.join(self.trials)}{hint}; "
            f"{install}make {tool}'s runtime work here (the [engine] runtime of "
            "containers.conf)"
        )


_lock = threading.Lock()
_known: dict[tuple[str, ...], BuildRuntime] = {}


def _key(tool: str, binary: str) -> tuple[str, ...]:
    return (tool, binary, *(os.environ.get(name, "") for name in _CONFIG_ENV))


def known_build_runtime(tool: str, binary: str) -> BuildRuntime | None:
    """What :func:`build_runtime` found for ``tool`` in this process, if it was asked."""
    return _known.get(_key(tool, binary))


def build_runtime(tool: str, binary: str) -> BuildRuntime:
    """How ``tool`` (``podman`` or ``buildah``, at ``binary``) can run build steps here.

    Found by trial builds once per process and containers configuration;
    callers at the same time wait for one answer.
    """
    key = _key(tool, binary)
    with _lock:
        found = _known.get(key)
        if found is None:
            found = _known[key] = _probe(tool, binary)
        return found


def _default_runtime(tool: str, binary: str) -> str:
    """The name of the tool's default OCI runtime ("" when it does not say)."""
    field = "{{.Host.OCIRuntime.Name}}" if tool == "podman" else "{{.host.OCIRuntime}}"
    done = _run_bounded([binary, "info", "--format", field])
    return done.stdout.strip() if done is not None and done.returncode == 0 else ""


def _run_bounded(argv: list[str]) -> subprocess.CompletedProcess[str] | None:
    """Run ``argv`` for its text output, for at most the trial timeout (None: it did not
    finish in time)."""
    try:
        return subprocess.run(
            argv,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=_TRIAL_TIMEOUT_SEC,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return None


def _reason(output: str) -> str:
    """The line of a failed trial build that says why (the runtime's own words first)."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    for line in lines:
        if "error running container" in line or "creating container" in line:
            return line[:300]
    return (lines[-1] if lines else "no output")[:300]


def _trial(tool: str, binary: str, flags: tuple[str, ...]) -> str | None:
    """None when a build step runs with ``flags``, else why not."""
    true = shutil.which("true")
    if true is None:
        return "no `true` program on this host to try a build step with"
    volumes: list[str] = []
    for path in _HOST_DIRS:
        if os.path.isdir(path):
            volumes += ["-v", f"{path}:{path}:ro"]
    tag = f"localhost/agentkit-runtime-probe:{uuid.uuid4().hex[:12]}"
    with tempfile.TemporaryDirectory(prefix="agentkit-runtime-probe-") as context:
        (Path(context) / "Containerfile").write_text(f'FROM scratch\nRUN ["{true}"]\n')
        argv = [
            binary,
            "build" if tool == "podman" else "bud",
            "--no-cache",
            "--network",
            "none",
            "--label",
            f"{PROBE_LABEL}=1",
            "-t",
            tag,
            "-f",
            str(Path(context) / "Containerfile"),
            *volumes,
            *flags,
            context,
        ]
        try:
            done = _run_bounded(argv)
        finally:
            subprocess.run(
                [binary, "rmi", "-f", tag],
                stdin=subprocess.DEVNULL,
                capture_output=True,
                check=False,
            )
    if done is None:
        return f"a build step did not finish within {_TRIAL_TIMEOUT_SEC:g} s"
    return None if done.returncode == 0 else _reason(done.stderr + done.stdout)


def _probe(tool: str, binary: str) -> BuildRuntime:
    default = _default_runtime(tool, binary)
    trials: list[str] = []
    failed = _trial(tool, binary, ())
    label = f"with its default runtime ({default})" if default else "with its defaults"
    if failed is None:
        return BuildRuntime(flags=(), works=True, trials=(f"{label}: works",))
    trials.append(f"{label}: {failed}")
    ways = [("--runtime", name) for name in ("runc", "crun") if name != default]
    ways.append(("--isolation", "chroot"))
    for flags in ways:
        failed = _trial(tool, binary, flags)
        if failed is None:
            return BuildRuntime(
                flags=flags, works=True, trials=(*trials, f"with {' '.join(flags)}: works")
            )
        trials.append(f"with {' '.join(flags)}: {failed}")
    return BuildRuntime(flags=(), works=False, trials=tuple(trials))
