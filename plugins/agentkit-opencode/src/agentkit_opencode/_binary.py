"""Finding the ``opencode`` binary and the host paths a sandbox must show to run it."""

from __future__ import annotations

import os
import platform
from collections.abc import Mapping
from pathlib import Path

from agentkit.programs import ProgramBinary, find_program, is_elf

__all__ = ["BINARY_ENV", "OPENCODE_VERSION", "OpenCodeBinary", "find_opencode"]

#: The opencode-ai release the tests pin (``npm install opencode-ai@1.18.33``);
#: the noxfile reads it here.
OPENCODE_VERSION = "1.18.33"
#: Environment variable naming the binary to use (the noxfile sets it).
BINARY_ENV = "AGENTKIT_OPENCODE_BIN"
_INSTALL = (
    f"install it with `npm install opencode-ai@{OPENCODE_VERSION}` (then it is found in "
    f"./node_modules/.bin), put `opencode` on PATH, set {BINARY_ENV}=/path/to/opencode, "
    "or pass OpenCode(binary=...)"
)

OpenCodeBinary = ProgramBinary
"""A usable opencode executable (an :class:`agentkit.programs.ProgramBinary`)."""


def _native_beside(script: Path) -> Path | None:
    """The platform package's native binary next to an npm wrapper script, if installed."""
    machine = {"x86_64": "x64", "amd64": "x64", "aarch64": "arm64", "arm64": "arm64"}.get(
        platform.machine().lower(), platform.machine().lower()
    )
    system = platform.system().lower()
    # .../node_modules/opencode-ai/bin/opencode -> .../node_modules
    node_modules = script.parent.parent.parent
    for suffix in ("", "-baseline", "-musl", "-baseline-musl"):
        candidate = node_modules / f"opencode-{system}-{machine}{suffix}" / "bin" / "opencode"
        if is_elf(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return None


def _resolve(real: Path) -> tuple[Path, tuple[str, ...]]:
    """The native binary (and its directory); a node wrapper without one runs as it is,
    its package directory visible too."""
    if not is_elf(real):
        native = _native_beside(real)
        if native is None:
            return real, (str(real.parent.parent),)
        real = native.resolve()
    return real, (str(real.parent),)


def find_opencode(
    binary: str | None = None,
    *,
    env: Mapping[str, str] | None = None,
    cwd: str | Path | None = None,
) -> ProgramBinary:
    """Locate opencode: ``binary``, else ``$AGENTKIT_OPENCODE_BIN``, else PATH, else
    ``node_modules/.bin`` (or ``.cache/npm/node_modules/.bin``) in ``cwd`` or a parent.

    Raises :class:`~agentkit.HarnessError` saying how to install it when none works.
    """
    return find_program(
        "opencode",
        env_var=BINARY_ENV,
        install_hint=_INSTALL,
        binary=binary,
        resolve=_resolve,
        env=env,
        cwd=cwd,
    )
