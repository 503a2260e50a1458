"""A run's files (``/files/RUN/PATH``): shown as text or images, or downloaded, never run.

Only a regular file inside the run directory is sent (a path with ``..``,
an absolute path or a symlink leading outside is refused:
:func:`agentkit.view._paths.inside`), with headers that keep the browser from
running it: a sandboxing Content-Security-Policy, no sniffing, and text as
``text/plain`` (never HTML).
"""

from __future__ import annotations

import mimetypes
from pathlib import Path

from aiohttp import web

from agentkit.view._catalog import Catalog
from agentkit.view._http import CATALOG, in_worker
from agentkit.view._paths import NotFound, Refused, inside

__all__ = ["file", "routes"]

_FILE_HEADERS = {
    # a run's files are shown, never executed: no scripts, no plugins, no same origin
    "Content-Security-Policy": (
        "sandbox; default-src 'none'; img-src 'self'; style-src 'unsafe-inline'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}
_IMAGES = {
    ".png": "image/png",
    ".jpg": "image/jpeg",
    ".jpeg": "image/jpeg",
    ".gif": "image/gif",
    ".webp": "image/webp",
}

routes = web.RouteTableDef()


def file(catalog: Catalog, name: str, relative: str) -> Path:
    """A regular file inside the run (refused when the path leads outside the root)."""
    cached = catalog.run(name)
    path = inside(catalog.root, relative, base=cached.path)
    if cached.path != path and cached.path not in path.parents:
        raise Refused(f"refused path {relative!r}: outside the run directory")
    if not path.is_file():
        raise NotFound(f"not a file: {relative}")
    return path


def _inline_type(path: Path) -> str:
    """Images as themselves; text as text/plain (never HTML); anything else as bytes."""
    image = _IMAGES.get(path.suffix.lower())
    if image:
        return image
    try:
        with open(path, "rb") as fh:
            head = fh.read(8192)
    except OSError:
        return "application/octet-stream"
    if b"\x00" in head:
        return "application/octet-stream"
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as exc:
        if exc.start < len(head) - 4:  # not just a character cut at the end
            return "application/octet-stream"
    guessed = mimetypes.guess_type(path.name)[0] or ""
    if guessed.startswith("image/") and guessed != "image/svg+xml":
        return guessed
    return "text/plain; charset=utf-8"


@routes.get("/files/{run}/{path:.+}")
async def _file(request: web.Request) -> web.StreamResponse:
    catalog, info = request.app[CATALOG], request.match_info
    path = await in_worker(request, file, catalog, info["run"], info["path"])
    headers = dict(_FILE_HEADERS)
    name = path.name.replace('"', "")
    if request.query.get("download"):
        headers["Content-Type"] = "application/octet-stream"
        headers["Content-Disposition"] = f'attachment; filename="{name}"'
    else:
        headers["Content-Type"] = await in_worker(request, _inline_type, path)
        headers["Content-Disposition"] = f'inline; filename="{name}"'
    return web.FileResponse(path, headers=headers)
