"""The image layer: .dockerignore, context digests, builds once per digest, failures kept."""

from __future__ import annotations

import asyncio
import os
import subprocess
import uuid
from pathlib import Path

import pytest

from agentkit._sandbox import TaskImage
from agentkit.images import (
    ImageError,
    build_context,
    clear_cache,
    parse_dockerignore,
    prepare_images,
    resolve_image,
)
from agentkit.images._context import base_images
from agentkit.testing.sandbox_fixtures import requires_docker

BASE = "debian:bookworm-slim"


def test_dockerignore_matches_as_docker_does() -> None:
    rules = parse_dockerignore(
        "# comment\n*.log\n!keep.log\nbuild/\n**/__pycache__\n/secret\n"
        "docs/*.md\n!docs/README.md\n",
        always=("Dockerfile",),
    )
    assert rules.excluded("a.log") and not rules.excluded("keep.log")
    assert not rules.excluded("sub/a.log")  # '*' stays within one element
    assert rules.excluded("build") and rules.excluded("build/x/y.txt")
    assert rules.excluded("pkg/__pycache__/m.pyc") and rules.excluded("__pycache__/m.pyc")
    assert rules.excluded("secret") and not rules.excluded("x/secret")
    assert rules.excluded("docs/a.md") and not rules.excluded("docs/README.md")
    assert not rules.excluded("Dockerfile") and not rules.excluded("src/main.py")
    assert parse_dockerignore("?.txt\n[ab].c\n").excluded("x.txt")
    assert parse_dockerignore("[ab].c\n").excluded("a.c")
    assert not parse_dockerignore("[ab].c\n").excluded("c.c")


def _context(tmp_path: Path, dockerfile: str = f"FROM {BASE}\nCOPY . /data\n") -> Path:
    env = tmp_path / "environment"
    env.mkdir(parents=True, exist_ok=True)
    (env / "Dockerfile").write_text(dockerfile)
    (env / "data.txt").write_text("payload\n")
    (env / "notes.log").write_text("ignored\n")
    (env / ".dockerignore").write_text("*.log\nDockerfile\n")
    return env


def test_digest_covers_sent_files_only_and_ignores_timestamps(tmp_path: Path) -> None:
    env = _context(tmp_path)
    image = TaskImage(dockerfile=str(env / "Dockerfile"), context=str(env))
    ctx = build_context(image)
    names = [e.rel for e in ctx.entries]
    assert names == [".dockerignore", "Dockerfile", "data.txt"]  # the Dockerfile is always sent
    first = ctx.digest()
    (env / "notes.log").write_text("changed, but ignored\n")
    os.utime(env / "data.txt", (1, 1))
    assert build_context(image).digest() == first
    (env / "data.txt").write_text("other payload\n")
    assert build_context(image).digest() != first
    # The same task elsewhere has the same digest.
    copy = _context(tmp_path / "elsewhere")
    (copy / "data.txt").write_text("other payload\n")
    assert (
        build_context(TaskImage(dockerfile=str(copy / "Dockerfile"))).digest()
        == build_context(image).digest()
    )


def test_base_images_follow_args_and_skip_stages(tmp_path: Path) -> None:
    df = tmp_path / "Dockerfile"
    df.write_text(
        "ARG BASE=python:3.11-slim\nFROM ${BASE} AS build\nRUN true\n"
        "FROM --platform=linux/amd64 debian:bookworm-slim\n"
        "COPY --from=build /x /x\nCOPY --from=ghcr.io/astral-sh/uv:latest /uv /bin/\n"
        "FROM scratch\nFROM $UNKNOWN\n"
    )
    assert base_images(df) == [
        "python:3.11-slim",
        "debian:bookworm-slim",
        "ghcr.io/astral-sh/uv:latest",
    ]


def test_missing_dockerfile_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ImageError, match="no such Dockerfile"):
        build_context(TaskImage(dockerfile=str(tmp_path / "Dockerfile")))


def _remove(*refs: str) -> None:
    subprocess.run(["docker", "rmi", "-f", *refs], capture_output=True, check=False)


@requires_docker
@pytest.mark.anyio
async def test_built_once_then_reused_and_failures_kept(tmp_path: Path) -> None:
    clear_cache()
    marker = uuid.uuid4().hex
    env = _context(tmp_path, f"FROM {BASE}\nCOPY data.txt /data/\nRUN echo {marker} > /marker\n")
    image = TaskImage(dockerfile=str(env / "Dockerfile"), context=str(env))
    logs = tmp_path / "logs"
    try:
        refs = await asyncio.gather(*(resolve_image(image, log_dir=logs) for _ in range(3)))
        assert {r.reference for r in refs} == {refs[0].reference}
        assert [r.source for r in refs] == ["built"] * 3  # one build, shared
        assert refs[0].reference.startswith("agentkit/env:")
        assert refs[0].log_path and marker in Path(refs[0].log_path).read_text()
        out = subprocess.run(
            ["docker", "run", "--rm", refs[0].reference, "cat", "/marker", "/data/data.txt"],
            capture_output=True,
            text=True,
        )
        assert out.stdout == f"{marker}\npayload\n", out.stderr
        clear_cache()  # a later run: the tag exists, nothing is built
        again = await resolve_image(image, log_dir=logs)
        assert again.source == "cached" and again.image_id == refs[0].image_id
    finally:
        _remove(refs[0].reference)

    bad = _context(tmp_path / "bad", f"FROM {BASE}\nRUN echo {marker}-oops && exit 3\n")
    broken = TaskImage(dockerfile=str(bad / "Dockerfile"), context=str(bad))
    results = await prepare_images([broken, image, broken], log_dir=logs, max_parallel=2)
    try:
        assert isinstance(results[0], ImageError) and results[2] is results[0]
        assert results[0].error_kind == "image_build"
        assert results[0].log_path and f"{marker}-oops" in Path(results[0].log_path).read_text()
        assert f"{marker}-oops" in str(results[0]) and "build log:" in str(results[0])
        assert not isinstance(results[1], ImageError)  # the other task still got its image
        with pytest.raises(ImageError):  # remembered: not built again
            await resolve_image(broken, log_dir=logs)
    finally:
        if not isinstance(results[1], ImageError):
            _remove(results[1].reference)


@requires_docker
@pytest.mark.anyio
async def test_prebuilt_image_is_used_when_present_and_pull_failure_is_clear(
    tmp_path: Path,
) -> None:
    clear_cache()
    ref = await resolve_image(TaskImage(image=BASE))
    assert ref.source == "present" and ref.image_id.startswith("sha256:")
    missing = f"agentkit-test/no-such-image-{uuid.uuid4().hex[:8]}:1"
    with pytest.raises(ImageError, match="pulling") as info:
        await resolve_image(TaskImage(image=missing), log_dir=tmp_path)
    assert info.value.error_kind == "image_pull"
