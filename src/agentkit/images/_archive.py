"""Image roots from image archives: no container engine, no root.

An ordinary user on a machine without a reachable registry has no engine that
can give it an image, but it can have an image's archive (made elsewhere with
``docker save`` or ``podman save``, or an OCI image layout from ``skopeo
copy``). :func:`import_archive` reads one and unpacks its image's layers, in
order, into the image-root cache as an export would (:mod:`._imageroot`), and
records the image's names there: a task's ``image: REF`` (and a compose
service's) then resolves to that root with no engine at all
(:func:`imported_root`). ``agentkit images import FILE`` is the command.

What is read:

- a ``docker save`` archive (``docker-archive``): a tar with ``manifest.json``,
  each image's config and its layer tars (Docker 25's, which is also an OCI
  layout, included);
- an OCI image layout, as a directory or as a tar of one (``oci-archive``):
  ``oci-layout``, ``index.json``, ``blobs/sha256/...``; a nested index or a
  multi-platform one is followed to this machine's platform.

Layers may be plain tars or gzip-compressed; zstd layers are refused (the
standard library cannot read them). Every layer is checked against what the
image says of it (its ``diff_id``; in an OCI layout also its blob digest) and
an archive's config and manifests against their digests; the image's id is
the digest of its config, as Docker's is.

Layers are applied as an engine's storage does: later files replace earlier
ones, a whiteout ``.wh.NAME`` removes ``NAME`` of the layers below and an
opaque whiteout ``.wh..wh..opq`` everything of the layers below in its
directory. Refused, with the archive, the layer and the entry named: an
absolute path or one going up (``..``), an entry below a symbolic link, a hard
link to something not in the image or to a link. Device nodes are skipped (the
sandbox has its own ``/dev``), as an export skips them; extended attributes
are dropped. As root, owners are shifted into image sandboxes' id range; as an
ordinary user every file is that user's (who is root inside), as in every
image root an ordinary user exports.
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import hashlib
import json
import os
import platform
import re
import tarfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any, cast

import attrs

from agentkit._errors import SandboxError
from agentkit.images._imageroot import (
    ImageConfig,
    ImageRoot,
    RootWriter,
    cached_root,
    clean_name,
    default_cache_dir,
    image_root,
)

__all__ = [
    "ArchiveImage",
    "import_archive",
    "imported_root",
    "normalize_reference",
    "read_archive",
]

#: The most a JSON file of an archive (manifest, index, config) may hold.
_MAX_JSON = 16 << 20
_HEX = re.compile(r"^[0-9a-f]{64}$")
_REFERENCE = re.compile(r"^[a-z0-9][a-z0-9._/:@+-]*$", re.IGNORECASE)
_GZIP = b"\x1f\x8b"
_ZSTD = b"\x28\xb5\x2f\xfd"
_WHITEOUT = ".wh."
_OPAQUE = ".wh..wh..opq"
#: The OCI media types of an index (a list of manifests, one per platform).
_INDEX_TYPES = (
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
)


@attrs.frozen(kw_only=True)
class Layer:
    """One layer of an archived image: where it is and what it must be."""

    #: its path in the archive
    name: str
    #: sha256 of its uncompressed tar (the image config's ``rootfs.diff_ids``)
    diff_id: str
    #: sha256 of the blob as stored (an OCI layout's descriptor), when known
    digest: str | None = None


@attrs.frozen(kw_only=True)
class ArchiveImage:
    """One image in an archive: its id, config, names and layers."""

    image_id: str
    config: ImageConfig
    #: the names the archive gives it (normalized, see :func:`normalize_reference`)
    tags: tuple[str, ...]
    layers: tuple[Layer, ...]

    def names(self, extra: str | None = None) -> list[str]:
        """The names an import records: its tags, the short name of each Podman named
        ``localhost/NAME`` (what it built or loaded without a registry, found by
        ``NAME`` as Podman finds it), and ``extra`` (normalized)."""
        short = [t.removeprefix("localhost/") for t in self.tags if t.startswith("localhost/")]
        more = [normalize_reference(extra)] if extra else []
        return list(dict.fromkeys([*self.tags, *short, *more]))


# -- names --------------------------------------------------------------------


def normalize_reference(reference: str) -> str:
    """``reference`` as image names are compared here: Docker Hub's implicit parts taken
    off (``docker.io/library/python:3.11`` is ``python:3.11``) and ``:latest`` added
    when it has no tag or digest. Raises :class:`SandboxError` for what is no image name.
    """
    ref = reference.strip()
    if not _REFERENCE.match(ref) or ".." in ref or "//" in ref or ref.endswith((":", "/")):
        raise SandboxError(f"{reference!r} is not an image name (expected NAME[:TAG])")
    name, at, digest = ref.partition("@")
    slash, colon = name.rfind("/"), name.rfind(":")
    if not at and colon <= slash:
        name += ":latest"
    for prefix in ("docker.io/library/", "index.docker.io/library/", "docker.io/"):
        if name.startswith(prefix):
            name = name[len(prefix) :]
            break
    return f"{name}{at}{digest}"


# -- reading an archive -------------------------------------------------------


class _Source:
    """An archive's files by name: a tar's members or a directory's files."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.tar: tarfile.TarFile | None = None
        self.members: dict[str, tarfile.TarInfo] = {}
        if path.is_dir():
            return
        try:
            self.tar = tarfile.open(path, "r:")  # noqa: SIM115 (closed by close())
        except (OSError, tarfile.TarError) as exc:
            raise SandboxError(
                f"{path}: not an image archive (a docker save tar or an OCI layout): {exc}"
            ) from None
        for member in self.tar.getmembers():
            # a member named outside the archive is never read (a name refers to none)
            with contextlib.suppress(SandboxError):
                rel = clean_name(member.name) if not member.name.startswith("/") else None
                if rel is not None:
                    self.members[rel] = member

    def close(self) -> None:
        if self.tar is not None:
            self.tar.close()

    def _name(self, name: str) -> str:
        if name.startswith("/"):
            raise SandboxError(f"{self.path}: names a file by an absolute path: {name!r}")
        try:
            rel = clean_name(name)
        except SandboxError:
            raise SandboxError(f"{self.path}: names a file outside itself: {name!r}") from None
        if rel is None:
            raise SandboxError(f"{self.path}: names no file: {name!r}")
        return rel

    def has(self, name: str) -> bool:
        rel = self._name(name)
        if self.tar is None:
            return (self.path / rel).is_file()
        return rel in self.members

    def open(self, name: str) -> IO[bytes]:
        """The file ``name`` (a member of the tar, following its links; a directory's file)."""
        rel = self._name(name)
        if self.tar is None:
            try:
                return open(self.path / rel, "rb")
            except OSError as exc:
                raise SandboxError(f"{self.path}: cannot read {name}: {exc.strerror}") from None
        member = self.members.get(rel)
        f = None
        if member is not None:
            with contextlib.suppress(KeyError, tarfile.TarError):
                f = self.tar.extractfile(member)
        if f is None:
            raise SandboxError(f"{self.path}: has no file {name}")
        return f

    def json(self, name: str, digest: str | None = None) -> tuple[Any, bytes]:
        """The JSON file ``name`` and its bytes (checked against ``digest`` when given)."""
        with self.open(name) as f:
            data = f.read(_MAX_JSON + 1)
        if len(data) > _MAX_JSON:
            raise SandboxError(f"{self.path}: {name} is larger than {_MAX_JSON >> 20} MB")
        if digest is not None and _sha256(data) != digest:
            raise SandboxError(
                f"{self.path}: {name} is not what its digest says ({digest}, but its "
                f"content's is {_sha256(data)})"
            )
        try:
            return json.loads(data), data
        except ValueError as exc:
            raise SandboxError(f"{self.path}: {name} is not JSON: {exc}") from None


