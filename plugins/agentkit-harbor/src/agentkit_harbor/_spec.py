"""One Harbor task directory, loaded and checked.

A :class:`HarborTaskSpec` is everything agentkit needs from a task
directory: the parsed ``task.toml``, the instruction(s), where tests and
solutions live, and the working directory. Loading never runs anything.
"""

from __future__ import annotations

import functools
import os
import re
import tomllib
from pathlib import Path

import attrs

from agentkit import ValidationError
from agentkit.sandbox import SandboxUnavailableError
from agentkit.sandbox.compose import merge_sources, read_compose_sources
from agentkit.validation import MAX_NESTING_DEPTH, check_nesting
from agentkit_harbor._config import KNOWN_SCHEMA_VERSIONS, StepConfig, TaskConfig, parse_task_config

__all__ = [
    "COMPOSE_FILES",
    "DEFAULT_WORKDIR",
    "HarborStepSpec",
    "HarborTaskSpec",
    "check_links_stay_inside",
    "dockerfile_workdir",
    "load_task_dir",
    "load_task_dir_cached",
    "strip_canary",
]

#: The working directory when neither task.toml nor a Dockerfile names one.
DEFAULT_WORKDIR = "/app"

_CANARY_LINE = re.compile(r"^(<!--.*canary.*-->|#.*canary.*)$", re.IGNORECASE)
#: The compose file names Harbor looks for in ``environment/``, in order.
COMPOSE_FILES = ("docker-compose.yaml", "docker-compose.yml", "compose.yaml", "compose.yml")


def strip_canary(text: str) -> str:
    """Drop leading canary marker lines (and the blank lines after), as Harbor does."""
    lines = text.split("\n")
    i = 0
    while i < len(lines) and _CANARY_LINE.match(lines[i].strip()):
        i += 1
    if i == 0:
        return text
    while i < len(lines) and not lines[i].strip():
        i += 1
    return "\n".join(lines[i:])


@attrs.frozen(kw_only=True)
class HarborStepSpec:
    """One step of a multi-step task: its config and its files under ``steps/<name>/``."""

    config: StepConfig
    step_dir: Path
    instruction: str

    @property
    def name(self) -> str:
        """The step's name (its directory under ``steps/``)."""
        return self.config.name

    @property
    def tests_dir(self) -> Path:
        """``steps/<name>/tests/``: uploaded over the task's ``tests/``."""
        return self.step_dir / "tests"

    @property
    def solution_dir(self) -> Path:
        """``steps/<name>/solution/``."""
        return self.step_dir / "solution"

    @property
    def workdir_dir(self) -> Path:
        """``steps/<name>/workdir/``: uploaded into the working directory before the step."""
        return self.step_dir / "workdir"


@attrs.frozen(kw_only=True)
class HarborTaskSpec:
    """A loaded Harbor task directory."""

    task_dir: Path
    config: TaskConfig
    instruction: str
    steps: list[HarborStepSpec]
    workdir: str
    workdir_source: str
    environment_kind: str
    notes: list[str] = attrs.field(factory=list)

    @property
    def dir_name(self) -> str:
        """The directory's name: the task's item id in agentkit."""
        return self.task_dir.name

    @property
    def display_name(self) -> str:
        """``[task].name`` (``org/name``) when set, else the directory name (Harbor's rule)."""
        return self.config.task.name if self.config.task else self.task_dir.name

    @property
    def config_path(self) -> Path:
        """``task.toml``."""
        return self.task_dir / "task.toml"

    @property
    def tests_dir(self) -> Path:
        """``tests/``."""
        return self.task_dir / "tests"

    @property
    def solution_dir(self) -> Path:
        """``solution/``."""
        return self.task_dir / "solution"

    @property
    def environment_dir(self) -> Path:
        """``environment/``."""
        return self.task_dir / "environment"

    @property
    def uploads_environment_dir(self) -> bool:
        """Whether ``environment/`` is copied into the working directory.

        Harbor does so for a prebuilt ``docker_image`` without a Dockerfile or
        compose file; agentkit also does for an ``environment/`` of plain files.
        """
        if self.environment_kind == "files":
            return True
        return self.environment_kind == "image" and _has_files(self.environment_dir)

    @property
    def is_multi_step(self) -> bool:
        """True for a task with ``[[steps]]``."""
        return bool(self.steps)

    def step(self, name: str) -> HarborStepSpec:
        """The step called ``name``."""
        for s in self.steps:
            if s.name == name:
                return s
        raise KeyError(f"task {self.dir_name!r} has no step {name!r}")


