"""The files a task's compose file makes compose read, checked before compose runs.

Compose reads more than the file it is given, before any check of the
project it prints can run: the files named by ``include:`` (and each
include's ``env_file`` and ``project_directory``), the file of a service's
``extends``, a service's ``label_file``, and the ``.env`` of each project
directory, whose values fill ``${VAR}``. What it reads can end up in a
container (its environment, labels, command), so a task folder (untrusted
input) naming ``/root/.secret/compose.yaml`` or ``../../other-task/.env``
could hand a host file to the agent. :func:`read_compose_sources` walks
the task's compose file and, recursively, every file it includes or extends,
and lists every such reference that is

- outside the task's folder: absolute elsewhere, through ``..`` or ``~``, or
  through a symlink (paths count once symlinks are resolved);
- remote: compose fetches ``include`` from git or OCI registries
  (``oci://``, ``https://``, ``git@host:``);
- made with a variable (``${VAR}``): compose fills it from an environment
  and ``.env`` files the check cannot see the same way, so such a path
  must be plain.

Both sandboxes use it: the docker sandbox before any ``docker compose``
command, the local one as it reads the file (and for the files it merges).
Each raises the problems in its own :class:`~agentkit._errors.ComposeFileError`.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs

from agentkit._errors import SandboxUnavailableError, kind_of, missing_extra

__all__ = [
    "ComposeSources",
    "ComposeTooLarge",
    "load_yaml",
    "read_compose_sources",
]

#: A remote resource compose would fetch: a URL (``oci://``, ``https://``, ``git://``)
#: or git's ``user@host:path``.
_REMOTE = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://|^[^/\s:@]+@[^/\s:]+:")
#: How deep includes and extends may nest, and how many files (each from its folders)
#: they may name in all: a cycle or a fan-out ends there.
_MAX_DEPTH = 16
_MAX_READS = 256
#: The largest file compose may be given to read (compose files are a few KiB).
_MAX_SIZE = 4 * 2**20
#: The most values a compose file may hold once its YAML aliases are expanded.
_MAX_NODES = 200_000


class ComposeTooLarge(ValueError):
    """A compose file whose YAML anchors expand past :data:`_MAX_NODES` values, or
    nested too deeply for PyYAML to read."""


def _yaml() -> Any:
    # deferred: PyYAML is the 'compose' extra, needed only for compose tasks
    try:
        import yaml  # type: ignore[import-untyped,unused-ignore]
    except ImportError:
        raise SandboxUnavailableError(
            missing_extra("a compose task", "pyyaml", "compose")
        ) from None
    return yaml


def load_yaml(path: Path) -> Any:
    """A compose file's YAML (PyYAML's safe loader; compose's ``!reset`` and
    ``!override`` tags read as the value they mark). Raises ``OSError``,
    ``yaml.YAMLError`` or :class:`ComposeTooLarge`, and
    :class:`~agentkit._errors.SandboxUnavailableError` without PyYAML."""
    yaml = _yaml()

    class _Loader(yaml.SafeLoader):  # type: ignore[misc,name-defined,unused-ignore]
        pass

    def tagged(loader: Any, _suffix: str, node: Any) -> Any:
        if isinstance(node, yaml.MappingNode):
            return loader.construct_mapping(node, deep=True)
        if isinstance(node, yaml.SequenceNode):
            return loader.construct_sequence(node, deep=True)
        return loader.construct_scalar(node)

    _Loader.add_multi_constructor("!reset", tagged)
    _Loader.add_multi_constructor("!override", tagged)
    loader = _Loader(path.read_text(encoding="utf-8"))
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        if _expanded_size(node, yaml) > _MAX_NODES:
            # anchors used many times over ("billion laughs"): every walk of the
            # document (here, the merge, interpolation) would visit each copy
            raise ComposeTooLarge(
                f"too large once its anchors (&name) and aliases (*name) are expanded "
                f"(more than {_MAX_NODES:,} values, or an alias inside its own anchor)"
            )
        return loader.construct_document(node)
    except RecursionError:
        # PyYAML reads a nested value by recursion: thousands of '[' end Python's stack
        raise ComposeTooLarge(
            "nested too deeply (thousands of lists or mappings inside each other)"
        ) from None
    finally:
        loader.dispose()


def _expanded_size(top: Any, yaml: Any) -> int:
    """How many values a YAML node graph holds once every alias is expanded, counting
    each node once (time linear in the graph, not in the expansion); a node that
    holds itself (``&a [*a]``) counts as more than any limit."""

    def children(node: Any) -> list[Any]:
        if isinstance(node, yaml.SequenceNode):
            return list(node.value)
        if isinstance(node, yaml.MappingNode):
            return [n for pair in node.value for n in pair]
        return []

    over = _MAX_NODES + 1
    sizes: dict[int, int] = {}  # -1: on the path being walked
    stack: list[tuple[Any, bool]] = [(top, False)]
    while stack:
        node, finished = stack.pop()
        if finished:
            held = [sizes[id(n)] for n in children(node)]
            sizes[id(node)] = over if -1 in held else min(1 + sum(held), over)
            continue
        if id(node) in sizes:
            continue
        sizes[id(node)] = -1
        stack.append((node, True))
        stack.extend((n, False) for n in children(node) if id(n) not in sizes)
    return sizes[id(top)]


@attrs.frozen
class ComposeSources:
    """What :func:`read_compose_sources` found: each file read (its resolved path, in
    the order read, the top file first) with its YAML, every reference out of the
    task (``problems``), every file that could not be read or parsed
    (``unreadable``), and where the references lead (resolved)."""

    documents: dict[Path, Any]
    problems: list[str]
    unreadable: list[str] = attrs.field(factory=list)
    #: Files too large once their YAML aliases are expanded, or nested too deeply to
    #: read (also in ``unreadable``): refused on docker too, where compose would expand
    #: them itself (or read what the check could not, the files they name among it).
    oversized: list[str] = attrs.field(factory=list)
    #: Each file's ``include``s, in order: (the included file, its project directory).
    includes: dict[Path, list[tuple[Path, Path]]] = attrs.field(factory=dict)
    #: (a file, a service of it) -> the file its ``extends`` names.
    extends: dict[tuple[Path, str], Path] = attrs.field(factory=dict)


def _strings(value: object) -> Iterator[object]:
    """The items of a setting that is one string or a list of them (others as they are)."""
    if isinstance(value, list):
        yield from value
    elif value is not None:
        yield value


class _Walk:
    def __init__(self, top: Path, task_dir: Path) -> None:
        self.top = top
        self.root = Path(os.path.realpath(task_dir))
        self.documents: dict[Path, Any] = {}
        self.problems: list[str] = []
        self.unreadable: list[str] = []
        self.oversized: list[str] = []
        self.included: dict[Path, list[tuple[Path, Path]]] = {}
        self.extended: dict[tuple[Path, str], Path] = {}
        self.seen: set[tuple[Path, tuple[Path, ...]]] = set()

    def named(self, file: Path) -> str:
        return "" if file == self.top else f"{file}: "

    def bad(self, file: Path, where: str, what: str) -> None:
        prefix = "" if file == self.top else f"in {file}: "
        self.problems.append(f"{prefix}{where}: {what}")

    def target(
        self,
        file: Path,
        where: str,
        raw: object,
        bases: list[Path],
        what: str,
        *,
        regular: bool = True,
    ) -> Path | None:
        """``raw`` (relative to each of ``bases``) resolved, if it is inside the task's
        folder from every base (and, with ``regular``, a regular file of at most
        :data:`_MAX_SIZE` bytes where it exists: a FIFO would block the reader); None
        (and the problem noted) if not."""
        if not isinstance(raw, str) or not raw:
            self.bad(file, where, f"expected a path, got {kind_of(raw)}")
            return None
        if _REMOTE.match(raw):
            self.bad(
                file, where, f"{what} {raw!r} is a remote resource (only files inside the "
                f"task's folder are allowed)",
            )  # fmt: skip
            return None
        if "$" in raw:
            self.bad(
                file, where, f"{what} {raw!r} uses a variable (compose reads it before the "
                "project can be checked: write the path itself)",
            )  # fmt: skip
            return None
        found: Path | None = None
        for base in bases:
            plain = os.path.normpath(base / os.path.expanduser(raw))
            real = Path(os.path.realpath(plain))
            if not real.is_relative_to(self.root):
                via = f" (through a symlink, to {str(real)!r})" if Path(plain) != real else ""
                self.bad(
                    file, where, f"{what} {raw!r}{via} is outside the task's folder ({self.root})"
                )
                return None
            found = found or real
        if regular and found is not None:
            try:
                info = found.stat()
            except OSError:
                return found  # missing: the reader says so
            if not stat.S_ISREG(info.st_mode) or info.st_size > _MAX_SIZE:
                self.bad(
                    file, where, f"{what} {raw!r} is not a regular file of at most "
                    f"{_MAX_SIZE // 2**20} MiB",
                )  # fmt: skip
                return None
        return found

    def dotenv(self, file: Path, where: str, directory: Path) -> None:
        """A project directory's ``.env`` (compose reads it for ``${VAR}``), if there."""
        if os.path.lexists(directory / ".env"):
            self.target(file, where, ".env", [directory], "file")

    def walk(self, file: Path, bases: list[Path], depth: int) -> None:
        # a file read again from other folders: its relative paths are checked from them too
        key = (file, tuple(bases))
        if key in self.seen:
            return
        self.seen.add(key)
        if depth > _MAX_DEPTH or len(self.seen) > _MAX_READS:
            self.bad(
                file, "include/extends", f"more than {_MAX_DEPTH} files deep or "
                f"{_MAX_READS} files read",
            )  # fmt: skip
            return
        yaml = _yaml()
        try:
            data = self.documents[file] if file in self.documents else load_yaml(file)
        except OSError as exc:
            self.unreadable.append(f"{self.named(file)}cannot be read: {exc.strerror or exc}")
            return
        except yaml.YAMLError as exc:
            self.unreadable.append(f"{self.named(file)}is not valid YAML: {exc}")
            return
        except ComposeTooLarge as exc:
            # refused on both sandboxes: compose itself would expand it (memory)
            self.oversized.append(f"{self.named(file)}is {exc}")
            self.unreadable.append(f"{self.named(file)}is {exc}")
            return
        first = file not in self.documents
        self.documents[file] = data
        if not isinstance(data, dict):
            return
        self.includes(file, data.get("include"), bases, depth, record=first)
        services = data.get("services")
        if not isinstance(services, dict):
            return
        for name, svc in services.items():
            if not isinstance(svc, dict):
                continue
            at = f"service {name!r}"
            extends = svc.get("extends")
            if isinstance(extends, dict) and extends.get("file") is not None:
                found = self.target(
                    file, f"{at}: extends", extends.get("file"), bases, "extended file"
                )
                if found is not None:
                    self.extended[(file, str(name))] = found
                    self.walk(found, sorted({found.parent, *bases}), depth + 1)
            for i, label_file in enumerate(_strings(svc.get("label_file"))):
                self.target(file, f"{at}: label_file[{i}]", label_file, bases, "label file")

    def includes(
        self, file: Path, value: object, bases: list[Path], depth: int, *, record: bool
    ) -> None:
        if value is None:
            return
        if not isinstance(value, list):
            self.bad(file, "include", "expected a list")
            return
        for i, item in enumerate(value):
            at = f"include[{i}]"
            if isinstance(item, str):
                item = {"path": item}
            if not isinstance(item, dict):
                self.bad(file, at, f"expected a path or a mapping, got {kind_of(item)}")
                continue
            project: Path | None = None
            if item.get("project_directory") is not None:
                project = self.target(
                    file, f"{at}.project_directory", item["project_directory"], bases,
                    "project directory", regular=False,
                )  # fmt: skip
                if project is None:
                    continue
            for j, env_file in enumerate(_strings(item.get("env_file"))):
                self.target(file, f"{at}.env_file[{j}]", env_file, bases, "env file")
            paths = list(_strings(item.get("path")))
            if not paths:
                self.bad(file, f"{at}.path", "expected a path or a list of paths")
            for j, raw in enumerate(paths):
                found = self.target(file, f"{at}.path[{j}]", raw, bases, "included file")
                if found is None:
                    continue
                directory = project or found.parent
                if item.get("env_file") is None:
                    self.dotenv(file, f"{at}: .env", directory)
                if record:
                    self.included.setdefault(file, []).append((found, directory))
                self.walk(found, sorted({found.parent, directory}), depth + 1)


def read_compose_sources(
    compose_file: str | os.PathLike[str],
    *,
    task_dir: str | os.PathLike[str],
    project_dir: str | os.PathLike[str] | None = None,
) -> ComposeSources:
    """Read ``compose_file`` and every file it includes or extends that is inside
    ``task_dir``, noting every reference compose would follow out of it (see the
    module's docstring). ``project_dir`` (default: the compose file's folder) is
    where compose looks for ``.env``."""
    top = Path(os.path.abspath(compose_file))
    walk = _Walk(top, Path(task_dir))
    real = walk.target(top, "the compose file", str(top), [top.parent], "path")
    if real is None:
        return ComposeSources({}, walk.problems, walk.unreadable, oversized=walk.oversized)
    walk.top = real
    project = Path(os.path.abspath(project_dir)) if project_dir is not None else top.parent
    walk.dotenv(real, ".env", project)
    walk.walk(real, sorted({real.parent, top.parent}), 0)
    return ComposeSources(
        walk.documents,
        list(dict.fromkeys(walk.problems)),  # a file read from two folders says it once
        list(dict.fromkeys(walk.unreadable)),
        includes=walk.included,
        extends=walk.extended,
        oversized=list(dict.fromkeys(walk.oversized)),
    )
