"""Where Fleet task files come from: S3, a local file, or a directory.

S3 layout (Fleet's): ``s3://BUCKET/DATA_VERSION/openenv/all_<modality>.json``;
an object at the bucket's root (``s3://BUCKET/tasks.json``) has no version.
A local directory may use the same layout (``DIR/DATA_VERSION/openenv/...``)
or simply hold ``*.json`` task files. The data version is checked before
anything runs: a missing one is an error that lists the versions that exist.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs

from agentkit import AgentkitError, ValidationError, missing_extra
from agentkit.validation import load_json

__all__ = ["FleetSourceError", "TaskFile", "load_task_files"]

OPENENV_DIR = "openenv"


class FleetSourceError(AgentkitError):
    """A Fleet task source could not be read (missing file, bucket or data version)."""


@attrs.frozen
class TaskFile:
    """One task file's parsed JSON and where it came from.

    ``problem`` says why a file of a several-file source could not be read
    (its ``data`` is then None): the other files still load.
    """

    source: str
    data: Any
    problem: str | None = None


def _parse(text: bytes | str, source: str) -> Any:
    """Strict JSON: duplicate keys, NaN and nesting deeper than the cap are errors."""
    try:
        return load_json(text)
    except ValidationError as exc:
        raise FleetSourceError(f"{source}: not valid JSON ({exc.reason})") from None


def _task_file(raw: bytes, source: str, *, several: bool) -> TaskFile:
    """One file's :class:`TaskFile`; a bad one of several is a problem, not an error."""
    try:
        return TaskFile(source, _parse(raw, source))
    except FleetSourceError as exc:
        if not several:
            raise
        return TaskFile(source, None, str(exc).removeprefix(f"{source}: "))


def _modality_file(modality: str) -> str:
    return f"all_{modality}.json"


# -- local ---------------------------------------------------------------


def _local_versions(root: Path) -> list[str]:
    return sorted(p.name for p in root.iterdir() if p.is_dir() and (p / OPENENV_DIR).is_dir())


def _load_local(path: Path, data_version: str | None, modality: str | None) -> list[TaskFile]:
    if not path.exists():
        raise FleetSourceError(f"{path}: no such file or directory")
    if path.is_file():
        return [TaskFile(str(path), _parse(path.read_bytes(), str(path)))]
    directory = path
    if data_version is not None:
        versions = _local_versions(path)
        if data_version not in versions:
            raise FleetSourceError(
                f"{path}: data_version {data_version!r} not found; "
                f"existing versions: {', '.join(versions) or 'none'}"
            )
        directory = path / data_version / OPENENV_DIR
    wanted = directory / _modality_file(modality) if modality is not None else None
    if wanted is not None and (wanted.is_file() or data_version is not None):
        # Fleet's layout: one file per modality
        if not wanted.is_file():
            raise FleetSourceError(f"{wanted}: no task file for modality {modality!r}")
        files = [wanted]
    else:  # any directory of task files (the caller keeps the modality's records)
        files = sorted(directory.glob("*.json"))
        if not files:
            raise FleetSourceError(f"{directory}: no *.json task files")
    several = len(files) > 1
    return [_task_file(f.read_bytes(), str(f), several=several) for f in files]


# -- S3 ------------------------------------------------------------------


def _s3_client() -> Any:
    try:
        import boto3  # type: ignore[import-untyped]
    except ImportError:
        raise FleetSourceError(missing_extra("reading Fleet tasks from S3", "boto3")) from None
    # boto3 reads the usual credentials and AWS_ENDPOINT_URL from the environment.
    return boto3.client("s3")


def s3_data_versions(client: Any, bucket: str) -> list[str]:
    """The data versions in a bucket: its top-level prefixes."""
    versions: list[str] = []
    paginator = client.get_paginator("list_objects_v2")
    for page in paginator.paginate(Bucket=bucket, Delimiter="/"):
        for prefix in page.get("CommonPrefixes", []):
            versions.append(prefix["Prefix"].rstrip("/"))
    return sorted(versions)


def _s3_error(exc: Exception, what: str) -> FleetSourceError:
    code = getattr(exc, "response", {}).get("Error", {}).get("Code", "")
    return FleetSourceError(f"{what}: {code or type(exc).__name__}: {exc}")


def _load_s3(url: str, data_version: str | None, modality: str | None) -> list[TaskFile]:
    rest = url[len("s3://") :]
    bucket, _, key = rest.partition("/")
    if not bucket:
        raise FleetSourceError(f"{url}: no bucket name")
    client = _s3_client()
    key = key.strip("/")
    if key.endswith(".json") and "/" not in key:
        # an object at the bucket's root: no data version to check
        if data_version is not None:
            raise FleetSourceError(
                f"{url}: the object is not under a data version (BUCKET/VERSION/...); "
                f"drop the data_version option {data_version!r}"
            )
        return [_s3_file(client, bucket, key, several=False)]
    if key:
        version_in_key = key.split("/", 1)[0]
        if data_version is not None and data_version != version_in_key:
            raise FleetSourceError(
                f"{url}: data_version option {data_version!r} contradicts the key's "
                f"version {version_in_key!r}"
            )
        data_version = version_in_key
    try:
        versions = s3_data_versions(client, bucket)
    except Exception as exc:
        raise _s3_error(exc, f"s3://{bucket}") from None
    if data_version is None:
        raise FleetSourceError(
            f"{url}: which data version? give -T data_version=V; "
            f"existing versions: {', '.join(versions) or 'none'}"
        )
    if data_version not in versions:
        raise FleetSourceError(
            f"s3://{bucket}: data_version {data_version!r} not found; "
            f"existing versions: {', '.join(versions) or 'none'}"
        )
    if key.endswith(".json"):
        keys = [key]
    else:
        prefix = f"{data_version}/{OPENENV_DIR}/"
        if modality is not None:
            keys = [prefix + _modality_file(modality)]
        else:
            listed = client.list_objects_v2(Bucket=bucket, Prefix=prefix)
            keys = sorted(
                o["Key"] for o in listed.get("Contents", []) if o["Key"].endswith(".json")
            )
            if not keys:
                raise FleetSourceError(f"s3://{bucket}/{prefix}: no *.json task files")
    return [_s3_file(client, bucket, k, several=len(keys) > 1) for k in keys]


def _s3_file(client: Any, bucket: str, key: str, *, several: bool) -> TaskFile:
    where = f"s3://{bucket}/{key}"
    try:
        body = client.get_object(Bucket=bucket, Key=key)["Body"].read()
    except Exception as exc:
        raise _s3_error(exc, where) from None
    return _task_file(body, where, several=several)


def load_task_files(
    argument: str, *, data_version: str | None = None, modality: str | None = None
) -> list[TaskFile]:
    """Read the task files named by ``argument`` (``s3://...``, a file or a directory)."""
    if argument.startswith("s3://"):
        return _load_s3(argument, data_version, modality)
    if not argument:
        raise FleetSourceError(
            "no Fleet task source given: use fleet:PATH, fleet:DIR or fleet:s3://BUCKET/..."
        )
    return _load_local(Path(argument).expanduser(), data_version, modality)


def iter_sources(files: list[TaskFile]) -> Iterator[tuple[str, Any]]:
    """(source, data) pairs."""
    for f in files:
        yield f.source, f.data
