"""Loading task directories and folders: ids, problems, strictness, hints, env templates."""

from __future__ import annotations

from pathlib import Path

import pytest
from agentkit_harbor import (
    HarborTaskError,
    HarborTaskset,
    OracleHarness,
    load_task_dir,
    resolve_env,
)
from agentkit_harbor._spec import dockerfile_workdir, strip_canary
from harbor_helpers import EXAMPLES, needs_bwrap

from agentkit import AgentEnv, ExecutionHints, Task, TaskImage, ValidationError
from agentkit import registry as agentkit_registry

GOOD = 'schema_version = "1.4"\n[environment]\nworkdir = "/app"\n'


def test_examples_load_with_ids_and_instructions() -> None:
    ts = HarborTaskset(str(EXAMPLES))
    assert ts.taskset_id == "harbor"
    assert ts.problems == []
    ids = sorted(t.task_id for t in ts)
    assert ids == [
        "harbor:build-a-tool",
        "harbor:hello-world",
        "harbor:too-slow",
        "harbor:word-stats",
        "harbor:wrong-on-purpose",
    ]
    hello = ts.get_task("harbor:hello-world")
    assert hello.input == "Create a file `/app/hello.txt` whose only line is `Hello, world!`.\n"
    meta = hello.metadata["harbor"]
    assert meta["name"] == "agentkit/hello-world" and meta["schema_version"] == "1.4"
    assert meta["version"] == "1.0.0" and meta["keywords"] == ["trivial", "files"]
    assert meta["metadata"] == {"difficulty": "easy", "category": "files"}
    assert meta["workdir"] == "/app" and meta["environment"] == "dockerfile"
    assert any("host userland" in n for n in meta["notes"])
    multi = ts.get_task("harbor:build-a-tool")
    steps = multi.metadata["harbor"]["steps"]
    assert [s["name"] for s in steps] == ["scaffold", "implement", "document"]
    assert "## Step 1: scaffold" in str(multi.input) and "## Step 3: document" in str(multi.input)
    with pytest.raises(KeyError, match="it has: harbor:build-a-tool"):
        ts.get_task("harbor:nope")


def test_single_task_dir_gets_the_same_id_as_in_its_folder() -> None:
    ts = HarborTaskset(str(EXAMPLES / "word-stats"))
    assert [t.task_id for t in ts] == ["harbor:word-stats"]
    assert ts.taskset_id == "harbor"


def test_taskset_id_option_and_sanitizing(tmp_path: Path, make_task) -> None:
    make_task("a", GOOD)
    ts = HarborTaskset(str(tmp_path / "tasks"), taskset_id="custom")
    assert [t.task_id for t in ts] == ["custom:a"]
    spaced = tmp_path / "with space"
    (tmp_path / "tasks").rename(spaced)
    assert [t.task_id for t in HarborTaskset(str(spaced))] == ["with-space:a"]


def test_malformed_tasks_are_problems_and_the_rest_loads(tmp_path: Path, make_task) -> None:
    make_task("good", GOOD)
    make_task("bad-toml", "schema_version = \n")
    make_task("unknown-field", "[environment]\ncpu = 2\n")
    make_task("wrong-type", '[agent]\ntimeout_sec = "soon"\n')
    make_task("no-instruction", GOOD, instruction=None)
    make_task("no-tests", GOOD, test_sh=None)
    make_task("step-missing", '[[steps]]\nname = "one"\n')
    make_task("no-toml", GOOD, files={"README": "x"}).joinpath("task.toml").unlink()
    (tmp_path / "tasks" / "not-a-task").mkdir()
    ts = HarborTaskset(str(tmp_path / "tasks"))
    assert [t.task_id for t in ts] == ["tasks:good"]
    by_dir = {}
    for p in ts.problems:
        parts = Path(p.source).parts
        name = next(
            n for n in parts[::-1] if n not in ("task.toml", "tests", "test.sh", "instruction.md")
        )
        by_dir[name] = (p.source, p.message)
    assert "invalid TOML" in by_dir["bad-toml"][1] and by_dir["bad-toml"][0].endswith("task.toml")
    assert by_dir["unknown-field"][1] == "environment.cpu: unknown key"
    assert by_dir["wrong-type"][1].startswith("agent.timeout_sec: expected float")
    assert "missing instruction.md" in by_dir["no-instruction"][1]
    assert by_dir["no-instruction"][0].endswith("instruction.md")
    assert "missing tests/test.sh" in by_dir["no-tests"][1]
    assert by_dir["no-tests"][0].endswith("test.sh")
    assert by_dir["step-missing"][1].startswith("steps[0].name: no directory steps/one/")
    assert by_dir["no-toml"][1] == "missing task.toml"
    assert "not-a-task" not in by_dir  # an empty directory is not a task
    assert len(ts.problems) == 7


