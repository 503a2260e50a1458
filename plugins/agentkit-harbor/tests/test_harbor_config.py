"""task.toml in every schema version: every field, and the errors for bad ones."""

from __future__ import annotations

import tomllib

import pytest
from agentkit_harbor._config import parse_size_to_mb, parse_task_config

from agentkit import ValidationError

FULL_1_4 = """
schema_version = "1.4"
source = "https://example.invalid/source"
multi_step_reward_strategy = "final"
artifacts = [
  "/app/out.txt",
  { source = "/app/logs", destination = "logs", exclude = ["*.tmp"], service = "main" },
]

[task]
name = "org/full-task"
version = "2.1.0"
description = "Every field"
authors = [{ name = "Ada", email = "ada@example.invalid" }, { name = "Grace" }]
keywords = ["a", "b"]

[metadata]
difficulty = "hard"
nested = { x = 1 }

[verifier]
timeout_sec = 45
env = { TOKEN = "${HOST_TOKEN:-none}", PLAIN = "x" }
user = "root"
network_mode = "allowlist"
allowed_hosts = ["pypi.org"]

[[verifier.collect]]
command = "cp /app/state /logs/artifacts/"
timeout_sec = 10
user = 0

[agent]
timeout_sec = 120.5
user = 1000
network_mode = "no-network"

[solution]
env = { SEED_FILE = "/app/seed" }

[environment]
build_timeout_sec = 300
docker_image = "org/image:tag"
os = "linux"
cpus = 2
memory_mb = 2048
storage_mb = 4096
gpus = 0
gpu_types = ["H100"]
network_mode = "no-network"
env = { HOME_DIR = "${HOME:-/root}" }
skills_dir = "/skills"
workdir = "/workspace"

[environment.tpu]
type = "v6e"
topology = "2x4"

[[environment.mcp_servers]]
name = "tools"
transport = "streamable-http"
url = "http://tools:8000/mcp"

[environment.healthcheck]
command = "true"
interval_sec = 1
timeout_sec = 2
start_period_sec = 0.5
start_interval_sec = 0.1
retries = 5

[[steps]]
name = "one"
min_reward = 1.0
artifacts = ["/app/one.txt"]
healthcheck = { command = "test -d /app" }

[steps.agent]
timeout_sec = 10
user = "agent"

[steps.verifier]
timeout_sec = 5
env = { STEP = "1" }
user = "root"

[[steps]]
name = "two"
min_reward = { correctness = 0.8, style = 0.5 }
"""


def parse(text: str):
    return parse_task_config(tomllib.loads(text), source="task.toml")


def test_every_field_of_schema_1_4() -> None:
    cfg = parse(FULL_1_4)
    assert cfg.schema_version == "1.4"
    assert cfg.source == "https://example.invalid/source"
    assert cfg.reward_strategy == "final"
    assert [a.source for a in cfg.artifacts] == ["/app/out.txt", "/app/logs"]
    assert cfg.artifacts[1].destination == "logs" and cfg.artifacts[1].exclude == ["*.tmp"]
    assert cfg.artifacts[1].service == "main"
    assert cfg.task is not None
    assert (cfg.task.name, cfg.task.version, cfg.task.description) == (
        "org/full-task",
        "2.1.0",
        "Every field",
    )
    assert [(a.name, a.email) for a in cfg.task.authors] == [
        ("Ada", "ada@example.invalid"),
        ("Grace", None),
    ]
    assert cfg.task.keywords == ["a", "b"]
    assert cfg.metadata == {"difficulty": "hard", "nested": {"x": 1}}
    assert cfg.verifier.timeout_sec == 45.0 and cfg.verifier_timeout_sec == 45.0
    assert cfg.verifier.env == {"TOKEN": "${HOST_TOKEN:-none}", "PLAIN": "x"}
    assert cfg.verifier.user == "root"
    assert cfg.verifier.allowed_hosts == ["pypi.org"]
    assert cfg.verifier.collect[0].command.startswith("cp") and cfg.verifier.collect[0].user == 0
    assert (cfg.agent.timeout_sec, cfg.agent.user, cfg.agent.network_mode) == (
        120.5,
        1000,
        "no-network",
    )
    assert cfg.solution.env == {"SEED_FILE": "/app/seed"}
    env = cfg.environment
    assert env.build_timeout_sec == 300.0 and env.docker_image == "org/image:tag"
    assert (env.cpus, env.memory_mb, env.storage_mb, env.gpus) == (2, 2048, 4096, 0)
    assert env.gpu_types == ["H100"] and env.tpu is not None and env.tpu.topology == "2x4"
    assert env.mcp_servers[0].transport == "streamable-http"
    assert env.env == {"HOME_DIR": "${HOME:-/root}"}
    assert env.skills_dir == "/skills" and env.workdir == "/workspace"
    assert env.healthcheck is not None and env.healthcheck.retries == 5
    assert env.effective_network_mode == "no-network"
    one, two = cfg.steps
    assert one.name == "one" and one.min_reward == 1.0
    assert one.agent.timeout_sec == 10.0 and one.agent.user == "agent"
    assert one.verifier.timeout_sec == 5.0 and one.verifier.env == {"STEP": "1"}
    assert one.healthcheck is not None and one.healthcheck.command == "test -d /app"
    assert [a.source for a in one.artifacts] == ["/app/one.txt"]
    assert two.min_reward == {"correctness": 0.8, "style": 0.5}
    assert two.verifier.timeout_sec is None  # falls back to the task's
    assert cfg.is_multi_step


