"""The ``task.toml`` schema, parsed strictly with agentkit's converter.

One model covers every schema version Harbor has shipped: the legacy
``version = "1.0"`` files (``memory = "2G"``, ``storage = "4G"``), and
``schema_version`` 1.1 (``[task]`` package info, ``[[steps]]``), 1.2
(``[environment].os``), 1.3 (``network_mode``, ``allowed_hosts``) and 1.4
(``[task].version``, sidecar artifacts, ``[[verifier.collect]]``). Harbor's
own models ignore unknown keys; here an unknown key is an error that names
the file and the field, so a typo never silently changes a task.
"""

from __future__ import annotations

import math
import re
from pathlib import PurePosixPath
from typing import Any, Literal

import attrs

from agentkit import ValidationError
from agentkit.validation import structure

__all__ = [
    "KNOWN_SCHEMA_VERSIONS",
    "AgentConfig",
    "ArtifactConfig",
    "Author",
    "EnvironmentConfig",
    "HealthcheckConfig",
    "MCPServerConfig",
    "PackageInfo",
    "SolutionConfig",
    "StepConfig",
    "TaskConfig",
    "TpuSpec",
    "VerifierCollectConfig",
    "VerifierConfig",
    "parse_size_to_mb",
    "parse_task_config",
]

#: Schema versions this plugin knows; newer ones load with a note.
KNOWN_SCHEMA_VERSIONS: tuple[str, ...] = ("1.0", "1.1", "1.2", "1.3", "1.4")

NetworkMode = Literal["public", "no-network", "allowlist"]
_ORG_NAME = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9._-]*/[a-zA-Z0-9][a-zA-Z0-9._-]*$")
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([GMK])\s*$", re.IGNORECASE)


@attrs.frozen(kw_only=True)
class Author:
    """One entry of ``[task].authors``."""

    name: str
    email: str | None = None


@attrs.frozen(kw_only=True)
class PackageInfo:
    """``[task]``: the package identity (``org/name``) and its description."""

    name: str
    version: str | None = None
    description: str = ""
    authors: list[Author] = attrs.field(factory=list)
    keywords: list[str] = attrs.field(factory=list)


@attrs.frozen(kw_only=True)
class HealthcheckConfig:
    """A readiness check, with Docker HEALTHCHECK semantics."""

    command: str
    interval_sec: float = 5.0
    timeout_sec: float = 30.0
    start_period_sec: float = 0.0
    start_interval_sec: float = 5.0
    retries: int = 3


@attrs.frozen(kw_only=True)
class TpuSpec:
    """``[environment.tpu]``: accepted for compatibility, never provided locally."""

    type: str
    topology: str


@attrs.frozen(kw_only=True)
class MCPServerConfig:
    """``[[environment.mcp_servers]]``: an MCP server offered to the agent."""

    name: str
    transport: Literal["sse", "streamable-http", "stdio", "http"] = "sse"
    url: str | None = None
    command: str | None = None
    args: list[str] = attrs.field(factory=list)


@attrs.frozen(kw_only=True)
class EnvironmentConfig:
    """``[environment]``: image, resources, network, env and working directory."""

    build_timeout_sec: float = 600.0
    docker_image: str | None = None
    os: Literal["linux", "windows"] = "linux"
    cpus: int | None = None
    memory_mb: int | None = None
    storage_mb: int | None = None
    gpus: int | None = None
    gpu_types: list[str] | None = None
    tpu: TpuSpec | None = None
    network_mode: NetworkMode | None = None
    allowed_hosts: list[str] | None = None
    allow_internet: bool | None = None
    mcp_servers: list[MCPServerConfig] = attrs.field(factory=list)
    env: dict[str, str] = attrs.field(factory=dict)
    skills_dir: str | None = None
    healthcheck: HealthcheckConfig | None = None
    workdir: str | None = None

    @property
    def effective_network_mode(self) -> str:
        """``network_mode``, else legacy ``allow_internet``, else Harbor's default ``public``."""
        if self.network_mode is not None:
            return self.network_mode
        if self.allow_internet is not None:
            return "public" if self.allow_internet else "no-network"
        return "public"


