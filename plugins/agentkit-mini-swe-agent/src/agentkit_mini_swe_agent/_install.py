"""Finding a mini-swe-agent installation, and making one in a project-local directory.

mini-swe-agent is a Python program. agentkit runs it from a *virtual
environment* that has ``mini-swe-agent`` (and ``mcp``, which litellm imports
as soon as tools are used) installed; that environment is found from, in
order, the ``binary`` option, ``$AGENTKIT_MINI_SWE_AGENT``, ``mini`` on PATH,
or ``.cache/mini-swe-agent/venv`` in the working directory or a parent (what
``python -m agentkit_mini_swe_agent install`` creates).
"""

from __future__ import annotations

import functools
import json
import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

import attrs

from agentkit import HarnessError

__all__ = [
    "BINARY_ENV",
    "LOCAL_INSTALL",
    "MINI_SWE_AGENT_VERSION",
    "TESTED_WITH",
    "MiniSweAgentInstall",
    "find_mini_swe_agent",
    "install_mini_swe_agent",
]

#: The mini-swe-agent release the tests pin.
MINI_SWE_AGENT_VERSION = "2.4.6"
#: What the tests install beside it: litellm as tested, and mcp (litellm imports
#: it whenever tools are passed; without it mini retries the import error).
TESTED_WITH = ("litellm==1.106.2", "mcp==2.3.0")
#: Environment variable naming the installation to use (the noxfile sets it).
BINARY_ENV = "AGENTKIT_MINI_SWE_AGENT"
#: Where ``python -m agentkit_mini_swe_agent install`` puts the virtual environment,
#: relative to the project directory; looked for in the working directory and its parents.
LOCAL_INSTALL = ".cache/mini-swe-agent/venv"
_INSTALL = (
    "install it with `python -m agentkit_mini_swe_agent install` (a virtual environment in "
    f"./{LOCAL_INSTALL} with mini-swe-agent=={MINI_SWE_AGENT_VERSION} and mcp), or "
    f"`pip install mini-swe-agent=={MINI_SWE_AGENT_VERSION} mcp` in a virtual environment "
    f"and put its `mini` on PATH, set {BINARY_ENV}=/path/to/venv/bin/mini, or pass "
    "MiniSweAgent(binary=...)"
)
#: Host directories that must not be shown inside a sandbox at the same path
#: (they would hide the task image's own files).
_SYSTEM_DIRS = ("/usr", "/lib", "/lib32", "/lib64", "/bin", "/sbin", "/etc")

_PROBE = r"""
import importlib.util, json, os, sys, sysconfig
from importlib import metadata

def version(name):
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None

spec = importlib.util.find_spec("minisweagent")
print(json.dumps({
    "python_version": "%d.%d.%d" % sys.version_info[:3],
    "implementation": sys.implementation.name,
    "executable": sys.executable,
    "base_executable": os.path.realpath(getattr(sys, "_base_executable", sys.executable)),
    "prefix": sys.prefix,
    "base_prefix": sys.base_prefix,
    "stdlib": sysconfig.get_path("stdlib"),
    "dynload": next((p for p in sys.path if p.endswith("lib-dynload")), None),
    "site_dirs": [p for p in sys.path
                  if p.endswith(("site-packages", "dist-packages")) and os.path.isdir(p)],
    "mini_swe_agent": version("mini-swe-agent"),
    "package": os.path.dirname(spec.origin) if spec and spec.origin else None,
    "litellm": version("litellm"),
    "mcp": version("mcp"),
}))
"""


@attrs.frozen
class MiniSweAgentInstall:
    """A Python environment with mini-swe-agent installed.

    ``python`` is the environment's interpreter; ``base_executable`` the real
    interpreter behind it (copied into the sandbox runtime), ``stdlib`` its
    standard library, ``site_dirs`` the directories its packages live in
    (shown read-only inside sandboxes, at the same paths).
    """

    python: Path
    version: str
    python_version: str
    base_executable: Path
    base_prefix: Path
    stdlib: Path
    dynload: Path | None
    site_dirs: tuple[str, ...]
    litellm_version: str | None
    mcp_version: str | None
    found_via: str