def _sha256(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _blob(source: _Source, digest: object) -> str:
    algo, _, hexd = str(digest).partition(":")
    if algo != "sha256" or not _HEX.match(hexd):
        raise SandboxError(f"{source.path}: unexpected digest {digest!r} (expected sha256:<hex>)")
    return f"blobs/sha256/{hexd}"


def _image(source: _Source, config_name: str, raw: bytes, config: Any, tags: list[str],
           layers: list[tuple[str, str | None]]) -> ArchiveImage:  # fmt: skip
    if not isinstance(config, dict):
        raise SandboxError(f"{source.path}: {config_name} is not an image config")
    rootfs = config.get("rootfs") or {}
    diff_ids = rootfs.get("diff_ids") if isinstance(rootfs, dict) else None
    if not isinstance(diff_ids, list) or len(diff_ids) != len(layers):
        raise SandboxError(
            f"{source.path}: the image's config {config_name} lists "
            f"{len(diff_ids) if isinstance(diff_ids, list) else 'no'} layers (rootfs.diff_ids) "
            f"but its manifest {len(layers)}"
        )
    names = []
    for tag in tags:
        try:
            names.append(normalize_reference(tag))
        except SandboxError as exc:
            raise SandboxError(f"{source.path}: {exc}") from None
    return ArchiveImage(
        image_id=_sha256(raw),
        config=ImageConfig.from_engine(config.get("config")),
        tags=tuple(dict.fromkeys(names)),
        layers=tuple(
            Layer(name=name, diff_id=str(diff_id), digest=digest)
            for (name, digest), diff_id in zip(layers, diff_ids, strict=True)
        ),
    )


def _docker_images(source: _Source) -> list[ArchiveImage]:
    manifest, _ = source.json("manifest.json")
    if not isinstance(manifest, list) or not manifest:
        raise SandboxError(f"{source.path}: manifest.json lists no image")
    images = []
    for i, item in enumerate(manifest):
        if not (
            isinstance(item, dict)
            and isinstance(item.get("Config"), str)
            and isinstance(item.get("Layers"), list)
            and all(isinstance(layer, str) for layer in item["Layers"])
        ):
            raise SandboxError(
                f"{source.path}: manifest.json entry {i} is not {{Config, RepoTags, Layers}}"
            )
        config, raw = source.json(item["Config"])
        tags = [str(t) for t in item.get("RepoTags") or ()]
        layers: list[tuple[str, str | None]] = [(name, None) for name in item["Layers"]]
        images.append(_image(source, item["Config"], raw, config, tags, layers))
    return images


def _platform_ok(descriptor: dict[str, Any]) -> bool:
    wanted = {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine(), platform.machine())
    plat = descriptor.get("platform")
    return not isinstance(plat, dict) or (
        plat.get("os", "linux") == "linux" and plat.get("architecture", wanted) == wanted
    )


def _oci_manifests(
    source: _Source, index: Any, where: str, depth: int = 0
) -> Iterator[tuple[dict[str, Any], list[str]]]:
    """(manifest descriptor, names) of every image manifest of an index, nested ones
    followed to this machine's platform."""
    manifests = index.get("manifests") if isinstance(index, dict) else None
    if not isinstance(manifests, list):
        raise SandboxError(f"{source.path}: {where} has no manifests list")
    for desc in manifests:
        if not isinstance(desc, dict):
            raise SandboxError(f"{source.path}: {where} has a manifest that is not an object")
        annotations = desc.get("annotations") or {}
        names = [
            str(v)
            for k, v in annotations.items()
            if k in ("io.containerd.image.name", "org.opencontainers.image.ref.name")
        ]
        if desc.get("mediaType") in _INDEX_TYPES:
            if depth > 3:
                raise SandboxError(f"{source.path}: indexes nested too deep")
            name = _blob(source, desc.get("digest"))
            nested, _ = source.json(name, str(desc.get("digest")))
            for found, more in _oci_manifests(source, nested, name, depth + 1):
                yield found, names + more
        elif _platform_ok(desc):
            yield desc, names


def _oci_images(source: _Source) -> list[ArchiveImage]:
    index, _ = source.json("index.json")
    images = []
    for desc, names in _oci_manifests(source, index, "index.json"):
        name = _blob(source, desc.get("digest"))
        manifest, _ = source.json(name, str(desc.get("digest")))
        config_desc = manifest.get("config") if isinstance(manifest, dict) else None
        layer_descs = manifest.get("layers") if isinstance(manifest, dict) else None
        if not isinstance(config_desc, dict) or not isinstance(layer_descs, list):
            raise SandboxError(f"{source.path}: {name} is not an image manifest")
        config_name = _blob(source, config_desc.get("digest"))
        config, raw = source.json(config_name, str(config_desc.get("digest")))
        layers: list[tuple[str, str | None]] = []
        for layer in layer_descs:
            if not isinstance(layer, dict):
                raise SandboxError(f"{source.path}: {name} has a layer that is not an object")
            layers.append((_blob(source, layer.get("digest")), str(layer.get("digest"))))
        # a bare tag ("3.11-slim", as skopeo writes it) names nothing on its own
        tags = [n for n in names if ":" in n or "/" in n]
        images.append(_image(source, config_name, raw, config, tags, layers))
    if not images:
        raise SandboxError(f"{source.path}: index.json lists no image for this platform")
    return images


def _images(source: _Source) -> list[ArchiveImage]:
    if source.has("manifest.json"):
        return _docker_images(source)
    if source.has("index.json"):
        return _oci_images(source)
    raise SandboxError(
        f"{source.path}: not an image archive: it has neither manifest.json (docker save) "
        "nor index.json (an OCI image layout)"
    )


def read_archive(path: Path) -> list[ArchiveImage]:
    """The images in the archive at ``path`` (a ``docker save`` tar, an OCI layout's
    directory or tar), without unpacking their layers."""
    source = _Source(path)
    try:
        return _images(source)
    finally:
        source.close()


# -- unpacking ----------------------------------------------------------------


class _Hashing:
    """A reader that hashes what passes through it."""

    def __init__(self, raw: IO[bytes]) -> None:
        self.raw = raw
        self.hash = hashlib.sha256()

    def read(self, size: int = -1) -> bytes:
        data = self.raw.read(size)
        self.hash.update(data)
        return data

    def drain(self) -> None:
        while self.read(1 << 20):
            pass

    def digest(self) -> str:
        return "sha256:" + self.hash.hexdigest()


def _clear_opaque(writer: RootWriter, directory: str, kept: set[str]) -> None:
    """Remove what the layers below left in ``directory`` (an opaque whiteout's): all
    but what this layer wrote (``kept``: its paths and their parents)."""
    path = os.path.join(writer.dest, directory) if directory else str(writer.dest)
    if os.path.islink(path) or not os.path.isdir(path):
        return
    for name in os.listdir(path):
        rel = f"{directory}/{name}" if directory else name
        if rel not in kept:
            writer.remove(rel)
        elif os.path.isdir(os.path.join(path, name)) and not os.path.islink(
            os.path.join(path, name)
        ):
            _clear_opaque(writer, rel, kept)


def _apply_layer(writer: RootWriter, tar: tarfile.TarFile, what: str) -> None:
    """Apply one layer's tar stream to the root ``writer`` writes."""
    written: set[str] = set()
    opaque: list[str] = []
    for member in tar:
        if member.name.startswith("/"):
            raise SandboxError(f"{what} has an absolute path: {member.name!r}")
        try:
            rel = clean_name(member.name)
        except SandboxError:
            raise SandboxError(f"{what} has a path going up: {member.name!r}") from None
        if rel is None:
            writer.add(tar, member)
            continue
        parent, _, base = rel.rpartition("/")
        try:
            if base == _OPAQUE:
                opaque.append(parent)
            elif base.startswith(_WHITEOUT):
                hidden = base[len(_WHITEOUT) :]
                if hidden in ("", ".", ".."):
                    raise SandboxError(
                        f"{what} has a whiteout that names no file of its directory: "
                        f"{member.name!r}"
                    )
                target = f"{parent}/{hidden}" if parent else hidden
                if target not in written:  # a whiteout hides the layers below only
                    writer.remove(target)
            else:
                writer.add(tar, member)
                written.add(rel)
                parts = rel.split("/")
                written.update("/".join(parts[:i]) for i in range(1, len(parts)))
        except SandboxError as exc:
            raise SandboxError(f"{what}: {exc}") from None
        except OSError as exc:
            raise SandboxError(
                f"{what}: cannot write {member.name!r}: {exc.strerror or exc}"
            ) from None
    for directory in opaque:
        try:
            _clear_opaque(writer, directory, written)
        except SandboxError as exc:
            raise SandboxError(f"{what}: {exc}") from None


def _unpack_layer(source: _Source, layer: Layer, writer: RootWriter, what: str) -> None:
    with source.open(layer.name) as blob:
        magic = blob.read(4)
        blob.seek(0)
        if magic.startswith(_ZSTD):
            raise SandboxError(
                f"{what} is zstd-compressed, which is not supported (only plain and "
                "gzip-compressed layers are): save the image with docker save, or convert it "
                "(skopeo copy --dest-compress-format gzip)"
            )
        stored = _Hashing(blob)
        plain = (
            _Hashing(cast(IO[bytes], gzip.GzipFile(fileobj=cast(IO[bytes], stored), mode="rb")))
            if magic.startswith(_GZIP)
            else stored
        )
        try:
            with tarfile.open(fileobj=cast(IO[bytes], plain), mode="r|") as tar:
                _apply_layer(writer, tar, what)
            plain.drain()
            stored.drain()
        except (tarfile.TarError, OSError, EOFError) as exc:
            raise SandboxError(f"{what} is not a readable tar: {exc}") from None
    for expected, found, says in (
        (layer.diff_id, plain.digest(), "the image's config (rootfs.diff_ids)"),
        (layer.digest, stored.digest(), "the manifest"),
    ):
        if expected is not None and found != expected:
            raise SandboxError(
                f"{what} is not what {says} says it is: its content's digest is {found}, "
                f"expected {expected}"
            )


def _unpack(path: Path, image: ArchiveImage, dest: Path, id_base: int | None) -> None:
    """Write ``image``'s root (its layers, in order) into ``dest`` (a new directory)."""
    source = _Source(path)
    try:
        dest.mkdir(mode=0o755)
        writer = RootWriter(dest, id_base)
        for i, layer in enumerate(image.layers, 1):
            _unpack_layer(source, layer, writer, f"{path}: layer {i} ({layer.name})")
        writer.finish()
    finally:
        source.close()


# -- the cache's names --------------------------------------------------------


def _name_file(cache_dir: Path, reference: str) -> Path:
    key = hashlib.sha256(reference.encode()).hexdigest()[:32]
    return cache_dir / f"imported-{key}.json"


def _record_name(cache_dir: Path, reference: str, image_id: str, archive: Path) -> None:
    target = _name_file(cache_dir, reference)
    tmp = target.with_name(f".{target.name}.{uuid.uuid4().hex[:8]}")
    data = {"reference": reference, "image_id": image_id, "archive": str(archive)}
    with open(tmp, "w") as f:
        json.dump(data, f)
    os.replace(tmp, target)


def imported_root(
    reference: str, cache_dir: Path | None = None, id_base: int | None = None
) -> ImageRoot | None:
    """The root imported as ``reference`` into ``cache_dir`` (:func:`import_archive`),
    or None when no archive was imported under that name (or its root has been pruned
    since: it must be imported again)."""
    cache_dir = cache_dir or default_cache_dir()
    try:
        wanted = normalize_reference(reference)
    except SandboxError:
        return None
    try:
        with open(_name_file(cache_dir, wanted)) as f:
            data = json.load(f)
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("reference") != wanted:
        return None
    try:
        return cached_root(str(data.get("image_id")), cache_dir, id_base)
    except SandboxError:
        return None


async def import_archive(
    path: Path,
    *,
    tag: str | None = None,
    cache_dir: Path | None = None,
    id_base: int | None = None,
) -> list[tuple[ArchiveImage, ImageRoot]]:
    """Unpack every image of the archive at ``path`` into the image-root cache (once:
    an image already there is kept) and record its names there, plus ``tag`` (only
    for an archive of one image), so that a task's ``image:`` of that name runs on it
    with no engine. ``id_base`` as the sandboxes that will run on it use (None: an
    ordinary user's roots, every file this user's)."""
    cache_dir = cache_dir or default_cache_dir()
    path = Path(path)
    images = read_archive(path)
    extra = normalize_reference(tag) if tag is not None else None
    if extra is not None and len(images) != 1:
        raise SandboxError(
            f"{path} holds {len(images)} images: --tag names one image; leave it out to "
            "import each under the names the archive gives it"
        )
    done = []
    for image in images:

        async def export(
            _ref: str, dest: Path, base: int | None, image: ArchiveImage = image
        ) -> None:
            await asyncio.to_thread(_unpack, path, image, dest, base)

        names = image.names(extra)
        root = await image_root(
            reference=names[0] if names else image.image_id,
            image_id=image.image_id,
            config=image.config,
            tool="archive",
            export=export,
            cache_dir=cache_dir,
            id_base=id_base,
        )
        for name in names:
            _record_name(cache_dir, name, image.image_id, path)
        done.append((image, root))
    return done