@attrs.frozen(kw_only=True)
class VerifierCollectConfig:
    """``[[verifier.collect]]``: a snapshot command run before artifact collection."""

    command: str
    service: str = "main"
    timeout_sec: float = 60.0
    user: str | int | None = None


@attrs.frozen(kw_only=True)
class VerifierConfig:
    """``[verifier]`` (and ``[steps.verifier]``): how ``tests/test.sh`` runs.

    ``timeout_sec`` is None when the file does not set it, so a step's
    verifier falls back to the task's (whose default is 600 s).
    """

    timeout_sec: float | None = None
    env: dict[str, str] = attrs.field(factory=dict)
    user: str | int | None = None
    environment_mode: Literal["shared", "separate"] | None = None
    #: agentkit's own: paths (beside the working directory) whose files a separate
    #: verifier is given from the agent's sandbox (Harbor ignores the key).
    carry_paths: list[str] = attrs.field(factory=list)
    environment: EnvironmentConfig | None = None
    network_mode: NetworkMode | None = None
    allowed_hosts: list[str] | None = None
    collect: list[VerifierCollectConfig] = attrs.field(factory=list)


@attrs.frozen(kw_only=True)
class AgentConfig:
    """``[agent]`` (and ``[steps.agent]``): the agent's timeout, user and network override."""

    timeout_sec: float | None = None
    user: str | int | None = None
    network_mode: NetworkMode | None = None
    allowed_hosts: list[str] | None = None


@attrs.frozen(kw_only=True)
class SolutionConfig:
    """``[solution]``: the environment of ``solution/solve.sh``."""

    env: dict[str, str] = attrs.field(factory=dict)


@attrs.frozen(kw_only=True)
class ArtifactConfig:
    """One artifact: a path in the sandbox copied into the rollout directory."""

    source: str
    destination: str | None = None
    exclude: list[str] = attrs.field(factory=list)
    service: str | None = None


@attrs.frozen(kw_only=True)
class StepConfig:
    """One ``[[steps]]`` entry of a multi-step task."""

    name: str
    agent: AgentConfig = attrs.field(factory=AgentConfig)
    verifier: VerifierConfig = attrs.field(factory=VerifierConfig)
    min_reward: float | dict[str, float] | None = None
    healthcheck: HealthcheckConfig | None = None
    artifacts: list[ArtifactConfig] = attrs.field(factory=list)


@attrs.frozen(kw_only=True)
class TaskConfig:
    """A whole ``task.toml``."""

    schema_version: str = "1.0"
    task: PackageInfo | None = None
    metadata: dict[str, Any] = attrs.field(factory=dict)
    verifier: VerifierConfig = attrs.field(factory=VerifierConfig)
    agent: AgentConfig = attrs.field(factory=AgentConfig)
    environment: EnvironmentConfig = attrs.field(factory=EnvironmentConfig)
    solution: SolutionConfig = attrs.field(factory=SolutionConfig)
    source: str | None = None
    multi_step_reward_strategy: Literal["mean", "final"] | None = None
    steps: list[StepConfig] = attrs.field(factory=list)
    artifacts: list[ArtifactConfig] = attrs.field(factory=list)

    @property
    def is_multi_step(self) -> bool:
        """True when the task declares ``[[steps]]``."""
        return bool(self.steps)

    @property
    def verifier_timeout_sec(self) -> float:
        """The task-level verifier timeout (Harbor's default: 600 s)."""
        return 600.0 if self.verifier.timeout_sec is None else self.verifier.timeout_sec

    @property
    def reward_strategy(self) -> str:
        """``multi_step_reward_strategy``, ``mean`` when unset (Harbor's default)."""
        return self.multi_step_reward_strategy or "mean"


