"""The runtime mini-swe-agent runs from inside a sandbox: its interpreter, made portable.

A task's sandbox may have a userland of its own (a container from the task's
image, or the local sandbox on an image's root) that has no Python, another
Python, or none of the libraries the host's interpreter links. So, once per
installation, agentkit assembles a *runtime* directory in a cache:

- ``python/``: a copy of the installation's interpreter and its standard
  library (without its tests, IDLE, tkinter and site-packages), laid out as
  the original so the interpreter finds its prefix from its own path;
- ``lib/``: every shared library the interpreter, the standard library's
  extension modules and the installed packages' extension modules load, as
  ``ldd`` resolves them on this machine: glibc and its dynamic loader included;
- ``runtime.json``: what it was built from.

Inside the sandbox the interpreter is started through the copied loader::

    <runtime>/lib/ld-linux-x86-64.so.2 --inhibit-cache --library-path <runtime>/lib \\
        --argv0 <runtime>/python/bin/python3.11 <runtime>/python/bin/python3.11 -I -c BOOT ...

so it uses nothing of the sandbox's userland: the library path is an argument
of that one process (no ``LD_LIBRARY_PATH`` that the agent's own commands
would inherit), and ``-I`` ignores ``PYTHONPATH``/``PYTHONHOME`` an image may
set. ``BOOT`` adds the installation's site-packages directories (shown
read-only at the same paths) and runs mini's command line. The commands the
agent runs are the sandbox's own (``/bin/sh`` from its userland).

Requirements: a Linux host with glibc and ``ldd`` to build the runtime, and a
sandbox on the same CPU architecture. Packages installed in editable mode
from directories outside the site-packages directories are not visible.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import stat
import subprocess
import tempfile
import threading
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import attrs

from agentkit import HarnessError
from agentkit_mini_swe_agent._config import API_KEY_ENV, HEADERS_ENV
from agentkit_mini_swe_agent._install import MiniSweAgentInstall

__all__ = ["CACHE_ENV", "MiniSweAgentRuntime", "cache_root", "portable_runtime"]

#: Environment variable naming the directory runtimes are kept in.
CACHE_ENV = "AGENTKIT_MINI_SWE_AGENT_CACHE"
#: Bumped whenever the layout changes (old runtimes are then left unused).
_FORMAT = 1
#: Top-level standard-library entries never needed by an agent CLI.
_SKIP_STDLIB = frozenset(
    {
        "site-packages",
        "dist-packages",
        "test",
        "idlelib",
        "tkinter",
        "turtledemo",
        "lib2to3",
        "ensurepip",
    }
)
_LDD_ARROW = re.compile(r"^\s*(\S+)\s+=>\s+(/\S+)\s+\(0x[0-9a-f]+\)")
_LDD_LOADER = re.compile(r"^\s*(/\S+)\s+\(0x[0-9a-f]+\)")
_LDD_MISSING = re.compile(r"^\s*(\S+)\s+=>\s+not found")
_lock = threading.Lock()
_built: dict[str, MiniSweAgentRuntime] = {}

#: Run inside the sandbox with ``python -I -c``: the installation's packages
#: on sys.path; the API key and request headers taken out of the environment
#: (so the commands mini runs do not inherit them) and given to litellm; then
#: mini's command line
#: (what its ``mini`` script does).
_BOOT = """import json, os, site, sys
for d in {site_dirs!r}:
    site.addsitedir(d)
key = os.environ.pop({key_env!r}, None)
headers = os.environ.pop({headers_env!r}, None)
if key is not None or headers:
    import litellm
    if key is not None:
        litellm.api_key = key
    if headers:
        litellm.headers = json.loads(headers)