def test_strict_makes_any_bad_task_fatal_listing_every_one(make_task, tmp_path: Path) -> None:
    make_task("good", GOOD)
    make_task("unknown-field", "[environment]\ncpu = 2\n")
    make_task("bad-toml", "schema_version = \n")
    with pytest.raises(HarborTaskError) as info:
        HarborTaskset(str(tmp_path / "tasks"), strict=True)
    message = str(info.value)
    assert message.startswith("2 Harbor task(s) failed to load (strict=true):")
    assert "unknown-field/task.toml: environment.cpu: unknown key" in message
    assert "bad-toml/task.toml: invalid TOML" in message


def test_when_no_task_loads_every_problem_is_listed(make_task, tmp_path: Path) -> None:
    make_task("unknown-field", "[environment]\ncpu = 2\n")
    make_task("no-instruction", GOOD, instruction=None)
    make_task("bad-retries", '[environment.healthcheck]\ncommand = "true"\nretries = -1\n')
    with pytest.raises(HarborTaskError) as info:
        HarborTaskset(str(tmp_path / "tasks"))
    lines = str(info.value).splitlines()
    assert lines[0] == "3 Harbor task(s) failed to load (no task loaded):"
    assert len(lines) == 4 and all(line.startswith("  - ") for line in lines[1:])
    joined = "\n".join(lines)
    for expected in (
        "unknown-field/task.toml: environment.cpu: unknown key",
        "no-instruction/instruction.md: missing instruction.md",
        "bad-retries/task.toml: environment.healthcheck.retries: must be 0 or more",
    ):
        assert expected in joined


