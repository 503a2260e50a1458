"""Finding the ``codex`` executable: the native binary inside the npm package."""

from __future__ import annotations

import os
import platform
from collections.abc import Mapping
from pathlib import Path

from agentkit.programs import ProgramBinary, find_program, is_elf

__all__ = ["BINARY_ENV", "CODEX_VERSION", "NPM_PACKAGE", "find_codex", "resolve_native"]

#: The npm package that ships the Codex CLI.
NPM_PACKAGE = "@openai/codex"
#: The release the tests pin (``npm install @openai/codex@0.169.0``); the noxfile reads it here.
CODEX_VERSION = "0.169.0"
#: Environment variable naming the executable to use (the noxfile sets it).
BINARY_ENV = "AGENTKIT_CODEX_BIN"
INSTALL_HINT = (
    f"install it with `npm install {NPM_PACKAGE}@{CODEX_VERSION}` (then it is found in "
    f"./node_modules/.bin), put `codex` on PATH, set {BINARY_ENV}=/path/to/codex, "
    "or pass Codex(binary=...)"
)

#: (system, machine) -> (Rust target triple, npm platform package suffix)
_TRIPLES = {
    ("linux", "x86_64"): ("x86_64-unknown-linux-musl", "linux-x64"),
    ("linux", "aarch64"): ("aarch64-unknown-linux-musl", "linux-arm64"),
    ("darwin", "x86_64"): ("x86_64-apple-darwin", "darwin-x64"),
    ("darwin", "aarch64"): ("aarch64-apple-darwin", "darwin-arm64"),
}
_MACHINES = {"amd64": "x86_64", "x64": "x86_64", "arm64": "aarch64"}


def _platform() -> tuple[str, str] | None:
    machine = platform.machine().lower()
    return _TRIPLES.get((platform.system().lower(), _MACHINES.get(machine, machine)))


def _native_for_wrapper(script: Path) -> Path | None:
    """The platform package's native binary for npm's ``bin/codex.js`` wrapper."""
    found = _platform()
    if found is None:
        return None
    triple, suffix = found
    package = script.parent.parent  # .../@openai/codex
    roots = [
        package / "node_modules" / "@openai" / f"codex-{suffix}",  # nested install
        package.parent / f"codex-{suffix}",  # hoisted: .../node_modules/@openai/codex-linux-x64
        package,  # older releases vendored every platform in the package itself
    ]
    for root in roots:
        candidate = root / "vendor" / triple / "bin" / "codex"
        if is_elf(candidate) and os.access(candidate, os.X_OK):
            return candidate.resolve()
    return None


def _layout_dir(native: Path) -> Path:
    """The directory to show in a sandbox: ``vendor/<triple>`` (the binary, its ``rg``
    and resources) for the npm layout, else the binary's own directory."""
    parent = native.parent
    if parent.name == "bin" and (parent.parent / "codex-package.json").exists():
        return parent.parent
    return parent


def resolve_native(real: Path) -> tuple[Path, tuple[str, ...]]:
    """``(native binary, dirs to show)`` for a found ``codex``: npm's node wrapper is
    replaced by the native binary it would run (a static executable)."""
    native = real if is_elf(real) else _native_for_wrapper(real)
    if native is None:  # a wrapper without its platform package: run the script itself
        return real, (str(real.parent.parent),)
    return native, (str(_layout_dir(native)),)


def _parse_version(line: str) -> str:
    """``codex-cli 0.169.0`` -> ``0.169.0``."""
    return line.split()[-1] if line.split() else ""


def find_codex(
    binary: str | None = None,
    *,
    env: Mapping[str, str] | None = None,
    cwd: str | Path | None = None,
) -> ProgramBinary:
    """Locate codex: ``binary``, else ``$AGENTKIT_CODEX_BIN``, else PATH, else
    ``node_modules/.bin`` (or ``.cache/npm/node_modules/.bin``) in ``cwd`` or a parent.

    Raises :class:`~agentkit.HarnessError` saying how to install it when none works.
    """
    return find_program(
        "codex",
        env_var=BINARY_ENV,
        install_hint=INSTALL_HINT,
        binary=binary,
        resolve=resolve_native,
        parse_version=_parse_version,
        env=env,
        cwd=cwd,
    )
