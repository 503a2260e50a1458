"""Image roots from image archives (``agentkit images import``): no engine, no root.

Tiny archives are written here with tarfile in each format (``docker save``'s, an
OCI layout as a directory and as a gzip-layered tar) and imported for real; hostile
ones must be refused with the archive and the layer named and nothing left in the
cache. A real ``docker save`` of the stand-in image is imported and a compose task
(main, web app, database with a healthcheck, migration) runs on it with no Docker,
Podman or Buildah on PATH.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import subprocess
import sys
import tarfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from _no_engines import no_engines

from agentkit.images import import_archive, imported_root, normalize_reference
from agentkit.images._imageroot import IMAGE_ID_BASE
from agentkit.sandbox import SandboxError
from agentkit.testing.sandbox_fixtures import need_docker

ROOT = Path(__file__).resolve().parents[1]
WEB_DB = ROOT / "tests" / "fixtures" / "compose" / "web-db"
#: (kind, name, data) entries of a layer: file, dir, symlink, hardlink, chardev
Entry = tuple[str, str, str]

CONFIG = {
    "Env": ["PATH=/usr/bin:/bin", "GREETING=hi there"],
    "WorkingDir": "/srv",
    "User": "1000:1000",
    "Entrypoint": ["/bin/tool", "--serve"],
    "Cmd": ["--port", "80"],
    "Healthcheck": {"Test": ["CMD-SHELL", "true"], "Interval": 2_000_000_000, "Retries": 4},
}


def layer(*entries: Entry) -> bytes:
    """A layer's tar (uncompressed) of ``entries``."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for kind, name, data in entries:
            info = tarfile.TarInfo(name)
            info.uid = info.gid = 7
            info.mode = 0o755 if kind == "dir" or name.endswith("tool") else 0o644
            content = b""
            if kind == "dir":
                info.type = tarfile.DIRTYPE
            elif kind == "symlink":
                info.type, info.linkname = tarfile.SYMTYPE, data
            elif kind == "hardlink":
                info.type, info.linkname = tarfile.LNKTYPE, data
            elif kind == "chardev":
                info.type, info.devmajor, info.devminor = tarfile.CHRTYPE, 1, 3
            else:
                content = data.encode()
                info.size = len(content)
            tar.addfile(info, io.BytesIO(content) if content else None)
    return buf.getvalue()


def _sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _config(layers: list[bytes]) -> bytes:
    return json.dumps(
        {
            "architecture": "amd64",
            "os": "linux",
            "config": CONFIG,
            "rootfs": {"type": "layers", "diff_ids": [_sha(x) for x in layers]},
        }
    ).encode()