def test_an_empty_harbor_name_is_a_clear_error(
    make_task, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    make_task("good", GOOD)
    monkeypatch.chdir(tmp_path / "tasks")  # '' must not silently mean the current directory
    for spec in ("harbor:", "harbor:  "):
        with pytest.raises(HarborTaskError, match="'harbor:' names none"):
            agentkit_registry.resolve_taskset(spec)


def test_an_empty_harbor_name_on_the_command_line(tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "agentkit",
            "run",
            "harbor:",
            "oracle",
            "--out",
            str(tmp_path / "o"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env={**os.environ, "NO_COLOR": "1"},
    )
    assert done.returncode != 0
    assert "'harbor:' names none" in done.stderr and "Traceback" not in done.stderr


def test_strict_option_through_the_registry_and_cli_parsing(make_task, tmp_path: Path) -> None:
    make_task("good", GOOD)
    make_task("bad", "x = \n")
    schema = agentkit_registry.option_schema("taskset", "harbor")
    opts = schema.parse_cli(["strict=true"], flag="-T")
    assert opts == {"strict": True}
    with pytest.raises(HarborTaskError, match="invalid TOML"):
        agentkit_registry.resolve_taskset(f"harbor:{tmp_path / 'tasks'}", **opts)
    lenient = agentkit_registry.resolve_taskset(f"harbor:{tmp_path / 'tasks'}")
    assert len(lenient) == 1 and len(lenient.problems) == 1


def test_missing_path_and_empty_folder(tmp_path: Path) -> None:
    with pytest.raises(HarborTaskError, match="-T registry="):
        HarborTaskset("terminal-bench@2.0")
    (tmp_path / "empty").mkdir()
    with pytest.raises(HarborTaskError, match="holds no Harbor task"):
        HarborTaskset(str(tmp_path / "empty"))


def test_execution_hints(make_task, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    make_task(
        "t",
        """
        schema_version = "1.3"
        [agent]
        timeout_sec = 100
        [verifier]
        timeout_sec = 20
        [environment]
        network_mode = "public"
        cpus = 2
        memory = "2G"
        storage_mb = 1000
        docker_image = "img:1"
        workdir = "/work"
        env = { A = "${AK_TEST_VAR:-fallback}", B = "literal ${NOT_A_TEMPLATE}" }
        """,
    )
    ts = HarborTaskset(str(tmp_path / "tasks"))
    task = ts.get_task("tasks:t")
    monkeypatch.delenv("AK_TEST_VAR", raising=False)
    hints = ts.execution_hints(task)
    assert isinstance(hints, ExecutionHints)
    assert hints.workdir == "/work" and hints.network is True
    assert (hints.cpus, hints.memory_mb, hints.storage_mb) == (2.0, 2048, 1000)
    assert hints.env == {"A": "fallback", "B": "literal ${NOT_A_TEMPLATE}"}
    assert hints.timeout_sec == 120.0 and hints.paths == {}
    assert hints.image == TaskImage(image="img:1", build_timeout_sec=600.0)
    monkeypatch.setenv("AK_TEST_VAR", "from-host")
    assert ts.execution_hints(task).env["A"] == "from-host"


@pytest.mark.parametrize(
    ("env_lines", "network"),
    [
        ("", True),  # Harbor's default is public
        ("allow_internet = false", False),
        ("allow_internet = true", True),
        ('network_mode = "no-network"', False),
        ('network_mode = "allowlist"\nallowed_hosts = ["pypi.org"]', False),
    ],
)
def test_network_hint(make_task, tmp_path: Path, env_lines: str, network: bool) -> None:
    make_task("t", f"[environment]\n{env_lines}\n")
    ts = HarborTaskset(str(tmp_path / "tasks"))
    assert ts.execution_hints(ts.get_task("tasks:t")).network is network


def test_harbor_dumped_allow_internet_beside_network_mode_loads(make_task, tmp_path: Path) -> None:
    # The shape Harbor's model_dump_toml wrote: allow_internet's default and empty allowed_hosts.
    make_task(
        "t",
        '[environment]\nallow_internet = true\nnetwork_mode = "no-network"\nallowed_hosts = []\n'
        "[agent]\nallowed_hosts = []\n[verifier]\nallowed_hosts = []\n",
    )
    ts = HarborTaskset(str(tmp_path / "tasks"))
    assert ts.problems == []
    task = ts.get_task("tasks:t")
    assert ts.execution_hints(task).network is False
    assert any("allow_internet = true is ignored" in n for n in task.metadata["harbor"]["notes"])


def test_agent_network_override(make_task, tmp_path: Path) -> None:
    make_task("t", '[agent]\nnetwork_mode = "no-network"\n[environment]\nnetwork_mode = "public"\n')
    ts = HarborTaskset(str(tmp_path / "tasks"))
    assert ts.execution_hints(ts.get_task("tasks:t")).network is False


def test_missing_host_variable_is_a_clear_error(make_task, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv("AK_SURELY_UNSET", raising=False)
    make_task("t", '[environment]\nenv = { KEY = "${AK_SURELY_UNSET}" }\n')
    ts = HarborTaskset(str(tmp_path / "tasks"))
    with pytest.raises(HarborTaskError, match=r"task.toml: environment.env.KEY: .*AK_SURELY_UNSET"):
        ts.execution_hints(ts.get_task("tasks:t"))


def test_resolve_env_rules() -> None:
    host = {"SET": "v", "EMPTY": ""}
    env = {
        "a": "${SET}",
        "b": "${UNSET:-dflt}",
        "c": "${SET:-dflt}",
        "d": "${EMPTY:-dflt}",
        "e": "prefix-${SET}",
        "f": "${UNSET:-}",
    }
    assert resolve_env(env, host=host) == {
        "a": "v",
        "b": "dflt",
        "c": "v",
        "d": "",
        "e": "prefix-${SET}",
        "f": "",
    }
    with pytest.raises(HarborTaskError, match=r"t.toml: solution.env.x: .*'NOPE'"):
        resolve_env({"x": "${NOPE}"}, host=host, source="t.toml", field="solution.env")


def test_environment_files_become_paths_without_a_dockerfile() -> None:
    ts = HarborTaskset(str(EXAMPLES))
    task = ts.get_task("harbor:word-stats")
    hints = ts.execution_hints(task)
    assert hints.paths == {"/app": str(EXAMPLES / "word-stats" / "environment")}
    assert hints.memory_mb == 1024 and hints.storage_mb == 2048 and hints.network is False
    hello = ts.execution_hints(ts.get_task("harbor:hello-world"))
    assert hello.paths == {}  # a Dockerfile environment is not copied


def test_prebuilt_image_with_environment_files_uploads_them(make_task, tmp_path: Path) -> None:
    # Harbor uploads environment/ into the workdir when the task names a docker_image
    # and has neither a Dockerfile nor a docker-compose.yaml (should_upload_environment_dir).
    make_task(
        "img",
        '[environment]\ndocker_image = "python:3.12-slim"\nworkdir = "/srv/work"\n',
        {"environment/data.txt": "hello\n"},
    )
    make_task(
        "img-dockerfile",
        '[environment]\ndocker_image = "python:3.12-slim"\n',
        {"environment/Dockerfile": "FROM x\nWORKDIR /app\n", "environment/data.txt": "x\n"},
    )
    ts = HarborTaskset(str(tmp_path / "tasks"))
    assert ts.problems == []
    img = ts.execution_hints(ts.get_task("tasks:img"))
    assert img.paths == {"/srv/work": str(tmp_path / "tasks" / "img" / "environment")}
    assert img.image is not None and img.image.image == "python:3.12-slim"
    both = ts.execution_hints(ts.get_task("tasks:img-dockerfile"))
    assert both.paths == {}
    assert both.image is not None and both.image.image == "python:3.12-slim"
    env_dir = tmp_path / "tasks" / "img-dockerfile" / "environment"
    assert both.image.dockerfile == str(env_dir / "Dockerfile")
    assert both.image.context == str(env_dir)


@needs_bwrap
@pytest.mark.anyio
async def test_prebuilt_image_environment_files_reach_the_oracle(make_task, tmp_path: Path) -> None:
    make_task(
        "img",
        '[environment]\ndocker_image = "python:3.12-slim"\nworkdir = "/srv/work"\n'
        'network_mode = "no-network"\n[agent]\ntimeout_sec = 30\n',
        {"environment/data.txt": "hello\n", "solution/solve.sh": "cp data.txt copy.txt\n"},
        test_sh="cd /srv/work && cmp -s data.txt copy.txt && echo 1 > /logs/verifier/reward.txt"
        " || echo 0 > /logs/verifier/reward.txt\n",
    )
    env = AgentEnv(HarborTaskset(str(tmp_path / "tasks")), OracleHarness())
    # On the host's userland: this is about Harbor's copy of environment/ (the
    # image itself is the local and docker sandboxes' business).
    results = await env.evaluate(out=tmp_path / "run", sandbox_options={"image": "host"})
    [rollout] = results.rollouts
    assert rollout.status == "completed", rollout.error
    assert rollout.reward == 1.0 and rollout.scoring_errors == []


def test_dockerfile_workdir(tmp_path: Path) -> None:
    df = tmp_path / "Dockerfile"
    df.write_text("FROM a AS build\nWORKDIR /build\nFROM b\nWORKDIR /srv\nWORKDIR app/./x\n")
    assert dockerfile_workdir(df) == "/srv/app/x"
    df.write_text("FROM a\nWORKDIR /first\nFROM b\nRUN true\n")
    assert dockerfile_workdir(df) is None
    df.write_text("FROM a\nWORKDIR $HOME/x\n")
    assert dockerfile_workdir(df) is None
    df.write_text('FROM a\n# WORKDIR /no\nworkdir "/quoted dir"\n')
    assert dockerfile_workdir(df) == "/quoted dir"


def test_workdir_sources(make_task, tmp_path: Path) -> None:
    make_task("toml", '[environment]\nworkdir = "/w"\n', {"environment/Dockerfile": "WORKDIR /d\n"})
    make_task("docker", "", {"environment/Dockerfile": "FROM x\nWORKDIR /srv/app\n"})
    make_task(
        "compose",
        "",
        {
            "environment/docker-compose.yaml": "services:\n  main:\n    build: .\n",
            "environment/Dockerfile": "FROM x\nWORKDIR /from-compose\n",
        },
    )
    make_task("default", "")
    specs = {
        p: load_task_dir(tmp_path / "tasks" / p) for p in ("toml", "docker", "compose", "default")
    }
    assert specs["toml"].workdir == "/w"
    assert specs["docker"].workdir == "/srv/app"
    assert specs["docker"].workdir_source == "environment/Dockerfile"
    assert specs["compose"].workdir == "/from-compose"
    assert specs["compose"].environment_kind == "compose"
    assert any("docker compose" in n for n in specs["compose"].notes)
    assert specs["default"].workdir == "/app" and specs["default"].environment_kind == "none"


def test_a_compose_mains_workdir_through_extends_and_include(make_task, tmp_path: Path) -> None:
    """Read as compose merges the project: ``working_dir`` from the service ``main``
    extends, the Dockerfile of a ``main`` an included file brings (its build context
    relative to that file); an ``extends`` out of the task is not followed."""
    make_task("extends", "", {
        "environment/docker-compose.yaml":
            "services:\n  main:\n    extends: {file: common/base.yaml, service: base}\n",
        "environment/common/base.yaml": "services:\n  base:\n    working_dir: /srv/work\n",
    })  # fmt: skip
    make_task("include", "", {
        "environment/docker-compose.yaml": "include: [app/main.yaml]\n",
        "environment/app/main.yaml": "services:\n  main:\n    build: .\n",
        "environment/app/Dockerfile": "FROM x\nWORKDIR /from-include\n",
    })  # fmt: skip
    (tmp_path / "base.yaml").write_text("services:\n  base:\n    working_dir: /outside\n")
    make_task("escape", "", {
        "environment/docker-compose.yaml":
            "services:\n  main:\n    extends: {file: ../../../base.yaml, service: base}\n",
    })  # fmt: skip
    specs = {p: load_task_dir(tmp_path / "tasks" / p) for p in ("extends", "include", "escape")}
    assert specs["extends"].workdir == "/srv/work"
    assert specs["extends"].workdir_source == "environment/docker-compose.yaml"
    assert specs["include"].workdir == "/from-include"
    assert specs["escape"].workdir == "/app"


def test_canary_lines_are_stripped(make_task, tmp_path: Path) -> None:
    text = "<!-- BENCHMARK DATA canary GUID 123 -->\n# canary: do not train\n\nReal task.\n"
    assert strip_canary(text) == "Real task.\n"
    assert strip_canary("No canary here\n") == "No canary here\n"
    make_task("c", GOOD, instruction=text)
    assert HarborTaskset(str(tmp_path / "tasks")).get_task("tasks:c").input == "Real task.\n"


def test_reserved_keys_in_task_metadata_are_left_out(make_task, tmp_path: Path) -> None:
    make_task("m", '[metadata]\nmodel = "gpt"\ndifficulty = "easy"\n')
    task = HarborTaskset(str(tmp_path / "tasks")).get_task("tasks:m")
    assert "metadata" not in task.metadata["harbor"]
    assert any("metadata.model" in n for n in task.metadata["harbor"]["notes"])


def test_step_tests_fall_back_to_task_tests(make_task, tmp_path: Path) -> None:
    make_task(
        "s",
        '[[steps]]\nname = "a"\n[[steps]]\nname = "b"\n',
        {
            "steps/a/instruction.md": "A",
            "steps/b/instruction.md": "B",
            "steps/b/tests/test.sh": "echo 1 > /logs/verifier/reward.txt",
        },
        instruction=None,
        test_sh=None,
    )
    with pytest.raises(ValidationError, match="step 'a' has neither"):
        load_task_dir(tmp_path / "tasks" / "s")
    (tmp_path / "tasks" / "s" / "tests").mkdir()
    (tmp_path / "tasks" / "s" / "tests" / "test.sh").write_text("true\n")
    spec = load_task_dir(tmp_path / "tasks" / "s")
    assert [s.name for s in spec.steps] == ["a", "b"] and spec.is_multi_step


def test_newer_schema_and_windows_load_with_notes(make_task, tmp_path: Path) -> None:
    make_task("n", 'schema_version = "1.9"\n[environment]\nos = "windows"\n')
    spec = load_task_dir(tmp_path / "tasks" / "n")
    assert any("newer" in n for n in spec.notes)
    assert any("windows" in n for n in spec.notes)


def test_tasks_from_other_tasksets_are_not_harbor_tasks() -> None:
    from agentkit_harbor import spec_for_task

    with pytest.raises(HarborTaskError, match="not a Harbor task"):
        spec_for_task(Task(task_id="x:y", input="hi"))


@needs_bwrap
def test_the_command_line_lists_every_task_that_failed_to_load(make_task, tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    make_task("good", GOOD)
    make_task("unknown-field", "[environment]\ncpu = 2\n")
    make_task("relative-workdir", '[environment]\nworkdir = "app"\n')
    args = ["run", f"harbor:{tmp_path / 'tasks'}", "nop", "--out", str(tmp_path / "out"), "--json"]
    done = subprocess.run(
        [sys.executable, "-m", "agentkit", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "NO_COLOR": "1"},
    )
    assert done.returncode == 0, done.stderr
    assert "Warning: 2 task(s) could not be loaded:" in done.stderr
    assert "unknown-field/task.toml: environment.cpu: unknown key" in done.stderr
    assert "relative-workdir/task.toml: environment.workdir: must be an absolute path" in (
        done.stderr
    )
