"""``agentkit images import``: image roots from an image archive, with no engine and no root."""

from __future__ import annotations

from pathlib import Path

import anyio
import click

from agentkit.sandbox.local import import_image

__all__ = ["images_group", "import_cmd"]


@click.group("images")
def images_group() -> None:
    """Task images for the local sandbox."""


@images_group.command("import")
@click.argument("archive", type=click.Path(exists=True, path_type=Path), metavar="ARCHIVE")
@click.option(
    "--tag",
    metavar="REF",
    help="Also name the image REF (an archive of one image): a task's image: REF, or a "
    "compose service's, then runs on it. Default: the names the archive gives it.",
)
@click.option(
    "--image-cache",
    type=click.Path(file_okay=False, path_type=Path),
    help="The image-root cache to import into (default: ~/.cache/agentkit/image-roots); "
    "the sandboxes that run on it take the same -S image_cache=DIR.",
)
def import_cmd(archive: Path, tag: str | None, image_cache: Path | None) -> None:
    """Unpack the images of ARCHIVE into the local sandbox's image-root cache.

    ARCHIVE is a `docker save` (or `podman save`) tar, or an OCI image layout
    (a directory or a tar of one; plain or gzip layers). Each image's layers
    are checked against its manifest and applied in order (whiteouts too);
    the image is then found by its names (the archive's, and --tag) before any
    image tool is asked, so tasks whose images were imported run with no
    Docker, Podman or Buildah, as an ordinary user too. An image already in
    the cache is kept. Prints one line per image: its id, size on disk and names.
    """
    done = anyio.run(lambda: import_image(archive, tag=tag, image_cache=image_cache))
    for image, root in done:
        names = ", ".join(image.names(tag))
        click.echo(
            f"imported {image.image_id[:19]} ({len(image.layers)} layers) into {root.entry}: "
            + (names or "no name (give it one with --tag)")
        )
