"""The host programs an image sandbox runs inside, at a private path.

Each command in the local sandbox starts through ``setpriv`` (which drops
capabilities) and ``env`` (which changes directory) from util-linux and
coreutils. On an image's root those may be missing (Alpine, distroless) or
differ, so the host's own copies are bound read-only under
``/.agentkit`` together with the dynamic loader and libraries they link,
and run through that loader: nothing of the image's userland is used to
start a command.
"""

from __future__ import annotations

import functools
import os
import shutil
import struct
import subprocess

import attrs

from agentkit._errors import SandboxUnavailableError

__all__ = ["TOOLS_DIR", "HostTools", "host_tools"]

#: Where the host's helper programs are inside an image sandbox.
TOOLS_DIR = "/.agentkit"
_PT_INTERP = 3


def _interpreter(path: str) -> str | None:
    """The ELF program interpreter (dynamic loader) of ``path``, or None if static."""
    with open(path, "rb") as f:
        head = f.read(64)
        if head[:4] != b"\x7fELF":
            raise SandboxUnavailableError(f"{path} is not an ELF program")
        is64 = head[4] == 2
        endian = "<" if head[5] == 1 else ">"
        if is64:
            phoff, phentsize, phnum = (
                struct.unpack_from(endian + "Q", head, 32)[0],
                *struct.unpack_from(endian + "HH", head, 54),
            )
        else:
            phoff, phentsize, phnum = (
                struct.unpack_from(endian + "I", head, 28)[0],
                *struct.unpack_from(endian + "HH", head, 42),
            )
        for i in range(phnum):
            f.seek(phoff + i * phentsize)
            entry = f.read(phentsize)
            if struct.unpack_from(endian + "I", entry, 0)[0] != _PT_INTERP:
                continue
            if is64:
                offset, size = (
                    struct.unpack_from(endian + "Q", entry, 8)[0],
                    struct.unpack_from(endian + "Q", entry, 32)[0],
                )
            else:
                offset, size = (
                    struct.unpack_from(endian + "I", entry, 4)[0],
                    struct.unpack_from(endian + "I", entry, 16)[0],
                )
            f.seek(offset)
            return f.read(size).rstrip(b"\0").decode()
    return None


def _libraries(loader: str, program: str) -> list[str]:
    """The shared libraries ``program`` loads, as the host's loader resolves them."""
    done = subprocess.run([loader, "--list", program], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SandboxUnavailableError(
            f"cannot list the libraries of {program}: {done.stderr.strip() or done.stdout}"
        )
    libs = []
    for line in done.stdout.splitlines():
        _, arrow, rest = line.strip().partition(" => ")
        if arrow and rest.startswith("/"):
            libs.append(rest.split(" (")[0])
    return libs


@attrs.frozen
class HostTools:
    """Host files to bind read-only (source, in-sandbox path), and how to run each tool."""

    files: tuple[tuple[str, str], ...]
    #: tool name -> argv prefix running it inside (``[loader, --library-path, dir, program]``)
    commands: dict[str, tuple[str, ...]]

    def argv(self, tool: str) -> list[str]:
        """The argv prefix that runs the host's ``tool`` inside an image sandbox."""
        return list(self.commands[tool])


@functools.cache
def host_tools(*names: str) -> HostTools:
    """The host's ``names`` (``setpriv``, ``env``), their loader and libraries."""
    files: dict[str, str] = {}
    commands: dict[str, tuple[str, ...]] = {}
    for name in names:
        found = shutil.which(name, path="/usr/bin:/bin:/usr/sbin:/sbin")
        if found is None:
            raise SandboxUnavailableError(f"the local sandbox needs {name} on the host")
        program = os.path.realpath(found)
        inside = f"{TOOLS_DIR}/bin/{name}"
        files[inside] = program
        loader = _interpreter(program)
        if loader is None:
            commands[name] = (inside,)
            continue
        loader_inside = f"{TOOLS_DIR}/lib/{os.path.basename(loader)}"
        files[loader_inside] = os.path.realpath(loader)
        for lib in _libraries(loader, program):
            files[f"{TOOLS_DIR}/lib/{os.path.basename(lib)}"] = os.path.realpath(lib)
        commands[name] = (loader_inside, "--library-path", f"{TOOLS_DIR}/lib", inside)
    return HostTools(
        files=tuple(sorted((src, dst) for dst, src in files.items())), commands=commands
    )