def test_legacy_1_0_version_memory_storage_and_allow_internet() -> None:
    cfg = parse(
        """
        version = "1.0"
        [metadata]
        author_name = "x"
        [agent]
        timeout_sec = 600.0
        [environment]
        memory = "4G"
        storage = "512M"
        allow_internet = false
        """
    )
    assert cfg.schema_version == "1.0"
    assert cfg.environment.memory_mb == 4096 and cfg.environment.storage_mb == 512
    assert cfg.environment.effective_network_mode == "no-network"
    assert not cfg.is_multi_step and cfg.reward_strategy == "mean"
    assert cfg.verifier_timeout_sec == 600.0  # Harbor's default


def test_defaults_network_public_and_allow_internet_true() -> None:
    assert parse("").environment.effective_network_mode == "public"
    cfg = parse('schema_version = "1.1"\n[environment]\nallow_internet = true')
    assert cfg.environment.effective_network_mode == "public"


@pytest.mark.parametrize(
    ("lines", "mode"),
    [
        # Harbor: an explicit network_mode wins over the deprecated allow_internet.
        ('network_mode = "public"\nallow_internet = false', "public"),
        # A task.toml dumped by Harbor with allow_internet's default (true) beside the mode.
        ('network_mode = "no-network"\nallow_internet = true\nallowed_hosts = []', "no-network"),
        ("allow_internet = true\nallowed_hosts = []", "public"),
    ],
)
def test_network_mode_wins_over_allow_internet(lines: str, mode: str) -> None:
    assert parse(f"[environment]\n{lines}").environment.effective_network_mode == mode


def test_os_is_case_insensitive_as_in_harbor() -> None:
    assert parse('[environment]\nos = "Linux"').environment.os == "linux"
    assert parse('[verifier.environment]\nos = "WINDOWS"').verifier.environment.os == "windows"  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("version_line", "expected"),
    [
        ('version = "1.0"', "1.0"),
        ('schema_version = "1.1"', "1.1"),
        ('schema_version = "1.2"', "1.2"),
        ('schema_version = "1.3"', "1.3"),
        ('schema_version = "1.4"', "1.4"),
        ('schema_version = "1.3"\nversion = "1.0"', "1.3"),  # schema_version wins
    ],
)
def test_schema_versions(version_line: str, expected: str) -> None:
    assert parse(version_line).schema_version == expected