# ---------------------------------------------------------------------------
# Parsing


def parse_size_to_mb(text: str) -> int:
    """``"4G"`` → 4096, ``"512M"`` → 512, ``"2048K"`` → 2 (Harbor's legacy sizes)."""
    m = _SIZE.match(text)
    if not m:
        raise ValueError(f"invalid size {text!r}; expected a number and G, M or K (like '4G')")
    number, unit = float(m.group(1)), m.group(2).upper()
    if unit == "G":
        return int(number * 1024)
    if unit == "M":
        return int(number)
    return int(number / 1024)


def _migrate_environment(env: Any, path: str, source: str) -> Any:
    """Map the deprecated ``memory``/``storage`` strings onto ``*_mb``; lowercase ``os``."""
    if not isinstance(env, dict):
        return env
    env = dict(env)
    if isinstance(env.get("os"), str):
        env["os"] = env["os"].lower()  # Harbor accepts "Linux", "WINDOWS"
    for old, new in (("memory", "memory_mb"), ("storage", "storage_mb")):
        if old not in env:
            continue
        value = env.pop(old)
        if value is None:
            continue
        if not isinstance(value, str):
            raise ValidationError(
                f"{path}.{old}", f"expected a size string like '4G', got {value!r}", source
            )
        try:
            mb = parse_size_to_mb(value)
        except ValueError as exc:
            raise ValidationError(f"{path}.{old}", str(exc), source) from None
        if new in env and env[new] != mb:
            raise ValidationError(
                f"{path}.{old}",
                f"conflicts with {new} = {env[new]!r} ({value!r} is {mb} MB)",
                source,
            )
        env.setdefault(new, mb)
    return env


def _migrate_verifier(ver: Any, path: str, source: str) -> Any:
    if isinstance(ver, dict) and "environment" in ver:
        ver = dict(ver)
        ver["environment"] = _migrate_environment(ver["environment"], f"{path}.environment", source)
    return ver


def _normalize_artifacts(items: Any, path: str, source: str) -> list[Any]:
    if not isinstance(items, list):
        raise ValidationError(path, f"expected a list, got {type(items).__name__}", source)
    out: list[Any] = []
    for i, item in enumerate(items):
        if isinstance(item, str):
            out.append({"source": item})
        elif isinstance(item, dict):
            out.append(item)
        else:
            raise ValidationError(
                f"{path}[{i}]",
                f"expected a path string or a table with 'source', got {item!r}",
                source,
            )
    return out


def _preprocess(data: dict[str, Any], source: str) -> dict[str, Any]:
    data = dict(data)
    if "version" in data:
        legacy = data.pop("version")
        data.setdefault("schema_version", legacy)
    if "environment" in data:
        data["environment"] = _migrate_environment(data["environment"], "environment", source)
    if "verifier" in data:
        data["verifier"] = _migrate_verifier(data["verifier"], "verifier", source)
    if "artifacts" in data:
        data["artifacts"] = _normalize_artifacts(data["artifacts"], "artifacts", source)
    steps = data.get("steps")
    if isinstance(steps, list):
        new_steps = []
        for i, step in enumerate(steps):
            if isinstance(step, dict):
                step = dict(step)
                if "verifier" in step:
                    step["verifier"] = _migrate_verifier(
                        step["verifier"], f"steps[{i}].verifier", source
                    )
                if "artifacts" in step:
                    step["artifacts"] = _normalize_artifacts(
                        step["artifacts"], f"steps[{i}].artifacts", source
                    )
                if "min_reward" in step:
                    step["min_reward"] = _check_min_reward(
                        step["min_reward"], f"steps[{i}].min_reward", source
                    )
            new_steps.append(step)
        data["steps"] = new_steps
    return data