def _python_of_script(script: Path) -> Path | None:
    """The interpreter a console script (pip's or uv's ``mini``) runs with, if it is Python."""
    try:
        with script.open("rb") as f:
            head = f.read(1024).decode("utf-8", "replace").splitlines()
    except OSError:
        return None
    if not head or not head[0].startswith("#!"):
        return None
    words = shlex.split(head[0][2:].strip()) if head[0][2:].strip() else []
    if words and Path(words[0]).name in ("sh", "bash") and len(head) > 1:
        # pip's form for long paths: #!/bin/sh  then  '''exec' "/path/python" "$0" "$@"
        second = head[1].strip()
        if second.startswith("'''exec'"):
            rest = shlex.split(second[len("'''exec'") :])
            return Path(rest[0]) if rest else None
        return None
    if words and Path(words[0]).name == "env" and len(words) > 1:
        found = shutil.which(words[1])
        return Path(found) if found else None
    if words and Path(words[0]).name.startswith("python"):
        return Path(words[0])
    return None


def _interpreter(found: Path, via: str) -> Path:
    """The Python interpreter of ``found``: a ``mini`` script, a venv directory, or a python."""
    if found.is_dir():
        python = found / "bin" / "python"
        if not python.exists():
            raise HarnessError(
                f"{found} ({via}) is not a virtual environment (no bin/python); {_INSTALL}"
            )
        return python
    if not found.is_file():
        raise HarnessError(f"mini-swe-agent {found} ({via}) does not exist; {_INSTALL}")
    if found.name.startswith("python"):
        return found
    interpreter = _python_of_script(found)
    if interpreter is None:
        raise HarnessError(
            f"{found} ({via}) is not mini-swe-agent's `mini` script (no Python "
            f"interpreter in its first line); {_INSTALL}"
        )
    return interpreter