del key, headers
sys.argv[0] = "mini"
from minisweagent.run.mini import app
sys.exit(app())
"""


@attrs.frozen
class MiniSweAgentRuntime:
    """A portable runtime for one installation (see the module's documentation)."""

    root: Path
    loader: Path
    python: Path
    site_dirs: tuple[str, ...]
    python_version: str
    version: str

    @property
    def mount_dirs(self) -> tuple[str, ...]:
        """Host directories a sandbox shows read-only, at the same paths, to run mini."""
        return (str(self.root), *self.site_dirs)

    def argv(self, *mini_args: str) -> list[str]:
        """The command that runs ``mini *mini_args`` inside a sandbox."""
        return [
            str(self.loader),
            "--inhibit-cache",
            "--library-path",
            str(self.root / "lib"),
            "--argv0",
            str(self.python),
            str(self.python),
            "-I",
            "-c",
            _BOOT.format(
                site_dirs=list(self.site_dirs), key_env=API_KEY_ENV, headers_env=HEADERS_ENV
            ),
            *mini_args,
        ]

    def python_argv(self, *python_args: str) -> list[str]:
        """The command that runs the runtime's interpreter with ``python_args``."""
        return [
            str(self.loader),
            "--inhibit-cache",
            "--library-path",
            str(self.root / "lib"),
            "--argv0",
            str(self.python),
            str(self.python),
            *python_args,
        ]


def cache_root(env: Mapping[str, str] | None = None) -> Path:
    """Where runtimes are kept: ``$AGENTKIT_MINI_SWE_AGENT_CACHE``, else
    ``$XDG_CACHE_HOME/agentkit/mini-swe-agent`` (``~/.cache/...``)."""
    env = os.environ if env is None else env
    if env.get(CACHE_ENV):
        return Path(env[CACHE_ENV]).expanduser().absolute()
    base = env.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "agentkit" / "mini-swe-agent"


def _key(install: MiniSweAgentInstall) -> str:
    exe = install.base_executable.stat()
    parts = {
        "format": _FORMAT,
        "python": str(install.base_executable),
        "python_stat": [exe.st_size, exe.st_mtime_ns],
        "python_version": install.python_version,
        "stdlib": str(install.stdlib),
        "site_dirs": [[d, _installed(d)] for d in install.site_dirs],
        "version": install.version,
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:16]


def _installed(site_dir: str) -> list[str]:
    """What is installed in ``site_dir`` (its distributions' metadata directories).

    Not the directory's mtime: running Python writes ``__pycache__`` there, which
    would give the same installation a new key (and a second runtime) mid-run.
    """
    try:
        names = os.listdir(site_dir)
    except OSError:
        return []
    return sorted(n for n in names if n.endswith((".dist-info", ".egg-info", ".pth")))


def _runtime_at(root: Path, install: MiniSweAgentInstall) -> MiniSweAgentRuntime | None:
    try:
        meta = json.loads((root / "runtime.json").read_text())
    except (OSError, ValueError):
        return None
    return MiniSweAgentRuntime(
        root=root,
        loader=root / meta["loader"],
        python=root / meta["python"],
        site_dirs=install.site_dirs,
        python_version=install.python_version,
        version=install.version,
    )


def portable_runtime(
    install: MiniSweAgentInstall, *, cache: str | Path | None = None
) -> MiniSweAgentRuntime:
    """The runtime for ``install``, built in the cache the first time (a few seconds).

    Concurrent builders (threads or processes) are safe: each builds into a
    temporary directory and the first to rename it into place wins.
    """
    root = Path(cache) if cache is not None else cache_root()
    final = root / f"py{install.python_version}-mini{install.version}-{_key(install)}"
    with _lock:
        known = _built.get(str(final))
        if known is not None and (final / "runtime.json").exists():
            return known
        runtime = _runtime_at(final, install)
        if runtime is None:
            root.mkdir(parents=True, exist_ok=True)
            tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=root))
            try:
                _build(install, tmp)
                _open_up(tmp)
                try:
                    os.rename(tmp, final)
                except OSError:
                    if not (final / "runtime.json").exists():
                        raise
            finally:
                if tmp.exists():
                    shutil.rmtree(tmp, ignore_errors=True)
            runtime = _runtime_at(final, install)
            if runtime is None:
                raise HarnessError(f"the mini-swe-agent runtime at {final} is unreadable")
        _built[str(final)] = runtime
        return runtime


def _is_elf(path: Path) -> bool:
    try:
        with path.open("rb") as f:
            return f.read(4) == b"\x7fELF"
    except OSError:
        return False


def _elf_files(install: MiniSweAgentInstall) -> Iterator[Path]:
    yield install.base_executable
    folder = install.dynload
    if folder is not None and folder.is_dir():
        yield from sorted(
            p for p in folder.iterdir() if p.suffix == ".so" and not p.name.startswith("_tkinter")
        )
    for site in install.site_dirs:
        for dirpath, _dirs, files in os.walk(site):
            for name in files:
                if name.endswith(".so") or ".so." in name:
                    path = Path(dirpath) / name
                    if not path.is_symlink() and _is_elf(path):
                        yield path


def _inside(path: str, folders: tuple[str, ...]) -> bool:
    return any(path == f or path.startswith(f.rstrip("/") + "/") for f in folders)


