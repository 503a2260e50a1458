"""A hostile compose file cannot make compose read a file outside its task: the
files ``include``, ``extends``, ``label_file`` and ``.env`` name are checked
before any compose command runs (docker) or the file is read further (local),
with the same reasons on both sandboxes.

On docker, the real Compose CLI through a ``docker`` on PATH that notes every
call before it runs the real one: no call may happen for a refused file (without
the check, ``docker compose config`` reads the host file and prints its content
into the project).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from agentkit._sandbox import ExecutionHints, TaskImage
from agentkit.images import ImageError
from agentkit.sandbox.docker import DockerSandbox
from agentkit.sandbox.local._composefile import ComposeError, load_compose
from agentkit.testing.sandbox_fixtures import requires_docker

#: A host file a task must never reach: a compose file whose service carries a secret.
_LEAK = "services:\n  leak:\n    image: debian:bookworm-slim\n    environment: {K: s3cr3t}\n"
_MAIN = "  main:\n    image: debian:bookworm-slim\n"


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


#: Each case writes its task under ``tmp`` (the compose file, anything beside it, the
#: host files it aims at) and returns the one problem both sandboxes must name.
Case = Callable[[Path, Path, Path], str]


def _include_absolute(tmp: Path, env: Path, root: Path) -> str:
    outside = _write(tmp / "outside" / "compose.yaml", _LEAK)
    _write(env / "docker-compose.yaml", f"include: [{outside}]\nservices:\n{_MAIN}")
    return f"include[0].path[0]: included file '{outside}' is outside the task's folder ({root})"


def _include_parent(tmp: Path, env: Path, root: Path) -> str:
    _write(tmp / "other-task" / "compose.yaml", _LEAK)
    _write(
        env / "docker-compose.yaml", f"include: [../../other-task/compose.yaml]\nservices:\n{_MAIN}"
    )
    return (
        "include[0].path[0]: included file '../../other-task/compose.yaml' is outside the "
        f"task's folder ({root})"
    )


def _include_symlink(tmp: Path, env: Path, root: Path) -> str:
    outside = _write(tmp / "outside" / "compose.yaml", _LEAK)
    _write(env / "docker-compose.yaml", f"include: [shared.yaml]\nservices:\n{_MAIN}")
    (env / "shared.yaml").symlink_to(outside)
    return (
        f"include[0].path[0]: included file 'shared.yaml' (through a symlink, to '{outside}') "
        f"is outside the task's folder ({root})"
    )


def _include_oci(tmp: Path, env: Path, root: Path) -> str:
    ref = "oci://registry.invalid/tasks/compose:1"
    _write(env / "docker-compose.yaml", f"include: ['{ref}']\nservices:\n{_MAIN}")
    return (
        f"include[0].path[0]: included file '{ref}' is a remote resource (only files inside "
        "the task's folder are allowed)"
    )


def _include_git(tmp: Path, env: Path, root: Path) -> str:
    ref = "git@github.invalid:someone/tasks.git"
    _write(env / "docker-compose.yaml", f"include: ['{ref}']\nservices:\n{_MAIN}")
    return (
        f"include[0].path[0]: included file '{ref}' is a remote resource (only files inside "
        "the task's folder are allowed)"
    )


def _include_env_file(tmp: Path, env: Path, root: Path) -> str:
    secret = _write(tmp / "secret.env", "SECRET=s3cr3t\n")
    _write(env / "side.yaml", "services:\n  side:\n    image: debian:bookworm-slim\n")
    _write(
        env / "docker-compose.yaml",
        f"include: [{{path: side.yaml, env_file: {secret}}}]\nservices:\n{_MAIN}",
    )
    return f"include[0].env_file[0]: env file '{secret}' is outside the task's folder ({root})"


def _include_variable(tmp: Path, env: Path, root: Path) -> str:
    _write(env / "docker-compose.yaml", f"include: ['${{HOME}}/compose.yaml']\nservices:\n{_MAIN}")
    return (
        "include[0].path[0]: included file '${HOME}/compose.yaml' uses a variable (compose "
        "reads it before the project can be checked: write the path itself)"
    )


def _extends_parent(tmp: Path, env: Path, root: Path) -> str:
    _write(tmp / "other-task" / "compose.yaml", _LEAK)
    _write(
        env / "docker-compose.yaml",
        f"services:\n{_MAIN}    extends: {{file: ../../other-task/compose.yaml, service: leak}}\n",
    )
    return (
        "service 'main': extends: extended file '../../other-task/compose.yaml' is outside the "
        f"task's folder ({root})"
    )


def _extends_in_an_included_file(tmp: Path, env: Path, root: Path) -> str:
    outside = _write(tmp / "outside" / "compose.yaml", _LEAK)
    inside = _write(
        env / "parts" / "side.yaml",
        f"services:\n  side:\n    extends: {{file: {outside}, service: leak}}\n",
    )
    _write(env / "docker-compose.yaml", f"include: [parts/side.yaml]\nservices:\n{_MAIN}")
    return (
        f"in {inside}: service 'side': extends: extended file '{outside}' is outside the "
        f"task's folder ({root})"
    )


def _included_again_from_another_folder(tmp: Path, env: Path, root: Path) -> str:
    """Inside from the file's own folder, outside from the project directory the second
    include gives it: each folder a file is read from counts."""
    _write(tmp / "task" / "labels.txt", "A=1\n")
    inside = _write(
        env / "parts" / "a.yaml",
        "services:\n  side:\n    image: debian:bookworm-slim\n    label_file: ../../labels.txt\n",
    )
    _write(
        env / "docker-compose.yaml",
        "include: [parts/a.yaml, {path: parts/a.yaml, project_directory: ..}]\n"
        f"services:\n{_MAIN}",
    )
    return (
        f"in {inside}: service 'side': label_file[0]: label file '../../labels.txt' is outside "
        f"the task's folder ({root})"
    )


def _include_fifo(tmp: Path, env: Path, root: Path) -> str:
    """Inside the task but a FIFO: reading it would block (compose's reader, or ours)."""
    _write(env / "docker-compose.yaml", f"include: [pipe.yaml]\nservices:\n{_MAIN}")
    os.mkfifo(env / "pipe.yaml")
    return "include[0].path[0]: included file 'pipe.yaml' is not a regular file of at most 4 MiB"


def _dotenv_symlink(tmp: Path, env: Path, root: Path) -> str:
    secret = _write(tmp / "secret.env", "SECRET=s3cr3t\n")
    _write(
        env / "docker-compose.yaml", f"services:\n{_MAIN}    environment: {{X: '${{SECRET}}'}}\n"
    )
    (env / ".env").symlink_to(secret)
    return (
        f".env: file '.env' (through a symlink, to '{secret}') is outside the task's folder "
        f"({root})"
    )


def _label_file(tmp: Path, env: Path, root: Path) -> str:
    secret = _write(tmp / "labels.txt", "SECRET=s3cr3t\n")
    _write(env / "docker-compose.yaml", f"services:\n{_MAIN}    label_file: {secret}\n")
    return (
        f"service 'main': label_file[0]: label file '{secret}' is outside the task's folder "
        f"({root})"
    )


_CASES: dict[str, Case] = {
    "include-absolute": _include_absolute,
    "include-parent": _include_parent,
    "include-symlink": _include_symlink,
    "include-oci": _include_oci,
    "include-git": _include_git,
    "include-env-file": _include_env_file,
    "include-variable": _include_variable,
    "extends-parent": _extends_parent,
    "extends-in-an-included-file": _extends_in_an_included_file,
    "included-again-from-another-folder": _included_again_from_another_folder,
    "include-fifo": _include_fifo,
    "dotenv-symlink": _dotenv_symlink,
    "label-file": _label_file,
}


def _task(tmp_path: Path, case: str) -> tuple[Path, str]:
    env = tmp_path / "task" / "environment"
    named = _CASES[case](tmp_path, env, (tmp_path / "task").resolve())
    return env / "docker-compose.yaml", named


@pytest.mark.parametrize("case", sorted(_CASES))
def test_the_local_sandbox_refuses_a_reference_out_of_the_task(tmp_path: Path, case: str) -> None:
    compose, named = _task(tmp_path, case)
    with pytest.raises(ComposeError) as refused:
        load_compose(compose)
    assert str(refused.value).startswith(
        f"{compose}: the local sandbox refuses this compose file (it would reach outside the "
        "task):\n"
    ), refused.value
    assert refused.value.problems == (named,)


@pytest.fixture
def docker_calls(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A ``docker`` first on PATH that notes each call, then runs the real one."""
    real = next(
        os.path.join(d, "docker")
        for d in os.environ["PATH"].split(os.pathsep)
        if os.access(os.path.join(d, "docker"), os.X_OK)
    )
    calls = tmp_path / "docker-calls"
    wrapper = _write(
        tmp_path / "bin" / "docker", f'#!/bin/sh\necho "$*" >> {calls}\nexec {real} "$@"\n'
    )
    wrapper.chmod(0o755)
    monkeypatch.setenv("PATH", f"{wrapper.parent}{os.pathsep}{os.environ['PATH']}")
    return calls


@requires_docker
@pytest.mark.anyio
@pytest.mark.parametrize("case", sorted(_CASES))
async def test_the_docker_sandbox_refuses_it_before_any_compose_command(
    tmp_path: Path, case: str, docker_calls: Path
) -> None:
    compose, named = _task(tmp_path, case)
    [prepared] = await DockerSandbox.prepare(
        [ExecutionHints(image=TaskImage(compose_file=str(compose)))]
    )
    assert isinstance(prepared, ImageError), prepared
    assert str(prepared) == (
        f"{compose}: the docker sandbox refuses this compose file (it would reach outside the "
        f"task):\n  - {named}"
    )
    assert not docker_calls.exists(), docker_calls.read_text()


def _laughs(env: Path) -> Path:
    """A compose file whose labels are ten aliases of ten aliases ... (10**9 strings)."""
    lines = ['x-a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    lines += [f"x-a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 10)]
    lines.append("services:\n  main:\n    image: debian:bookworm-slim\n    labels: *a9")
    return _write(env / "docker-compose.yaml", "\n".join(lines) + "\n")


def _deep(env: Path) -> Path:
    """A compose file of 5,000 lists inside each other (PyYAML reads them by recursion):
    what it includes could not be checked."""
    nested = "[" * 5000 + "]" * 5000
    return _write(env / "docker-compose.yaml", f"include: [/etc/passwd]\nx-deep: {nested}\n")


_LAUGHS = "is too large once its anchors (&name) and aliases (*name) are expanded"
_DEEP = "is nested too deeply (thousands of lists or mappings inside each other)"
_HUGE = pytest.mark.parametrize(("make", "said"), [(_laughs, _LAUGHS), (_deep, _DEEP)],
                                ids=["aliases-of-aliases", "nested-too-deep"])  # fmt: skip


@_HUGE
def test_the_local_sandbox_refuses_a_file_too_large_to_walk(
    tmp_path: Path, make: Callable[[Path], Path], said: str
) -> None:
    """Walking a billion-laughs file's expansion (the merge, ${VAR} filling) would never
    end: it is refused as it is read, from the size of its graph; a file nested past
    Python's stack is refused as it is read, not a RecursionError."""
    compose = make(tmp_path / "task" / "environment")
    with pytest.raises(ComposeError) as refused:
        load_compose(compose)
    assert said in str(refused.value), refused.value


@requires_docker
@pytest.mark.anyio
@_HUGE
async def test_the_docker_sandbox_refuses_a_file_too_large_to_walk(
    tmp_path: Path, docker_calls: Path, make: Callable[[Path], Path], said: str
) -> None:
    compose = make(tmp_path / "task" / "environment")
    [prepared] = await DockerSandbox.prepare(
        [ExecutionHints(image=TaskImage(compose_file=str(compose)))]
    )
    assert isinstance(prepared, ImageError), prepared
    assert said in str(prepared), prepared
    assert not docker_calls.exists(), docker_calls.read_text()


@requires_docker
@pytest.mark.anyio
async def test_the_docker_sandbox_refuses_a_file_it_cannot_read_before_compose(
    tmp_path: Path, docker_calls: Path
) -> None:
    """What agentkit's reader cannot parse it cannot check: compose's own parser might
    accept it and follow its includes unchecked, so it is refused before compose runs."""
    compose = _write(
        tmp_path / "task" / "environment" / "docker-compose.yaml",
        f"include: [/etc/passwd]\nservices:\n{_MAIN}  side: [\n",
    )
    [prepared] = await DockerSandbox.prepare(
        [ExecutionHints(image=TaskImage(compose_file=str(compose)))]
    )
    assert isinstance(prepared, ImageError), prepared
    assert str(prepared).startswith(
        f"{compose}: the docker sandbox refuses this compose file (agentkit could not read it "
        "to check it):\n  - is not valid YAML: "
    ), prepared
    assert not docker_calls.exists(), docker_calls.read_text()
