"""``HarborTaskset``: a task directory, a folder of them, or a registry dataset.

Task ids are ``<dataset or folder name>:<task directory name>``: the same
task gets the same id whether its folder or the task itself is loaded. A
malformed task is recorded in :attr:`HarborTaskset.problems` (file, field
and what was expected) and the rest still load; ``strict=True`` makes any
fatal, and when no task loads at all the error lists every problem.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

from agentkit import (
    AgentkitError,
    ExecutionHints,
    Task,
    TaskImage,
    TaskProblem,
    Taskset,
    ValidationError,
    check_no_reserved_keys,
)
from agentkit_harbor._errors import HarborTaskError
from agentkit_harbor._grading import DEFAULT_REWARD_RANGE, check_reward_range, harbor_rubric
from agentkit_harbor._isolation import check_isolation
from agentkit_harbor._registry import (
    default_cache_dir,
    fetch_dataset,
    load_registry,
    resolve_dataset,
)
from agentkit_harbor._rewards import check_main_reward
from agentkit_harbor._spec import COMPOSE_FILES, HarborTaskSpec, load_task_dir
from agentkit_harbor._steps import spec_for_task
from agentkit_harbor._trial import ISOLATION_KEY
from agentkit_harbor._verify import STEP_VERIFIER_TIMEOUT_SEC, task_env

__all__ = ["HarborTaskset"]


def _id_part(text: str) -> str:
    """Make ``text`` usable as a task-id part: no ':', whitespace or control characters."""
    cleaned = re.sub(r"[\s:\x00-\x1f\x7f]+", "-", text).strip("-")
    return cleaned or "tasks"


def _looks_like_task(path: Path) -> bool:
    return any((path / n).exists() for n in ("instruction.md", "tests", "solution", "steps"))


class HarborTaskset(Taskset):
    """Harbor tasks from a directory, a folder of directories, or a registry dataset.

    ``HarborTaskset("examples/harbor")``, ``HarborTaskset("tasks/hello")``, or
    ``HarborTaskset("terminal-bench@2.0", registry="registry.json")``. On the
    command line: ``harbor:PATH`` or ``harbor:NAME@VERSION -T registry=...``.

    ``main_reward`` picks the rollout's total reward when ``reward.json``
    has several keys and no ``reward`` key: ``mean`` (the default), ``min``,
    ``max`` or ``sum`` of them, or ``key:NAME`` for one key (always, even
    beside a ``reward`` key). Every key is recorded as a ``core.<key>``
    metric either way. ``reward_range`` (``"LOW,HIGH"``, ``"0,1"`` by
    default, or ``none``) bounds the total: one outside it is scored as a
    failure (``reward_out_of_range``).

    ``verifier_isolation`` says where each task's verifier runs: ``separate``
    (the default: a fresh sandbox of the task's image given only the agent's
    working directory and the task's ``[verifier] carry_paths``), ``fork`` (a
    fork of the agent's sandbox: its files, none of its processes) or
    ``shared`` (the agent's own sandbox, every process in it ended first). A
    task whose ``task.toml`` asks for ``environment_mode = "separate"`` is
    graded ``separate`` whatever is chosen. See ``docs/harbor.md``, "Where the
    verifier runs".
    """

    def __init__(
        self,
        path: str,
        *,
        strict: bool = False,
        registry: str | None = None,
        cache_dir: str | None = None,
        refresh: bool = False,
        taskset_id: str | None = None,
        main_reward: str = "mean",
        reward_range: str | None = DEFAULT_REWARD_RANGE,
        verifier_isolation: Literal["shared", "fork", "separate"] = "separate",
    ) -> None:
        self.strict = strict
        self.problems: list[TaskProblem] = []
        self.notes: dict[str, list[str]] = {}
        self._specs: dict[str, HarborTaskSpec] = {}
        self._tasks: dict[str, Task] = {}
        self._registry_info: dict[str, dict[str, Any]] = {}
        try:
            self.main_reward = check_main_reward(main_reward)
            check_reward_range(reward_range)
            self.verifier_isolation = check_isolation(verifier_isolation)
        except ValueError as exc:
            raise HarborTaskError(f"-T {exc}") from None
        self.reward_range = reward_range
        self.default_grading_spec = harbor_rubric(
            main_reward=self.main_reward, reward_range=reward_range
        )
        if not path.strip():
            raise HarborTaskError(
                "the harbor taskset needs a task directory, a folder of tasks, or a dataset "
                "NAME@VERSION with -T registry=...; 'harbor:' names none (try harbor:./tasks)"
            )
        if registry is not None:
            self.taskset_id = self._load_registry(path, registry, cache_dir, refresh, taskset_id)
        else:
            self.taskset_id = self._load_path(path, taskset_id)
        if self.problems and (self.strict or not self._tasks):
            listing = "\n".join(f"  - {p}" for p in self.problems)
            why = "strict=true" if self._tasks else "no task loaded"
            raise HarborTaskError(
                f"{len(self.problems)} Harbor task(s) failed to load ({why}):\n{listing}"
            )

    # -- loading -----------------------------------------------------------
    def _load_path(self, path: str, taskset_id: str | None) -> str:
        root = Path(path).expanduser()
        if not root.exists():
            hint = ""
            if "@" in path:
                hint = " (for a registry dataset, pass -T registry=PATH_OR_URL)"
            raise HarborTaskError(f"no such task directory or folder: {path}{hint}")
        if not root.is_dir():
            raise HarborTaskError(f"{path} is not a directory (expected a task or a folder)")
        root = root.resolve()
        if (root / "task.toml").is_file():
            tid = _id_part(taskset_id or root.parent.name)
            self._add(root, tid)
            return tid
        tid = _id_part(taskset_id or root.name)
        for child in sorted(root.iterdir()):
            if not child.is_dir() or child.name.startswith("."):
                continue
            if (child / "task.toml").is_file():
                self._add(child, tid)
            elif _looks_like_task(child):
                self._problem(str(child / "task.toml"), "missing task.toml")
        if not self._tasks and not self.problems:
            raise HarborTaskError(
                f"{path} holds no Harbor task (no task.toml in it or in its sub-directories)"
            )
        return tid

    def _load_registry(
        self, ref: str, registry: str, cache_dir: str | None, refresh: bool, taskset_id: str | None
    ) -> str:
        datasets, source, base = load_registry(registry)
        dataset = resolve_dataset(datasets, ref, source=source)
        cache = Path(cache_dir).expanduser() if cache_dir else default_cache_dir()
        tid = _id_part(taskset_id or dataset.name)
        for task, directory, commit in fetch_dataset(
            dataset, cache_dir=cache, base_dir=base, refresh=refresh
        ):
            info = {
                "registry": source,
                "dataset": dataset.name,
                "version": dataset.version,
                "git_url": task.git_url,
                "git_commit_id": commit or task.git_commit_id,
                "path": task.path,
            }
            self._add(directory, tid, item=task.name, registry_info=info)
        return tid

    def _problem(self, source: str, message: str) -> None:
        self.problems.append(TaskProblem(source, message))

    def _add(
        self,
        task_dir: Path,
        taskset_id: str,
        *,
        item: str | None = None,
        registry_info: dict[str, Any] | None = None,
    ) -> None:
        try:
            spec = load_task_dir(task_dir)
        except ValidationError as exc:
            field = f"{exc.path}: " if exc.path else ""
            self._problem(exc.source or str(task_dir), f"{field}{exc.reason}")
            return
        except AgentkitError as exc:
            self._problem(str(task_dir), str(exc))
            return
        task_id = Task.format_task_id(taskset_id, _id_part(item or spec.dir_name))
        if task_id in self._tasks:
            self._problem(
                str(spec.config_path),
                f"duplicate task id {task_id!r} (also {self._specs[task_id].task_dir})",
            )
            return
        notes = list(spec.notes)
        meta: dict[str, Any] = {
            "task_dir": str(spec.task_dir),
            "name": spec.display_name,
            "schema_version": spec.config.schema_version,
            "multi_step": spec.is_multi_step,
            "steps": [{"name": s.name, "instruction": s.instruction} for s in spec.steps],
            "workdir": spec.workdir,
            "environment": spec.environment_kind,
            ISOLATION_KEY: self.verifier_isolation,
        }
        if spec.config.task is not None:
            meta["description"] = spec.config.task.description
            meta["keywords"] = list(spec.config.task.keywords)
            meta["authors"] = [a.name for a in spec.config.task.authors]
            if spec.config.task.version is not None:
                meta["version"] = spec.config.task.version
        if spec.config.source is not None:
            meta["source"] = spec.config.source
        if registry_info is not None:
            meta["registry"] = registry_info
        if spec.config.metadata:
            try:
                check_no_reserved_keys(spec.config.metadata, "metadata")
                meta["metadata"] = dict(spec.config.metadata)
            except ValidationError as exc:
                notes.append(
                    f"[metadata] left out of the task's metadata: {exc.path}: {exc.reason}"
                )
        meta["notes"] = notes
        try:
            task = Task(task_id=task_id, input=spec.instruction, metadata={"harbor": meta})
        except ValidationError as exc:
            self._problem(str(spec.config_path), f"{exc.path}: {exc.reason}")
            return
        self._specs[task_id] = spec
        self._tasks[task_id] = task
        self.notes[task_id] = notes
        if registry_info is not None:
            self._registry_info[task_id] = registry_info

    # -- the Taskset contract ----------------------------------------------
    def __iter__(self) -> Iterator[Task]:
        return iter(self._tasks.values())

    def __len__(self) -> int:
        return len(self._tasks)

    def get_task(self, task_id: str) -> Task:
        """The task ``task_id``; ``KeyError`` lists what exists."""
        try:
            return self._tasks[task_id]
        except KeyError:
            known = ", ".join(list(self._tasks)[:10]) or "none"
            raise KeyError(
                f"no task {task_id!r} in Harbor taskset {self.taskset_id!r}; it has: {known}"
            ) from None

    def spec(self, task_id: str) -> HarborTaskSpec:
        """The loaded task directory behind ``task_id``."""
        self.get_task(task_id)
        return self._specs[task_id]

    def execution_hints(self, task: Task) -> ExecutionHints:
        """Working directory, env, network, resources and time budget of ``task``.

        The working directory is ``[environment].workdir``, else the
        Dockerfile's last ``WORKDIR``, else ``/app``. An ``environment/``
        without a Dockerfile or compose file is copied into it (Harbor's
        rule for a prebuilt ``docker_image``; also done without one). Network
        is on only for ``network_mode = "public"`` (or the legacy
        ``allow_internet = true``, or neither set: Harbor's default); the user
        must still allow it.
        """
        spec = self._specs.get(task.task_id)
        if spec is None:
            spec = spec_for_task(task)
        cfg = spec.config
        env_cfg = cfg.environment
        mode = cfg.agent.network_mode or env_cfg.effective_network_mode
        paths: dict[str, str] = {}
        if spec.uploads_environment_dir:
            paths[spec.workdir] = str(spec.environment_dir)
        return ExecutionHints(
            workdir=spec.workdir,
            paths=paths,
            env=task_env(spec),
            network=mode == "public",
            cpus=float(env_cfg.cpus) if env_cfg.cpus is not None else None,
            memory_mb=env_cfg.memory_mb,
            storage_mb=env_cfg.storage_mb,
            timeout_sec=_time_budget(spec),
            docs=(cfg.task.description or None) if cfg.task else None,
            image=task_image(spec),
            gpus=env_cfg.gpus,
        )

    def __repr__(self) -> str:
        return (
            f"HarborTaskset({self.taskset_id!r}, {len(self._tasks)} tasks, "
            f"{len(self.problems)} problems)"
        )


def task_image(spec: HarborTaskSpec) -> TaskImage | None:
    """The task's environment as an image: its Dockerfile, prebuilt image and compose file.

    Harbor's sources: ``environment/Dockerfile`` (built with ``environment/``
    as the context), ``[environment].docker_image``, and
    ``environment/docker-compose.yaml`` for sidecar services. None for a task
    with none of them (the sandbox's default userland).
    """
    env_cfg = spec.config.environment
    env_dir = spec.task_dir / "environment"
    dockerfile = env_dir / "Dockerfile"
    compose = next((env_dir / n for n in COMPOSE_FILES if (env_dir / n).is_file()), None)
    has_dockerfile = dockerfile.is_file()
    if not (has_dockerfile or env_cfg.docker_image or compose):
        return None
    return TaskImage(
        dockerfile=str(dockerfile) if has_dockerfile else None,
        context=str(env_dir) if has_dockerfile else None,
        image=env_cfg.docker_image,
        compose_file=str(compose) if compose else None,
        build_timeout_sec=env_cfg.build_timeout_sec,
    )


def _time_budget(spec: HarborTaskSpec) -> float | None:
    """Agent plus verifier time for the whole task (None when the agent has no timeout)."""
    cfg = spec.config
    if not spec.steps:
        if cfg.agent.timeout_sec is None:
            return None
        return cfg.agent.timeout_sec + cfg.verifier_timeout_sec
    total = 0.0
    for step in spec.steps:
        agent = step.config.agent.timeout_sec or cfg.agent.timeout_sec
        if agent is None:
            return None
        verifier = step.config.verifier.timeout_sec
        total += agent + (STEP_VERIFIER_TIMEOUT_SEC if verifier is None else verifier)
    return total