@pytest.mark.parametrize(
    ("text", "field", "expect"),
    [
        ("[environment]\ncpu = 2", "environment.cpu", "unknown key"),
        ("bogus = 1", "bogus", "unknown key"),
        ('[environment]\ncpus = "2"', "environment.cpus", "expected int"),
        ('[agent]\ntimeout_sec = "60"', "agent.timeout_sec", "expected float"),
        ("[verifier]\nenv = { A = 1 }", "verifier.env.A", "expected a string"),
        ("[verifier]\nuser = 1.5", "verifier.user", "expected str | int"),
        ('multi_step_reward_strategy = "max"', "multi_step_reward_strategy", "'mean'|'final'"),
        ('[environment]\nnetwork_mode = "offline"', "environment.network_mode", "no-network"),
        ('[environment]\nos = "macos"', "environment.os", "'windows'"),
        ('[task]\nname = "no-org"', "task.name", "org/name"),
        ('[task]\ndescription = "x"', "task.name", "missing"),
        ('[environment]\nmemory = "4 parsecs"', "environment.memory", "invalid size"),
        ("[environment]\nmemory = 4", "environment.memory", "size string"),
        ('[environment]\nmemory = "1G"\nmemory_mb = 512', "environment.memory", "conflicts"),
        ('[environment]\nallowed_hosts = ["a.com"]', "environment.allowed_hosts", "allowlist"),
        ("[environment]\ncpus = -1", "environment.cpus", "negative"),
        ('[environment.tpu]\ntype = "v6e"\ntopology = "big"', "environment.tpu.topology", "NxM"),
        ("[environment.healthcheck]\nretries = 1", "environment.healthcheck.command", "missing"),
        (
            '[environment.healthcheck]\ncommand = "true"\nretries = -1',
            "environment.healthcheck.retries",
            "0 or more",
        ),
        (
            '[environment.healthcheck]\ncommand = "true"\ninterval_sec = -1.0',
            "environment.healthcheck.interval_sec",
            "0 or more",
        ),
        (
            '[environment.healthcheck]\ncommand = "true"\ntimeout_sec = 0.0',
            "environment.healthcheck.timeout_sec",
            "positive",
        ),
        (
            '[[steps]]\nname = "a"\n[steps.healthcheck]\ncommand = "true"\nretries = -3',
            "steps[0].healthcheck.retries",
            "0 or more",
        ),
        ('[environment]\nworkdir = "app"', "environment.workdir", "absolute path"),
        ('[environment]\nworkdir = "./work"', "environment.workdir", "absolute path"),
        (
            '[verifier.environment]\nworkdir = "rel"',
            "verifier.environment.workdir",
            "absolute path",
        ),
        ("[agent]\ntimeout_sec = 0", "agent.timeout_sec", "positive"),
        ("[verifier]\ntimeout_sec = -5", "verifier.timeout_sec", "positive"),
        (
            '[verifier]\nenvironment_mode = "shared"\n[verifier.environment]\ncpus = 1',
            "verifier.environment_mode",
            "incompatible",
        ),
        ("[[steps]]\nname = 'a'\nmin_reward = 'high'", "steps[0].min_reward", "number"),
        ("[[steps]]\nname = 'a'\nmin_reward = { r = 'x' }", "steps[0].min_reward.r", "number"),
        ("[[steps]]\nname = 'a'\nextra = 1", "steps[0].extra", "unknown key"),
        ("[[steps]]\nname = 'a'\n[[steps]]\nname = 'a'", "steps[1].name", "duplicate"),
        ("[[steps]]\nname = '../x'", "steps[0].name", "directory name"),
        ("[[steps]]\nmin_reward = 1", "steps[0].name", "missing"),
        ("artifacts = [1]", "artifacts[0]", "path string"),
        ('artifacts = ["/app/../etc"]', "artifacts[0].source", ".."),
        (
            'artifacts = [{ source = "/a", destination = "/abs" }]',
            "artifacts[0].destination",
            "relative",
        ),
        (
            'artifacts = [{ source = "/app/m.json", destination = "manifest.json" }]',
            "artifacts[0].destination",
            "reserved",
        ),
        ("schema_version = 1.4", "schema_version", "expected a string"),
        ("[solution]\nenv = { A = true }", "solution.env.A", "expected a string"),
    ],
)
def test_bad_fields_name_file_and_field(text: str, field: str, expect: str) -> None:
    with pytest.raises(ValidationError) as info:
        parse(text)
    err = info.value
    assert err.source == "task.toml"
    assert err.path == field, str(err)
    assert expect in err.reason, str(err)


@pytest.mark.parametrize(
    ("text", "mb"), [("4G", 4096), ("1.5G", 1536), ("512M", 512), ("2048K", 2), (" 2g ", 2048)]
)
def test_parse_size_to_mb(text: str, mb: int) -> None:
    assert parse_size_to_mb(text) == mb


def test_verifier_environment_storage_migrated_too() -> None:
    cfg = parse(
        '[verifier.environment]\nmemory = "2G"\n[[steps]]\nname = "a"\n'
        '[steps.verifier.environment]\nstorage = "1G"'
    )
    assert cfg.verifier.environment is not None and cfg.verifier.environment.memory_mb == 2048
    assert cfg.steps[0].verifier.environment is not None
    assert cfg.steps[0].verifier.environment.storage_mb == 1024