def _check_min_reward(value: Any, path: str, source: str) -> Any:
    def number(v: Any, where: str) -> float:
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise ValidationError(where, f"expected a number, got {v!r}", source)
        return float(v)

    if value is None:
        return None
    if isinstance(value, dict):
        return {str(k): number(v, f"{path}.{k}") for k, v in value.items()}
    return number(value, path)


def _validate(cfg: TaskConfig, source: str) -> None:
    """Checks Harbor makes beyond the types (in this order: the first error is raised)."""
    _check_identity(cfg, source)
    envs, verifiers = _environments_and_verifiers(cfg)
    _check_environments(envs, source)
    _check_verifiers(verifiers, source)
    healthchecks = [("environment.healthcheck", cfg.environment.healthcheck)] + [
        (f"steps[{i}].healthcheck", s.healthcheck) for i, s in enumerate(cfg.steps or [])
    ]
    for path, hc in healthchecks:
        if hc is not None:
            _check_healthcheck(hc, path, source)
    for path, env in envs:
        if env.workdir is not None and not env.workdir.startswith("/"):
            raise ValidationError(
                f"{path}.workdir",
                f"must be an absolute path like '/app', got {env.workdir!r}",
                source,
            )
    _check_agents_and_steps(cfg, source)
    _check_artifacts(cfg, source)


def _check_identity(cfg: TaskConfig, source: str) -> None:
    """``schema_version`` and ``[task]``'s name and version."""
    if not isinstance(cfg.schema_version, str) or not cfg.schema_version.strip():
        raise ValidationError("schema_version", "expected a version string like '1.4'", source)
    if cfg.task is not None:
        name = cfg.task.name
        if not _ORG_NAME.match(name) or ".." in name:
            raise ValidationError(
                "task.name",
                f"expected 'org/name' (letters, digits, '.', '_', '-'), got {name!r}",
                source,
            )
        if cfg.task.version is not None and not cfg.task.version:
            raise ValidationError("task.version", "must not be empty", source)


def _environments_and_verifiers(
    cfg: TaskConfig,
) -> tuple[list[tuple[str, EnvironmentConfig]], list[tuple[str, VerifierConfig]]]:
    """Every environment table and every verifier table of the task, with its path."""
    envs = [("environment", cfg.environment)]
    if cfg.verifier.environment is not None:
        envs.append(("verifier.environment", cfg.verifier.environment))
    verifiers = [("verifier", cfg.verifier)]
    for i, step in enumerate(cfg.steps or []):
        verifiers.append((f"steps[{i}].verifier", step.verifier))
        if step.verifier.environment is not None:
            envs.append((f"steps[{i}].verifier.environment", step.verifier.environment))
    return envs, verifiers


def _check_environments(envs: list[tuple[str, EnvironmentConfig]], source: str) -> None:
    """Resources, the allowlist's mode and a TPU's topology of each environment table."""
    for path, env in envs:
        for fld in ("cpus", "memory_mb", "storage_mb", "gpus"):
            value = getattr(env, fld)
            if value is not None and value < 0:
                raise ValidationError(f"{path}.{fld}", f"must not be negative, got {value}", source)
        # An explicit network_mode wins over the deprecated allow_internet (Harbor's
        # rule): task.toml files dumped by Harbor carry allow_internet's default beside it.
        if env.allowed_hosts and env.network_mode != "allowlist":
            raise ValidationError(
                f"{path}.allowed_hosts", "only valid with network_mode = 'allowlist'", source
            )
        if env.tpu is not None and not re.match(r"^[1-9]\d*(x[1-9]\d*)+$", env.tpu.topology):
            raise ValidationError(
                f"{path}.tpu.topology",
                f"expected 'NxM' like '2x4', got {env.tpu.topology!r}",
                source,
            )


