"""Finding an agent program's executable and the host directories a sandbox must show."""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
from collections.abc import Callable, Mapping
from pathlib import Path

import attrs

from agentkit._errors import HarnessError

__all__ = ["ProgramBinary", "Resolver", "find_program", "is_elf", "local_npm_bins"]

#: Where, below the working directory and each of its parents, an npm install may
#: put an executable: a project's own ``node_modules`` and the one this
#: repository's noxfile fills (``.cache/npm``).
_NPM_BIN_DIRS = ("node_modules/.bin", ".cache/npm/node_modules/.bin")

Resolver = Callable[[Path], "tuple[Path, tuple[str, ...]]"]
"""Turns a found executable (symlinks resolved) into ``(what to run, dirs to show)``."""


@attrs.frozen
class ProgramBinary:
    """A usable agent program.

    ``path`` is what to run (symlinks resolved, a native executable where the
    npm package ships one), so it works at the same path inside a sandbox that
    shows ``mount_dirs`` read-only; ``version`` is what ``--version`` printed
    (parsed); ``found_via`` says where it was found.
    """

    path: Path
    version: str
    found_via: str
    mount_dirs: tuple[str, ...]


def is_elf(path: Path) -> bool:
    """True when ``path`` is a native (ELF) executable rather than a script."""
    try:
        with path.open("rb") as f:
            return f.read(4) == b"\x7fELF"
    except OSError:
        return False


def local_npm_bins(executable: str, cwd: Path) -> list[Path]:
    """``node_modules/.bin/<executable>`` (or under ``.cache/npm``) in ``cwd`` or a parent."""
    found: list[Path] = []
    for folder in (cwd, *cwd.parents):
        for rel in _NPM_BIN_DIRS:
            candidate = folder / rel / executable
            if candidate.exists():
                found.append(candidate)
    return found


def _default_resolve(real: Path) -> tuple[Path, tuple[str, ...]]:
    """A native executable shows its directory; a script its package (the parent's parent)."""
    if is_elf(real):
        return real, (str(real.parent),)
    return real, (str(real.parent.parent),)


@functools.lru_cache(maxsize=32)
def _version_output(path: str, mtime_ns: int) -> tuple[int, str, str]:
    proc = subprocess.run(
        [path, "--version"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        stdin=subprocess.DEVNULL,
    )
    return proc.returncode, proc.stdout, proc.stderr


def _candidates(
    executable: str, binary: str | None, env_var: str, env: Mapping[str, str], cwd: Path
) -> list[tuple[Path, str]]:
    if binary:
        if os.sep in binary:
            return [(Path(binary).expanduser(), "the binary option")]
        on_path = shutil.which(binary, path=env.get("PATH"))
        return [(Path(on_path), "the binary option")] if on_path else []
    from_env = env.get(env_var)
    if from_env:
        return [(Path(from_env).expanduser(), f"${env_var}")]
    found: list[tuple[Path, str]] = []
    on_path = shutil.which(executable, path=env.get("PATH"))
    if on_path:
        found.append((Path(on_path), "PATH"))
    found += [(c, str(c.parent)) for c in local_npm_bins(executable, cwd)]
    return found


def find_program(
    executable: str,
    *,
    env_var: str,
    install_hint: str,
    binary: str | None = None,
    resolve: Resolver | None = None,
    parse_version: Callable[[str], str] | None = None,
    env: Mapping[str, str] | None = None,
    cwd: str | Path | None = None,
) -> ProgramBinary:
    """Locate an agent program: ``binary`` (a path, or a name looked up on PATH), else
    ``$<env_var>``, else ``executable`` on PATH, else ``node_modules/.bin`` (or
    ``.cache/npm/node_modules/.bin``) in ``cwd`` or one of its parents.

    ``resolve`` maps the found file (symlinks resolved) to the file to run and
    the host directories a sandbox must show (by default: a native executable
    and its directory, or a script and its package). ``parse_version`` reads
    the version from ``--version``'s output (by default its last line).
    Raises :class:`~agentkit.HarnessError` ending with ``install_hint`` when
    nothing usable is found.
    """
    env = os.environ if env is None else env
    where = (Path(cwd) if cwd is not None else Path.cwd()).absolute()
    candidates = _candidates(executable, binary, env_var, env, where)
    if not candidates:
        if binary:
            raise HarnessError(f"{executable} binary {binary!r} was not found; {install_hint}")
        raise HarnessError(f"the {executable} program was not found; {install_hint}")
    path, via = candidates[0]
    if not path.exists():
        raise HarnessError(
            f"{executable} binary {path} (from {via}) does not exist; {install_hint}"
        )
    real = path.resolve()
    if not (real.is_file() and os.access(real, os.X_OK)):
        raise HarnessError(
            f"{executable} binary {path} (from {via}) is not an executable file; {install_hint}"
        )
    run, mounts = (resolve or _default_resolve)(real)
    try:
        code, out, err = _version_output(str(run), run.stat().st_mtime_ns)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise HarnessError(f"cannot run {run} --version: {exc}; {install_hint}") from None
    lines = [line.strip() for line in out.splitlines() if line.strip()]
    version = (parse_version or (lambda text: text))(lines[-1]) if lines else ""
    if code != 0 or not version:
        detail = (err or out).strip()[-500:]
        raise HarnessError(f"{run} --version failed (exit {code}): {detail}; {install_hint}")
    return ProgramBinary(path=run, version=version, found_via=via, mount_dirs=mounts)
