"""Finding the ``claude`` executable: the native binary the npm package installs."""

from __future__ import annotations

import os
import platform
from collections.abc import Mapping
from pathlib import Path

from agentkit.programs import ProgramBinary, find_program, is_elf

__all__ = [
    "BINARY_ENV",
    "CLAUDE_CODE_VERSION",
    "NPM_PACKAGE",
    "find_claude",
    "resolve_native",
]

#: The npm package that ships Claude Code.
NPM_PACKAGE = "@anthropic-ai/claude-code"
#: The release the tests pin (``npm install @anthropic-ai/claude-code@2.1.328``);
#: the noxfile reads it here.
CLAUDE_CODE_VERSION = "2.1.328"
#: Environment variable naming the executable to use (the noxfile sets it).
BINARY_ENV = "AGENTKIT_CLAUDE_CODE_BIN"
INSTALL_HINT = (
    f"install it with `npm install {NPM_PACKAGE}@{CLAUDE_CODE_VERSION}` (then it is found "
    f"in ./node_modules/.bin), put `claude` on PATH, set {BINARY_ENV}=/path/to/claude, "
    "or pass ClaudeCode(binary=...)"
)
_MACHINES = {"x86_64": "x64", "amd64": "x64", "aarch64": "arm64", "arm64": "arm64"}


def _platform_packages() -> list[str]:
    """npm platform package names for this machine, glibc first, then musl."""
    machine = platform.machine().lower()
    base = f"claude-code-{platform.system().lower()}-{_MACHINES.get(machine, machine)}"
    return [base, f"{base}-musl"]


def _native_for_placeholder(script: Path) -> Path | None:
    """The platform package's ``claude`` next to the npm package whose
    ``bin/claude.exe`` is still the placeholder (its postinstall did not run)."""
    package = script.parent.parent  # .../@anthropic-ai/claude-code
    for name in _platform_packages():
        for root in (package / "node_modules" / "@anthropic-ai" / name, package.parent / name):
            candidate = root / "claude"
            if is_elf(candidate) and os.access(candidate, os.X_OK):
                return candidate.resolve()
    return None


def resolve_native(real: Path) -> tuple[Path, tuple[str, ...]]:
    """``(native binary, dirs to show)`` for a found ``claude``."""
    native = real if is_elf(real) else _native_for_placeholder(real)
    if native is None:  # a script: run it with its package visible
        return real, (str(real.parent.parent),)
    return native, (str(native.parent),)


def _parse_version(line: str) -> str:
    """``2.1.328 (Claude Code)`` -> ``2.1.328``."""
    return line.split()[0] if line.split() else ""


def find_claude(
    binary: str | None = None,
    *,
    env: Mapping[str, str] | None = None,
    cwd: str | Path | None = None,
) -> ProgramBinary:
    """Locate claude: ``binary``, else ``$AGENTKIT_CLAUDE_CODE_BIN``, else PATH, else
    ``node_modules/.bin`` (or ``.cache/npm/node_modules/.bin``) in ``cwd`` or a parent.

    Raises :class:`~agentkit.HarnessError` saying how to install it when none works.
    """
    return find_program(
        "claude",
        env_var=BINARY_ENV,
        install_hint=INSTALL_HINT,
        binary=binary,
        resolve=resolve_native,
        parse_version=_parse_version,
        env=env,
        cwd=cwd,
    )