def _shared_libraries(install: MiniSweAgentInstall) -> tuple[dict[str, Path], Path]:
    """``{soname: host path}`` of what must be copied, and the dynamic loader."""
    ldd = shutil.which("ldd")
    if ldd is None:
        raise HarnessError(
            "building mini-swe-agent's sandbox runtime needs `ldd` (glibc's libc-bin) on this host"
        )
    libs: dict[str, Path] = {}
    loader: Path | None = None
    own = (*install.site_dirs, str(install.stdlib))
    env = {k: v for k, v in os.environ.items() if not k.startswith("LD_")}

    def listing(elf: Path) -> str:
        proc = subprocess.run(
            [ldd, str(elf)], capture_output=True, text=True, timeout=60, check=False, env=env
        )
        return proc.stdout if proc.returncode == 0 else ""  # else static, or not for here

    with ThreadPoolExecutor(max_workers=4) as pool:
        listings = list(pool.map(listing, _elf_files(install)))
    for text in listings:
        for line in text.splitlines():
            arrow = _LDD_ARROW.match(line)
            if arrow:
                name, target = arrow.groups()
                if not _inside(target, own):
                    libs.setdefault(name, Path(target))
                continue
            bare = _LDD_LOADER.match(line)
            if bare and loader is None:
                loader = Path(bare.group(1))
    if loader is None:
        raise HarnessError(
            f"cannot find the dynamic loader of {install.base_executable} with ldd: "
            "a dynamically linked glibc interpreter is needed"
        )
    libc = libs.get("libc.so.6")
    if libc is not None and "libgcc_s.so.1" not in libs:
        # glibc loads it on demand (thread cancellation and exit unwind through it)
        gcc_s = libc.parent / "libgcc_s.so.1"
        if gcc_s.exists():
            libs["libgcc_s.so.1"] = gcc_s
    return libs, loader


def _copy_stdlib(source: Path, dest: Path) -> None:
    def ignore(folder: str, names: list[str]) -> set[str]:
        if Path(folder) == source:
            return {n for n in names if n in _SKIP_STDLIB or n.startswith("config-")}
        return set()

    shutil.copytree(source, dest, ignore=ignore, symlinks=True, dirs_exist_ok=True)


def _build(install: MiniSweAgentInstall, tmp: Path) -> None:
    python_dir = tmp / "python"
    exe = python_dir / "bin" / install.base_executable.name
    exe.parent.mkdir(parents=True)
    shutil.copy2(install.base_executable, exe)
    for source in (install.stdlib, install.dynload):
        if source is None or (source != install.stdlib and source.parent == install.stdlib):
            continue  # lib-dynload inside the standard library is copied with it
        try:
            rel = source.relative_to(install.base_prefix)
        except ValueError as exc:
            raise HarnessError(
                f"cannot make {install.base_executable} portable: {source} is not under "
                f"its prefix {install.base_prefix}"
            ) from exc
        _copy_stdlib(source, python_dir / rel)
    libs, loader = _shared_libraries(install)
    lib_dir = tmp / "lib"
    lib_dir.mkdir()
    for name, path in sorted(libs.items()):
        shutil.copy2(path, lib_dir / name)
    shutil.copy2(loader, lib_dir / loader.name)
    meta = {
        "format": _FORMAT,
        "loader": f"lib/{loader.name}",
        "python": str(exe.relative_to(tmp)),
        "python_version": install.python_version,
        "mini_swe_agent": install.version,
        "built_from": str(install.python),
        "base_executable": str(install.base_executable),
        "site_dirs": list(install.site_dirs),
        "libraries": sorted([*libs, loader.name]),
    }
    _check(tmp, meta, install)
    (tmp / "runtime.json").write_text(json.dumps(meta, indent=2) + "\n")


def _check(tmp: Path, meta: dict[str, object], install: MiniSweAgentInstall) -> None:
    """Start the copied interpreter through the copied loader, importing what mini needs."""
    probe = MiniSweAgentRuntime(
        root=tmp,
        loader=tmp / str(meta["loader"]),
        python=tmp / str(meta["python"]),
        site_dirs=install.site_dirs,
        python_version=install.python_version,
        version=install.version,
    )
    code = (
        "import site, sys\n"
        f"for d in {list(install.site_dirs)!r}: site.addsitedir(d)\n"
        "import ssl, ctypes, zlib, bz2, lzma, sqlite3, minisweagent\n"
        "print(sys.prefix)\n"
    )
    with tempfile.TemporaryDirectory() as home:
        env = {
            "PATH": "/usr/bin:/bin",
            "HOME": home,
            "MSWEA_GLOBAL_CONFIG_DIR": home,
            "MSWEA_SILENT_STARTUP": "1",
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        }
        proc = subprocess.run(
            probe.python_argv("-I", "-c", code),
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
            env=env,
            cwd=home,
        )
    if proc.returncode != 0 or proc.stdout.strip() != str(tmp / "python"):
        detail = (proc.stderr or proc.stdout).strip()[-800:]
        raise HarnessError(
            f"the portable runtime built from {install.python} does not start "
            f"(exit {proc.returncode}): {detail}"
        )


def _open_up(root: Path) -> None:
    """World-readable (a sandbox's root is another uid on the host), never writable."""
    for dirpath, _dirs, files in os.walk(root):
        os.chmod(dirpath, 0o755)
        for name in files:
            path = os.path.join(dirpath, name)
            mode = os.lstat(path).st_mode
            if stat.S_ISREG(mode):
                executable = mode & stat.S_IXUSR
                os.chmod(path, 0o755 if executable else 0o644)