def _check_verifiers(verifiers: list[tuple[str, VerifierConfig]], source: str) -> None:
    """Timeouts, carried paths and the environment mode of each verifier table."""
    for path, ver in verifiers:
        if ver.timeout_sec is not None and not (
            math.isfinite(ver.timeout_sec) and ver.timeout_sec > 0
        ):
            raise ValidationError(f"{path}.timeout_sec", "must be a positive number", source)
        for j, carried in enumerate(ver.carry_paths):
            parts = PurePosixPath(carried).parts
            if not carried.startswith("/") or ".." in parts or len(parts) < 2:
                raise ValidationError(
                    f"{path}.carry_paths[{j}]",
                    f"expected an absolute path below / without '..', like '/opt/tool', "
                    f"got {carried!r}",
                    source,
                )
        if ver.environment_mode == "shared" and ver.environment is not None:
            raise ValidationError(
                f"{path}.environment_mode",
                "'shared' is incompatible with a [verifier.environment] table",
                source,
            )


def _check_agents_and_steps(cfg: TaskConfig, source: str) -> None:
    """Each agent table's timeout; each step's name (a directory under steps/, unique)."""
    agents = [("agent", cfg.agent)] + [
        (f"steps[{i}].agent", s.agent) for i, s in enumerate(cfg.steps or [])
    ]
    for path, agent in agents:
        if agent.timeout_sec is not None and not (
            math.isfinite(agent.timeout_sec) and agent.timeout_sec > 0
        ):
            raise ValidationError(f"{path}.timeout_sec", "must be a positive number", source)
    names: set[str] = set()
    for i, step in enumerate(cfg.steps or []):
        if not step.name or "/" in step.name or step.name in (".", ".."):
            raise ValidationError(
                f"steps[{i}].name",
                f"expected a directory name under steps/, got {step.name!r}",
                source,
            )
        if step.name in names:
            raise ValidationError(f"steps[{i}].name", f"duplicate step name {step.name!r}", source)
        names.add(step.name)


def _check_artifacts(cfg: TaskConfig, source: str) -> None:
    """Each artifact's source and destination: relative, without '..', not the manifest."""
    all_artifacts = [("artifacts", cfg.artifacts)] + [
        (f"steps[{i}].artifacts", s.artifacts) for i, s in enumerate(cfg.steps or [])
    ]
    for path, items in all_artifacts:
        for j, art in enumerate(items):
            if ".." in PurePosixPath(art.source).parts:
                raise ValidationError(f"{path}[{j}].source", "must not contain '..'", source)
            dest = art.destination
            if dest:
                p = PurePosixPath(dest)
                if p.is_absolute() or ".." in p.parts or "\\" in dest:
                    raise ValidationError(
                        f"{path}[{j}].destination",
                        "must be a relative path without '..' or backslashes",
                        source,
                    )
                if dest.rstrip("/") == "manifest.json":
                    raise ValidationError(
                        f"{path}[{j}].destination",
                        "'manifest.json' is reserved for the collection manifest",
                        source,
                    )


def _check_healthcheck(hc: HealthcheckConfig, path: str, source: str) -> None:
    if hc.retries < 0:
        raise ValidationError(
            f"{path}.retries", f"must be 0 or more (Docker's meaning), got {hc.retries}", source
        )
    for fld in ("interval_sec", "start_period_sec", "start_interval_sec"):
        value = getattr(hc, fld)
        if not (math.isfinite(value) and value >= 0):
            raise ValidationError(f"{path}.{fld}", f"must be 0 or more, got {value}", source)
    if not (math.isfinite(hc.timeout_sec) and hc.timeout_sec > 0):
        raise ValidationError(
            f"{path}.timeout_sec", f"must be a positive number, got {hc.timeout_sec}", source
        )


def parse_task_config(data: Any, *, source: str) -> TaskConfig:
    """Build a :class:`TaskConfig` from parsed TOML, or raise one :class:`ValidationError`."""
    if not isinstance(data, dict):
        raise ValidationError("", "expected a TOML table", source)
    cfg = structure(_preprocess(data, source), TaskConfig, source=source)
    _validate(cfg, source)
    return cfg