def _read_instruction(path: Path, root: Path) -> str:
    rel = path.relative_to(root).as_posix() if path.is_relative_to(root) else str(path)
    if not path.is_file():
        raise ValidationError("", f"missing {Path(rel).name} (every task needs one)", str(path))
    try:
        return strip_canary(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        raise ValidationError("", "instruction is not UTF-8 text", str(path)) from None


def _has_test_script(tests_dir: Path) -> bool:
    return (tests_dir / "test.sh").is_file()


def dockerfile_workdir(dockerfile: Path) -> str | None:
    """The working directory the final stage of ``dockerfile`` ends in, if it says.

    Relative ``WORKDIR``s resolve against the previous one; a ``FROM`` starts
    a new stage. Paths with variables (``$HOME``) cannot be known: None.
    """
    try:
        text = dockerfile.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    text = re.sub(r"\\\r?\n", " ", text)
    current: str | None = None
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        word, _, rest = line.partition(" ")
        op = word.upper()
        if op == "FROM":
            current = None
        elif op == "WORKDIR":
            value = rest.strip().strip("'\"")
            if not value or "$" in value:
                current = None
                continue
            base = (current or "/").rstrip("/")
            current = value if value.startswith("/") else f"{base}/{value}"
    if current is None:
        return None
    return _normalize_posix(current)


def _normalize_posix(path: str) -> str:
    """Normalize ``/a/./b/`` to ``/a/b`` without touching the host filesystem."""
    parts: list[str] = []
    for part in path.split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            if parts:
                parts.pop()
            continue
        parts.append(part)
    return "/" + "/".join(parts)


def _compose_workdir(compose: Path, task_dir: Path) -> str | None:
    """The ``main`` service's ``working_dir``, else its Dockerfile's, as compose merges
    the project: a ``main`` (or what it holds) brought by ``include`` or ``extends``
    counts. None when the file cannot be read (PyYAML missing, a file it names out of
    the task or unreadable: the sandbox refuses it with the reasons) or does not say."""
    try:
        sources = read_compose_sources(compose, task_dir=task_dir)
    except SandboxUnavailableError:  # no PyYAML: only the docker sandbox runs it
        return None
    if sources.problems or sources.unreadable or not sources.documents:
        return None
    top = next(iter(sources.documents))
    project, _ = merge_sources(top, sources)
    services = project.get("services")
    main = services.get("main") if isinstance(services, dict) else None
    if not isinstance(main, dict):
        return None
    working_dir = main.get("working_dir")
    if isinstance(working_dir, str) and working_dir.startswith("/"):
        return working_dir
    build = main.get("build")
    context, dockerfile = ".", "Dockerfile"
    if isinstance(build, str):
        context = build
    elif isinstance(build, dict):
        context = str(build.get("context", "."))
        dockerfile = str(build.get("dockerfile") or "Dockerfile")
    # a context from another file is absolute already (merge_sources)
    path = (top.parent / context / dockerfile).resolve()
    if path.is_relative_to(task_dir.resolve()) and path.is_file():
        return dockerfile_workdir(path)
    return None


def _has_files(directory: Path) -> bool:
    return directory.is_dir() and any(directory.iterdir())


def _environment(task_dir: Path, cfg: TaskConfig) -> tuple[str, str, str, list[str]]:
    """(workdir, where it came from, environment kind, notes)."""
    notes: list[str] = []
    env_dir = task_dir / "environment"
    dockerfile = env_dir / "Dockerfile"
    compose = next((env_dir / n for n in COMPOSE_FILES if (env_dir / n).is_file()), None)
    found: str | None = None
    where = "default"
    if compose is not None:
        kind = "compose"
        found = _compose_workdir(compose, task_dir)
        where = f"environment/{compose.name}" if found else where
        notes.append(
            f"environment/{compose.name} (docker compose) runs as a compose project per rollout "
            "with --sandbox docker, and on the local sandbox with every service a bubblewrap "
            "sandbox of its own on one private network per rollout (no daemon; what it cannot "
            "give is refused by name before the start); on the host userland on purpose "
            "(-S image=host) only its working directory is used"
        )
    elif dockerfile.is_file():
        kind = "dockerfile"
        found = dockerfile_workdir(dockerfile)
        where = "environment/Dockerfile" if found else where
        notes.append(
            "environment/Dockerfile is built once and run by --sandbox docker and by the local "
            "sandbox (on the image's exported root); on the host userland (-S image=host) its "
            "build steps do not run (the host's /usr is used) and only its WORKDIR is read"
        )
    elif cfg.environment.docker_image:
        kind = "image"
        notes.append(
            f"docker_image {cfg.environment.docker_image!r} is used by --sandbox docker and by "
            "the local sandbox; not on the host userland (-S image=host)"
            + ("; environment/ is copied into the working directory" if _has_files(env_dir) else "")
        )
    elif env_dir.is_dir():
        kind = "files"
    else:
        kind = "none"
    if cfg.environment.workdir:
        return cfg.environment.workdir, "task.toml [environment].workdir", kind, notes
    return found or DEFAULT_WORKDIR, where, kind, notes


def check_links_stay_inside(root: Path) -> None:
    """Refuse a task directory holding a symlink that resolves outside it.

    Every file of a task is read or copied somewhere (the instruction goes to
    the model, tests and solutions into the sandbox), so a link out of the
    directory (``instruction.md -> /etc/shadow``) would carry a host file
    along. The first such link raises a :class:`ValidationError` naming it;
    links that stay inside are fine.
    """
    root = root.resolve()
    for dirpath, dirnames, filenames in os.walk(root):
        here = Path(dirpath)
        for name in sorted([*dirnames, *filenames]):
            path = here / name
            if not path.is_symlink():
                continue
            try:
                target = path.resolve()
            except (RuntimeError, OSError):  # a loop of links
                raise ValidationError(
                    "", "is a symlink that cannot be resolved (a loop)", str(path)
                ) from None
            if not target.is_relative_to(root):
                raise ValidationError(
                    "",
                    f"is a symlink that resolves outside the task directory (to {target}); "
                    "task files must stay inside it",
                    str(path),
                )


def load_task_dir(task_dir: str | Path) -> HarborTaskSpec:
    """Load one task directory or raise a :class:`ValidationError` naming file and field.

    A symlink anywhere in the directory that resolves outside it is refused
    before anything is read (see :func:`check_links_stay_inside`).
    """
    root = Path(task_dir).resolve()
    config_path = root / "task.toml"
    source = str(config_path)
    check_links_stay_inside(root)
    if not config_path.is_file():
        raise ValidationError("", "missing task.toml", source)
    try:
        data = tomllib.loads(config_path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise ValidationError("", f"invalid TOML: {exc}", source) from None
    except UnicodeDecodeError:
        raise ValidationError("", "task.toml is not UTF-8 text", source) from None
    except RecursionError:  # the TOML parser recurses once per nested array or table
        raise ValidationError(
            "", f"nested more than {MAX_NESTING_DEPTH} levels deep", source
        ) from None
    check_nesting(data, "", source)
    cfg = parse_task_config(data, source=source)
    notes: list[str] = []
    if cfg.schema_version not in KNOWN_SCHEMA_VERSIONS:
        notes.append(
            f"schema_version {cfg.schema_version!r} is newer than the versions this plugin "
            f"knows ({', '.join(KNOWN_SCHEMA_VERSIONS)}); it loaded because every field is known"
        )
    env_cfg = cfg.environment
    if (
        env_cfg.network_mode is not None
        and env_cfg.allow_internet is not None
        and env_cfg.allow_internet != (env_cfg.network_mode == "public")
    ):
        notes.append(
            f"[environment].allow_internet = {str(env_cfg.allow_internet).lower()} is "
            f"ignored: network_mode = {env_cfg.network_mode!r} wins (Harbor's rule)"
        )
    if cfg.environment.os != "linux":
        notes.append(f"[environment].os = {cfg.environment.os!r} cannot run in a Linux sandbox")
    steps: list[HarborStepSpec] = []
    instruction = ""
    if cfg.steps:
        parts = []
        for i, step_cfg in enumerate(cfg.steps):
            step_dir = root / "steps" / step_cfg.name
            if not step_dir.is_dir():
                raise ValidationError(
                    f"steps[{i}].name",
                    f"no directory steps/{step_cfg.name}/ for this step",
                    source,
                )
            text = _read_instruction(step_dir / "instruction.md", root)
            if not (_has_test_script(step_dir / "tests") or _has_test_script(root / "tests")):
                raise ValidationError(
                    "",
                    f"missing tests/test.sh: step {step_cfg.name!r} has neither "
                    f"steps/{step_cfg.name}/tests/test.sh nor tests/test.sh",
                    str(root / "tests" / "test.sh"),
                )
            steps.append(HarborStepSpec(config=step_cfg, step_dir=step_dir, instruction=text))
            parts.append(f"## Step {i + 1}: {step_cfg.name}\n\n{text.strip()}\n")
        instruction = "\n".join(parts)
    else:
        instruction = _read_instruction(root / "instruction.md", root)
        if not _has_test_script(root / "tests"):
            raise ValidationError("", "missing tests/test.sh", str(root / "tests" / "test.sh"))
    workdir, where, kind, env_notes = _environment(root, cfg)
    if cfg.verifier.environment is not None:
        notes.append(
            "[verifier.environment] is not reproduced: a separate verifier runs in a fresh "
            "sandbox of the task's own environment"
        )
    return HarborTaskSpec(
        task_dir=root,
        config=cfg,
        instruction=instruction,
        steps=steps,
        workdir=workdir,
        workdir_source=where,
        environment_kind=kind,
        notes=notes + env_notes,
    )


@functools.lru_cache(maxsize=512)
def _cached(task_dir: str, mtime_ns: int) -> HarborTaskSpec:
    return load_task_dir(task_dir)


def load_task_dir_cached(task_dir: str | Path) -> HarborTaskSpec:
    """:func:`load_task_dir`, remembered per path until task.toml changes."""
    path = Path(task_dir).resolve()
    try:
        mtime = (path / "task.toml").stat().st_mtime_ns
    except OSError:
        mtime = -1
    return _cached(str(path), mtime)