def _write_tar(path: Path, files: dict[str, bytes]) -> None:
    with tarfile.open(path, "w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


def docker_archive(
    path: Path, layers: list[bytes], tags: list[str], config: bytes | None = None,
    names: list[str] | None = None,
) -> Path:  # fmt: skip
    """A ``docker save`` archive (Docker 20's shape) of one image."""
    config = config if config is not None else _config(layers)
    names = names or [f"{i}/layer.tar" for i in range(len(layers))]
    manifest = [{"Config": "config.json", "RepoTags": tags, "Layers": names}]
    files = {"manifest.json": json.dumps(manifest).encode(), "config.json": config}
    files.update(zip(names, layers, strict=True))
    _write_tar(path, files)
    return path


def oci_layout(
    path: Path, layers: list[bytes], tags: list[str], *, compress: bool, as_tar: bool,
    corrupt_config: bool = False,
) -> Path:  # fmt: skip
    """An OCI image layout of one image: a directory, or a tar of one."""
    blobs: dict[str, bytes] = {}

    def blob(data: bytes) -> str:
        digest = _sha(data)
        blobs[f"blobs/sha256/{digest.split(':')[1]}"] = data
        return digest

    stored = [gzip.compress(x, mtime=0) if compress else x for x in layers]
    config = _config(layers)
    config_digest = blob(config)
    if corrupt_config:
        blobs[f"blobs/sha256/{config_digest.split(':')[1]}"] = config.replace(b"hi", b"ho")
    kind = "tar+gzip" if compress else "tar"
    manifest = json.dumps(
        {
            "schemaVersion": 2,
            "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                       "digest": config_digest, "size": len(config)},
            "layers": [{"mediaType": f"application/vnd.oci.image.layer.v1.{kind}",
                        "digest": blob(x), "size": len(x)} for x in stored],
        }
    ).encode()  # fmt: skip
    index = {
        "schemaVersion": 2,
        "manifests": [
            {
                "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "digest": blob(manifest),
                "size": len(manifest),
                "annotations": {"org.opencontainers.image.ref.name": t},
            }
            for t in tags
        ],
    }
    files = {
        "oci-layout": b'{"imageLayoutVersion": "1.0.0"}',
        "index.json": json.dumps(index).encode(),
        **blobs,
    }
    if as_tar:
        _write_tar(path, files)
        return path
    for name, data in files.items():
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        (path / name).write_bytes(data)
    return path


BASE = layer(
    ("dir", "etc", ""), ("file", "etc/a", "a"), ("file", "etc/keep", "k"),
    ("dir", "d", ""), ("file", "d/x", "x"), ("dir", "d/sub", ""), ("file", "d/sub/y", "y"),
    ("dir", "lib", ""), ("file", "lib/f", "f"), ("dir", "bin", ""), ("file", "bin/tool", "t"),
    ("hardlink", "bin/tool2", "bin/tool"), ("symlink", "etc/alias", "/etc/keep"),
)  # fmt: skip
TOP = layer(
    ("file", "etc/.wh.a", ""), ("file", "d/.wh..wh..opq", ""), ("file", "d/new", "n"),
    ("file", "lib", "now a file"), ("chardev", "dev-null", ""),
)  # fmt: skip

Maker = Callable[[Path, list[bytes], list[str]], Path]
FORMATS: dict[str, Maker] = {
    "docker-archive": lambda d, ls, ts: docker_archive(d / "a.tar", ls, ts),
    # Docker 25's docker save: the layers named by their blobs (an OCI layout beside)
    "docker-archive-blobs": lambda d, ls, ts: docker_archive(
        d / "b.tar", ls, ts, names=[f"blobs/sha256/{_sha(x)[7:]}" for x in ls]
    ),
    "oci-dir": lambda d, ls, ts: oci_layout(d / "oci", ls, ts, compress=False, as_tar=False),
    "oci-archive-gzip": lambda d, ls, ts: oci_layout(
        d / "o.tar", ls, ts, compress=True, as_tar=True
    ),
}


def _id_base() -> int | None:
    return IMAGE_ID_BASE if os.geteuid() == 0 else None


def _import(archive: Path, cache: Path, tag: str | None = None) -> Any:
    return anyio.run(lambda: import_archive(archive, tag=tag, cache_dir=cache, id_base=_id_base()))


@pytest.mark.parametrize("fmt", FORMATS)
def test_layers_are_applied_in_order_with_whiteouts_and_the_config_carried(
    fmt: str, tmp_path: Path
) -> None:
    (tmp_path / "oci").mkdir()
    archive = FORMATS[fmt](tmp_path, [BASE, TOP], ["example.org/tiny:1"])
    cache = tmp_path / "cache"
    [(image, root)] = _import(archive, cache)
    fs = root.rootfs
    assert not (fs / "etc" / "a").exists()  # .wh.a
    assert (fs / "etc" / "keep").read_text() == "k"
    assert sorted(os.listdir(fs / "d")) == ["new"]  # the opaque whiteout hid x and sub/
    assert (fs / "lib").read_text() == "now a file"  # a file over the lower directory
    assert not (fs / "dev-null").exists()  # device nodes skipped
    assert os.readlink(fs / "etc" / "alias") == "/etc/keep"
    assert os.stat(fs / "bin" / "tool").st_mode & 0o777 == 0o755
    assert os.stat(fs / "bin" / "tool2").st_ino == os.stat(fs / "bin" / "tool").st_ino
    owner = os.stat(fs / "etc" / "keep").st_uid
    assert owner == (IMAGE_ID_BASE + 7 if os.geteuid() == 0 else os.geteuid())
    assert not any(p.name.startswith(".wh.") for p in fs.rglob("*"))
    # the config, as an engine's inspect gives it
    config = root.config
    assert config.env == (("PATH", "/usr/bin:/bin"), ("GREETING", "hi there"))
    assert (config.workdir, config.user) == ("/srv", "1000:1000")
    assert (config.entrypoint, config.cmd) == (("/bin/tool", "--serve"), ("--port", "80"))
    assert config.healthcheck is not None and config.healthcheck.interval == 2.0
    assert config.healthcheck.retries == 4
    assert image.image_id == _sha(_config([BASE, TOP]))
    # found by its name, however Docker Hub's name is spelled
    for name in ("example.org/tiny:1",):
        found = imported_root(name, cache, _id_base())
        assert found is not None and found.rootfs == fs
    assert imported_root("example.org/tiny:2", cache, _id_base()) is None


def test_names_are_compared_as_docker_does_and_tag_adds_one(tmp_path: Path) -> None:
    assert normalize_reference("docker.io/library/python:3.11") == "python:3.11"
    assert normalize_reference("python") == "python:latest"
    assert normalize_reference("localhost:5000/x") == "localhost:5000/x:latest"
    with pytest.raises(SandboxError, match="is not an image name"):
        normalize_reference("../etc")
    archive = docker_archive(tmp_path / "a.tar", [BASE], ["python:3.11-slim"])
    cache = tmp_path / "cache"
    _import(archive, cache, tag="mine/py")
    for name in ("docker.io/library/python:3.11-slim", "python:3.11-slim", "mine/py:latest"):
        assert imported_root(name, cache, _id_base()) is not None, name
    # Podman's local names (podman save of what it loaded or built): found by the short one
    archive = docker_archive(tmp_path / "p.tar", [BASE], ["localhost/built:2"])
    _import(archive, cache)
    for name in ("localhost/built:2", "built:2"):
        assert imported_root(name, cache, _id_base()) is not None, name


def _outside(tmp_path: Path) -> Path:
    out = tmp_path / "outside"
    out.mkdir(exist_ok=True)
    (out / "victim").write_text("untouched")
    return out


#: name -> (layers given the tmp path, what the error says)
HOSTILE: dict[str, tuple[Callable[[Path], list[bytes]], str]] = {
    "absolute path": (lambda t: [layer(("file", "/etc/passwd", "x"))], "has an absolute path"),
    "going up": (lambda t: [layer(("file", "a/../../x", "x"))], "has a path going up"),
    "below a symlink": (
        lambda t: [layer(("symlink", "link", str(_outside(t))), ("file", "link/new", "x"))],
        "below a symbolic link",
    ),
    "below a lower layer's symlink": (
        lambda t: [layer(("symlink", "link", str(_outside(t)))), layer(("file", "link/new", "x"))],
        "below a symbolic link",
    ),
    "whiteout through a symlink": (
        lambda t: [
            layer(("symlink", "link", str(_outside(t)))),
            layer(("file", "link/.wh.victim", "")),
        ],
        "below a symbolic link",
    ),
    "whiteout going up": (
        lambda t: [layer(("file", "x", "x")), layer(("file", ".wh...", ""))],
        "whiteout that names no file",
    ),
    "hard link to nothing": (
        lambda t: [layer(("hardlink", "h", "no/such/file"))],
        "cannot write 'h'",
    ),
    "hard link to a link": (
        lambda t: [layer(("symlink", "s", "/etc/shadow"), ("hardlink", "h", "s"))],
        "points to a link",
    ),
}


@pytest.mark.parametrize("case", HOSTILE)
def test_hostile_layers_are_refused_naming_the_archive_and_layer(case: str, tmp_path: Path) -> None:
    make, says = HOSTILE[case]
    layers = make(tmp_path)
    archive = docker_archive(tmp_path / "hostile.tar", layers, ["hostile:1"])
    cache = tmp_path / "cache"
    with pytest.raises(SandboxError) as info:
        _import(archive, cache)
    message = str(info.value)
    assert says in message and str(archive) in message and "layer " in message, message
    _assert_nothing_left(cache, tmp_path)


def _assert_nothing_left(cache: Path, tmp_path: Path) -> None:
    left = sorted(p.name for p in cache.iterdir() if not p.name.endswith(".lock"))
    assert left == [], left  # no root, no half-written one, no name
    if (tmp_path / "outside").exists():
        assert sorted(os.listdir(tmp_path / "outside")) == ["victim"]
        assert (tmp_path / "outside" / "victim").read_text() == "untouched"


def test_a_layer_that_is_not_what_the_manifest_says_is_refused(tmp_path: Path) -> None:
    honest = layer(("file", "a", "a"))
    config = _config([honest])
    archive = docker_archive(
        tmp_path / "swapped.tar", [layer(("file", "a", "evil"))], ["x:1"], config
    )
    with pytest.raises(SandboxError) as info:
        _import(archive, tmp_path / "cache")
    message = str(info.value)
    assert f"{archive}: layer 1 (0/layer.tar) is not what the image's config" in message
    assert _sha(honest) in message
    _assert_nothing_left(tmp_path / "cache", tmp_path)


@pytest.mark.parametrize(
    ("case", "says"),
    [
        ("oci config", "is not what its digest says"),
        ("zstd", "zstd-compressed, which is not supported"),
        ("manifest path", "names a file outside itself"),
        ("not an archive", "not an image archive"),
        ("two images, one tag", "holds 2 images: --tag names one image"),
    ],
)
def test_archives_that_are_not_what_they_say_are_refused(
    case: str, says: str, tmp_path: Path
) -> None:
    one = layer(("file", "a", "a"))
    tag = None
    if case == "oci config":
        archive = oci_layout(tmp_path / "o.tar", [one], ["x:1"], compress=False, as_tar=True,
                             corrupt_config=True)  # fmt: skip
    elif case == "zstd":
        zstd = b"\x28\xb5\x2f\xfd" + b"\0" * 64
        archive = docker_archive(tmp_path / "z.tar", [zstd], ["x:1"], _config([zstd]))
    elif case == "manifest path":
        archive = docker_archive(tmp_path / "m.tar", [one], ["x:1"], names=["../../etc/passwd"])
    elif case == "not an archive":
        archive = tmp_path / "notes.txt"
        archive.write_text("hello")
    else:
        archive = tmp_path / "two.tar"
        config = _config([one])
        manifest = [{"Config": "c.json", "RepoTags": [f"x:{i}"], "Layers": ["l.tar"]}
                    for i in range(2)]  # fmt: skip
        files = {"manifest.json": json.dumps(manifest).encode(), "c.json": config, "l.tar": one}
        _write_tar(archive, files)
        tag = "mine:1"
    with pytest.raises(SandboxError, match=says) as info:
        _import(archive, tmp_path / "cache", tag=tag)
    assert str(archive) in str(info.value)
    if (tmp_path / "cache").exists():
        _assert_nothing_left(tmp_path / "cache", tmp_path)


def _agentkit(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agentkit", *args], capture_output=True, text=True,
        timeout=600, check=False, env={**os.environ, "NO_COLOR": "1", **(env or {})},
    )  # fmt: skip


def test_the_import_command_says_what_is_wrong_in_one_line(tmp_path: Path) -> None:
    archive = docker_archive(tmp_path / "bad.tar", [layer(("file", "/abs", "x"))], ["x:1"])
    done = _agentkit("images", "import", str(archive), "--image-cache", str(tmp_path / "c"))
    assert done.returncode == 2
    assert done.stderr.startswith(f"Error: {archive}: layer 1 (0/layer.tar) has an absolute")
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1


@pytest.mark.slow
def test_a_saved_image_runs_a_compose_task_with_no_engine(tmp_path: Path) -> None:
    """``docker save`` of the stand-in image, imported: the web-db compose task (four
    services on it, one healthcheck, reached by name) scores 1.0 with no image tool."""
    pytest.importorskip("agentkit_harbor", reason="the Harbor plugin is not installed")
    need_docker()
    archive = tmp_path / "python.tar"
    subprocess.run(["docker", "save", "-o", str(archive), "python:3.11-slim"], check=True)
    engine_id = subprocess.run(
        ["docker", "image", "inspect", "-f", "{{.Id}}", "python:3.11-slim"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    cache = tmp_path / "cache"
    env = no_engines(tmp_path)
    done = _agentkit("images", "import", str(archive), "--image-cache", str(cache), env=env)
    assert done.returncode == 0, done.stderr
    assert f"imported {engine_id[:19]} " in done.stdout and "python:3.11-slim" in done.stdout
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    (tasks / "web-db").symlink_to(WEB_DB)
    out = tmp_path / "run"
    done = _agentkit(
        "run", f"harbor:{tasks}", "oracle", "--sandbox", "local", "-S", f"image_cache={cache}",
        "--out", str(out), "--json", "--max-retries", "0", env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    [record] = [json.loads(x) for x in (out / "rollouts.jsonl").read_text().splitlines()]
    assert (record["reward"], record["error"]) == (1.0, None)
