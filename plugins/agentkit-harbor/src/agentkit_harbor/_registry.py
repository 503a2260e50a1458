"""Harbor dataset registries (``registry.json``) and fetching their tasks with git.

A registry is a JSON list of datasets, each ``{name, version, description,
tasks: [{name, git_url, git_commit_id, path}], metrics}``. ``NAME@VERSION``
picks one version; a bare ``NAME`` picks as Harbor does: ``head`` if
present, else the highest PEP 440 version, else the lexically last. Tasks
with a ``git_url`` are fetched with the real ``git`` into a cache
(``<cache>/<key>/<task dir name>``); a task pinned to a full commit id is
fetched once, a task at the branch head every time.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import attrs

from agentkit import ValidationError
from agentkit.validation import structure
from agentkit_harbor._errors import RegistryError

__all__ = [
    "DatasetSpec",
    "RegistryTask",
    "default_cache_dir",
    "fetch_dataset",
    "load_registry",
    "resolve_dataset",
    "resolve_version",
]

_FULL_SHA = re.compile(r"^[0-9a-f]{40}$")
_HEAD_NAMES = {"head", "HEAD"}


@attrs.frozen(kw_only=True)
class RegistryTask:
    """One task of a dataset: where its directory lives."""

    name: str
    path: str
    git_url: str | None = None
    git_commit_id: str | None = None


@attrs.frozen(kw_only=True)
class DatasetSpec:
    """One dataset version of a registry."""

    name: str
    version: str
    description: str = ""
    tasks: list[RegistryTask] = attrs.field(factory=list)
    metrics: list[dict[str, Any]] = attrs.field(factory=list)


def default_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/agentkit/harbor`` (``~/.cache/agentkit/harbor``)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "agentkit" / "harbor"


def load_registry(ref: str) -> tuple[list[DatasetSpec], str, Path | None]:
    """Read a registry from a path or an http(s)/file URL.

    Returns ``(datasets, source label, base directory for relative local
    task paths or None)``.
    """
    base: Path | None = None
    if ref.startswith(("http://", "https://")):
        import httpx

        try:
            response = httpx.get(ref, timeout=30.0, follow_redirects=True)
            response.raise_for_status()
        except httpx.HTTPError as exc:
            raise RegistryError(f"cannot fetch registry {ref}: {exc}") from None
        text = response.text
    else:
        path = Path(ref[len("file://") :] if ref.startswith("file://") else ref).expanduser()
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise RegistryError(f"cannot read registry {path}: {exc.strerror or exc}") from None
        base = path.resolve().parent
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise RegistryError(f"{ref}: registry is not valid JSON: {exc}") from None
    if not isinstance(data, list):
        raise ValidationError("", "a registry is a JSON list of datasets", ref)
    datasets = [
        structure(row, DatasetSpec, source=ref, path=f"[{i}]") for i, row in enumerate(data)
    ]
    return datasets, ref, base


def resolve_version(versions: list[str]) -> str:
    """Harbor's choice among versions: ``head``, else the highest PEP 440, else the last."""
    if not versions:
        raise RegistryError("the dataset has no versions")
    if "head" in versions:
        return "head"
    from packaging.version import InvalidVersion, Version

    parsed = []
    for v in versions:
        try:
            parsed.append((Version(v), v))
        except InvalidVersion:
            pass
    if parsed:
        return max(parsed)[1]
    return sorted(versions)[-1]


def resolve_dataset(datasets: list[DatasetSpec], ref: str, *, source: str) -> DatasetSpec:
    """The dataset ``NAME@VERSION`` (or ``NAME``) in ``datasets``."""
    name, sep, version = ref.partition("@")
    by_version = {d.version: d for d in datasets if d.name == name}
    if not by_version:
        known = ", ".join(sorted({d.name for d in datasets})) or "none"
        raise RegistryError(f"no dataset {name!r} in registry {source}; it has: {known}")
    if not sep:
        version = resolve_version(list(by_version))
    if version not in by_version:
        raise RegistryError(
            f"no version {version!r} of dataset {name!r} in registry {source}; versions: "
            + ", ".join(sorted(by_version))
        )
    return by_version[version]


def _git(*args: str, cwd: Path | None = None) -> str:
    env = {**os.environ, "GIT_TERMINAL_PROMPT": "0", "GIT_ASKPASS": "true"}
    try:
        done = subprocess.run(
            ["git", *args],
            cwd=cwd,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
    except FileNotFoundError:
        raise RegistryError("fetching registry tasks needs git, which is not installed") from None
    if done.returncode != 0:
        raise RegistryError(f"git {' '.join(args)} failed: {done.stderr.strip()[-800:]}")
    return done.stdout.strip()


def _cache_key(task: RegistryTask) -> str:
    raw = f"{task.git_url}\0{task.git_commit_id}\0{task.path}"
    return hashlib.sha256(raw.encode()).hexdigest()[:20]


def _fetch_repo(url: str, commit: str | None, paths: list[str], into: Path) -> str:
    """Fetch ``paths`` of ``url`` at ``commit`` (None: the default branch) into ``into``."""
    into.mkdir(parents=True, exist_ok=True)
    _git("init", "-q", str(into))
    ref = commit if commit and commit not in _HEAD_NAMES else "HEAD"
    try:
        _git("fetch", "-q", "--depth", "1", url, ref, cwd=into)
    except RegistryError:
        if ref == "HEAD":
            raise
        _git("fetch", "-q", url, cwd=into)  # servers that refuse a commit id as a want
    resolved = _git("rev-parse", "FETCH_HEAD" if ref == "HEAD" else ref, cwd=into)
    for p in paths:
        _git("checkout", "-q", resolved, "--", p, cwd=into)
    return resolved


def fetch_dataset(
    dataset: DatasetSpec,
    *,
    cache_dir: Path,
    base_dir: Path | None,
    refresh: bool = False,
) -> list[tuple[RegistryTask, Path, str | None]]:
    """Make every task of ``dataset`` available locally: ``(task, directory, commit)``."""
    out: list[tuple[RegistryTask, Path, str | None]] = []
    pending: dict[tuple[str, str | None], list[tuple[RegistryTask, Path]]] = {}
    for task in dataset.tasks:
        if task.git_url is None:
            local = Path(task.path).expanduser()
            if not local.is_absolute() and base_dir is not None:
                local = base_dir / local
            out.append((task, local.resolve(), None))
            continue
        target = cache_dir / "tasks" / _cache_key(task) / Path(task.path).name
        pinned = bool(task.git_commit_id and _FULL_SHA.match(task.git_commit_id))
        if pinned and not refresh and target.is_dir() and any(target.iterdir()):
            out.append((task, target, task.git_commit_id))
            continue
        pending.setdefault((task.git_url, task.git_commit_id), []).append((task, target))
        out.append((task, target, None))
    resolved: dict[Path, str] = {}
    for (url, commit), items in pending.items():
        with tempfile.TemporaryDirectory(prefix="agentkit-harbor-git-") as tmp:
            repo = Path(tmp) / "repo"
            sha = _fetch_repo(url, commit, sorted({t.path for t, _ in items}), repo)
            for task, target in items:
                src = repo / task.path
                if not src.is_dir():
                    raise RegistryError(
                        f"dataset {dataset.name}@{dataset.version}: task {task.name!r}: "
                        f"path {task.path!r} is not a directory in {url} at {sha}"
                    )
                if target.exists():
                    shutil.rmtree(target)
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copytree(src, target, symlinks=True)
                resolved[target] = sha
    return [(t, p, c or resolved.get(p)) for t, p, c in out]
