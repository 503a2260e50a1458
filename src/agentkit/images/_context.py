"""A Dockerfile's build context: which files are sent, their digest, the tar sent.

The digest covers what a build can see: every file the ``.dockerignore``
lets through (its path, type, executable bits and content; a symlink's
target) and the Dockerfile. Timestamps and owners are left out, so the same
task checked out twice has the same digest. :func:`fingerprint` is the cheap
variant (sizes and modification times) used to notice that a context changed
without reading it.
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
import tarfile
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import attrs

from agentkit._sandbox import TaskImage
from agentkit.images._dockerignore import IgnoreRules, read_dockerignore
from agentkit.images._errors import ImageError

__all__ = ["BuildContext", "base_images", "build_context"]

#: The name a Dockerfile outside its context is sent under.
OUTSIDE_DOCKERFILE = ".agentkit.Dockerfile"
_CHUNK = 1 << 20


@attrs.frozen
class _ContextFile:
    """One file, directory or link the build context sends: its path inside the context
    (``/``-separated), where it is, and its mode."""

    rel: str
    path: Path
    mode: int


@attrs.frozen
class BuildContext:
    """The files of one build: ``context`` minus what ``.dockerignore`` leaves out."""

    context: Path
    dockerfile: Path
    #: The Dockerfile's path inside the sent context (``/``-separated).
    dockerfile_name: str
    entries: tuple[_ContextFile, ...]
    #: True when the Dockerfile lies outside the context and is sent beside it.
    dockerfile_outside: bool = False

    def digest(self) -> str:
        """sha256 (hex) of the Dockerfile and every file sent, as described above."""
        h = hashlib.sha256()
        h.update(b"agentkit-build-context-v1\0")
        h.update(self.dockerfile_name.encode() + b"\0")
        h.update(_file_digest(self.dockerfile).encode() + b"\0")
        for e in self.entries:
            kind, detail = _describe(e)
            h.update(f"{e.rel}\0{kind}\0{detail}\0".encode())
        return h.hexdigest()

    def fingerprint(self) -> tuple[tuple[str, int, int, int], ...]:
        """Paths, modes, sizes and modification times: changes when a file changes."""
        out = []
        for e in (_ContextFile("", self.dockerfile, 0), *self.entries):
            try:
                st = os.lstat(e.path)
            except OSError:
                continue
            out.append((e.rel, st.st_mode, st.st_size, st.st_mtime_ns))
        return tuple(out)

    def write_tar(self, fileobj: IO[bytes]) -> None:
        """Write the context as an uncompressed tar (what the engine's build API takes)."""
        with tarfile.open(fileobj=fileobj, mode="w", format=tarfile.PAX_FORMAT) as tar:
            for e in self.entries:
                info = tar.gettarinfo(str(e.path), arcname=e.rel)
                info.uid = info.gid = 0
                info.uname = info.gname = ""
                if info.isreg():
                    with open(e.path, "rb") as f:
                        tar.addfile(info, f)
                else:
                    tar.addfile(info)
            if self.dockerfile_outside:
                info = tar.gettarinfo(str(self.dockerfile), arcname=OUTSIDE_DOCKERFILE)
                info.uid = info.gid = 0
                info.uname = info.gname = ""
                with open(self.dockerfile, "rb") as f:
                    tar.addfile(info, f)

    def spooled_tar(self) -> IO[bytes]:
        """The tar in a temporary file (in memory up to 64 MiB), rewound."""
        tmp = tempfile.SpooledTemporaryFile(max_size=64 << 20)  # noqa: SIM115
        self.write_tar(tmp)
        tmp.seek(0)
        return tmp


def _file_digest(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def _describe(e: _ContextFile) -> tuple[str, str]:
    if stat.S_ISLNK(e.mode):
        return "l", os.readlink(e.path)
    if stat.S_ISDIR(e.mode):
        return "d", oct(e.mode & 0o7777)
    if stat.S_ISREG(e.mode):
        return "f", f"{e.mode & 0o7777:o}:{_file_digest(e.path)}"
    return "o", oct(stat.S_IFMT(e.mode))


def _walk(root: Path, rules: IgnoreRules) -> Iterator[_ContextFile]:
    """Every path under ``root`` not excluded, parents before children, sorted."""
    prune = not rules.has_exceptions

    def visit(directory: Path, prefix: str) -> Iterator[_ContextFile]:
        try:
            names = sorted(os.listdir(directory))
        except OSError as exc:
            raise ImageError(f"cannot read build context directory {directory}: {exc}") from None
        for name in names:
            rel = f"{prefix}{name}"
            path = directory / name
            st = os.lstat(path)
            excluded = rules.excluded(rel)
            if stat.S_ISDIR(st.st_mode):
                if excluded and prune:
                    continue  # nothing below can come back
                if not excluded:
                    yield _ContextFile(rel, path, st.st_mode)
                yield from visit(path, rel + "/")
            elif not excluded:
                yield _ContextFile(rel, path, st.st_mode)

    yield from visit(root, "")


def build_context(image: TaskImage) -> BuildContext:
    """The build context of ``image`` (its ``dockerfile`` with ``context``, or its directory)."""
    if image.dockerfile is None:
        raise ImageError("this task image has no Dockerfile to build")
    dockerfile = Path(image.dockerfile).absolute()
    context = Path(image.context).absolute() if image.context else dockerfile.parent
    if not dockerfile.is_file():
        raise ImageError(f"{dockerfile}: no such Dockerfile")
    if not context.is_dir():
        raise ImageError(f"{context}: the build context is not a directory")
    outside = not dockerfile.is_relative_to(context)
    name = OUTSIDE_DOCKERFILE if outside else dockerfile.relative_to(context).as_posix()
    rules = read_dockerignore(context, () if outside else (name,))
    entries = tuple(_walk(context, rules))
    return BuildContext(context, dockerfile, name, entries, outside)


_ARG = re.compile(r"\$(?:\{(\w+)(?::?-([^}]*))?\}|(\w+))")


def base_images(dockerfile: Path) -> list[str]:
    """The images a Dockerfile builds on: its ``FROM`` and ``COPY --from`` references.

    Global ``ARG`` defaults are substituted; stage names are left out, and so
    are references still holding a variable (a build argument with no default).
    """
    text = re.sub(r"\\\r?\n", " ", dockerfile.read_text(encoding="utf-8", errors="replace"))
    args: dict[str, str] = {}
    stages: set[str] = set()
    found: list[str] = []
    seen_from = False

    def expand(value: str) -> str:
        def sub(m: re.Match[str]) -> str:
            name = m.group(1) or m.group(3)
            if name in args:
                return args[name]
            return m.group(2) if m.group(2) is not None else m.group(0)

        return _ARG.sub(sub, value)

    for raw in text.splitlines():
        words = raw.strip().split()
        if not words or words[0].startswith("#"):
            continue
        op = words[0].upper()
        rest = [w for w in words[1:] if not w.startswith("--platform")]
        if op == "ARG" and not seen_from and rest:
            name, _, default = rest[0].partition("=")
            args[name] = default.strip("'\"")
        elif op == "FROM" and rest:
            seen_from = True
            ref = expand(rest[0])
            if len(rest) >= 3 and rest[1].upper() == "AS":
                stages.add(rest[2].lower())
            if ref.lower() not in stages and ref != "scratch" and "$" not in ref:
                found.append(ref)
        elif op == "COPY":
            for w in words[1:]:
                if w.startswith("--from="):
                    ref = expand(w.split("=", 1)[1])
                    if ref.lower() not in stages and not ref.isdigit() and "$" not in ref:
                        found.append(ref)
    return list(dict.fromkeys(found))