@functools.lru_cache(maxsize=16)
def _probe(python: str, mtime_ns: int) -> dict[str, object]:
    try:
        proc = subprocess.run(
            [python, "-I", "-c", _PROBE],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise HarnessError(f"cannot run {python}: {exc}; {_INSTALL}") from None
    if proc.returncode != 0:
        detail = (proc.stderr or proc.stdout).strip()[-500:]
        raise HarnessError(f"{python} failed (exit {proc.returncode}): {detail}; {_INSTALL}")
    data = json.loads(proc.stdout.strip().splitlines()[-1])
    if not isinstance(data, dict):
        raise HarnessError(f"{python} answered something unexpected; {_INSTALL}")
    return data


def _candidates(binary: str | None, env: Mapping[str, str], cwd: Path) -> list[tuple[Path, str]]:
    if binary:
        if os.sep in binary:
            return [(Path(binary).expanduser(), "the binary option")]
        on_path = shutil.which(binary, path=env.get("PATH"))
        return [(Path(on_path), "the binary option")] if on_path else []
    from_env = env.get(BINARY_ENV)
    if from_env:
        return [(Path(from_env).expanduser(), f"${BINARY_ENV}")]
    found: list[tuple[Path, str]] = []
    on_path = shutil.which("mini", path=env.get("PATH"))
    if on_path and _python_of_script(Path(on_path)) is not None:
        found.append((Path(on_path), "PATH"))
    for folder in (cwd, *cwd.parents):
        candidate = folder / LOCAL_INSTALL
        if (candidate / "bin" / "python").exists():
            found.append((candidate, str(candidate)))
    return found


def find_mini_swe_agent(
    binary: str | None = None,
    *,
    env: Mapping[str, str] | None = None,
    cwd: str | Path | None = None,
) -> MiniSweAgentInstall:
    """Locate mini-swe-agent: ``binary``, else ``$AGENTKIT_MINI_SWE_AGENT``, else ``mini``
    on PATH, else ``.cache/mini-swe-agent/venv`` in ``cwd`` or a parent.

    ``binary`` (and the variable) may name the ``mini`` script, the virtual
    environment's directory or its ``python``. Raises
    :class:`~agentkit.HarnessError` saying how to install it when none works.
    """
    env = os.environ if env is None else env
    where = Path(cwd) if cwd is not None else Path.cwd()
    candidates = _candidates(binary, env, where.absolute())
    if not candidates:
        if binary:
            raise HarnessError(f"mini-swe-agent {binary!r} was not found; {_INSTALL}")
        raise HarnessError(f"mini-swe-agent was not found; {_INSTALL}")
    found, via = candidates[0]
    python = _interpreter(found, via)
    if not python.exists():
        raise HarnessError(f"{found} ({via}) runs {python}, which does not exist; {_INSTALL}")
    data = _probe(str(python), python.stat().st_mtime_ns)
    version = data.get("mini_swe_agent")
    if not isinstance(version, str):
        raise HarnessError(f"{found} ({via}): mini-swe-agent is not installed there; {_INSTALL}")
    if data.get("implementation") != "cpython":
        raise HarnessError(f"{found} ({via}): only CPython environments are supported")
    if not data.get("mcp"):
        raise HarnessError(
            f"{found} ({via}): the `mcp` package is missing beside mini-swe-agent (litellm "
            f"imports it whenever tools are used); install it there: {python} -m pip install mcp"
        )
    site_dirs = tuple(str(d) for d in data.get("site_dirs") or [])  # type: ignore[attr-defined]
    system = [
        d for d in site_dirs if d == "/" or d.startswith(tuple(s + "/" for s in _SYSTEM_DIRS))
    ]
    if system:
        raise HarnessError(
            f"{found} ({via}) is installed in system directories ({', '.join(system)}), which "
            "cannot be shown inside a task's sandbox without hiding the image's own files; "
            f"{_INSTALL}"
        )
    return MiniSweAgentInstall(
        python=python.absolute(),
        version=version,
        python_version=str(data["python_version"]),
        base_executable=Path(str(data["base_executable"])),
        base_prefix=Path(str(data["base_prefix"])),
        stdlib=Path(str(data["stdlib"])),
        dynload=Path(str(data["dynload"])) if data.get("dynload") else None,
        site_dirs=site_dirs,
        litellm_version=data.get("litellm") if isinstance(data.get("litellm"), str) else None,  # type: ignore[arg-type]
        mcp_version=data.get("mcp") if isinstance(data.get("mcp"), str) else None,  # type: ignore[arg-type]
        found_via=via,
    )


def install_mini_swe_agent(
    target: str | Path = LOCAL_INSTALL,
    *,
    version: str = MINI_SWE_AGENT_VERSION,
    extra: Sequence[str] | None = None,
    python: str | None = None,
) -> Path:
    """Create a virtual environment at ``target`` with mini-swe-agent ``version`` and mcp.

    Uses ``uv`` when it is on PATH (much faster), else the environment's pip.
    ``extra`` are more requirements (default: :data:`TESTED_WITH` for the
    pinned version, ``mcp`` for any other). Returns the ``mini`` script's path.
    An existing environment with that version is kept as it is; one with
    another version is made again; a directory that is not a virtual
    environment is refused.
    """
    target = Path(target).absolute()
    mini = target / "bin" / "mini"
    if mini.exists():
        try:
            if find_mini_swe_agent(str(mini)).version == version:
                return mini
        except HarnessError:
            pass
    requirements = [f"mini-swe-agent=={version}"]
    if extra is not None:
        requirements += list(extra)
    else:
        requirements += list(TESTED_WITH) if version == MINI_SWE_AGENT_VERSION else ["mcp"]
    interpreter = python or sys.executable
    base = getattr(sys, "_base_executable", None) if python is None else None
    interpreter = base or interpreter
    if target.exists() and any(target.iterdir()) and not (target / "pyvenv.cfg").is_file():
        raise HarnessError(
            f"{target} exists and is not a virtual environment: choose another directory"
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    _step([interpreter, "-m", "venv", "--clear", str(target)], "creating the environment")
    uv = shutil.which("uv")
    if uv is not None:
        cmd = [uv, "pip", "install", "--python", str(target / "bin" / "python"), *requirements]
    else:
        cmd = [str(target / "bin" / "python"), "-m", "pip", "install", *requirements]
    _step(cmd, f"installing {' '.join(requirements)}")
    return mini


def _step(cmd: list[str], what: str) -> None:
    try:
        proc = subprocess.run(cmd, check=False)
    except OSError as exc:
        raise HarnessError(f"{what} failed: cannot run {cmd[0]}: {exc}") from None
    if proc.returncode != 0:
        raise HarnessError(f"{what} failed ({' '.join(cmd[:4])}... exited {proc.returncode})")
