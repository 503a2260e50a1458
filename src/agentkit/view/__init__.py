"""``agentkit view``: read runs in the browser, live while they are written.

>>> import agentkit.view
>>> agentkit.view.main("runs", port=8000, open_browser=False)     # doctest: +SKIP

The viewer serves a local page over one run directory or a folder of runs:
the runs, a run's rollouts (tasks × rollouts, filters, rubric, options), one
rollout (transcript, event timeline, rewards by metric, verifier output,
files), and two runs compared per task. It follows runs that are being
written. It only reads; see docs/viewer.md.

It needs the ``view`` extra (``pip install 'agentkit[view]'``: aiohttp);
``import agentkit`` never imports it. :class:`Catalog` names what a
directory holds as the viewer serves it (its runs, jobs and jobs' cells)
without the web stack.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from agentkit._errors import AgentkitError, missing_extra
from agentkit.view._catalog import Catalog
from agentkit.view._hosts import is_loopback

if TYPE_CHECKING:
    from aiohttp import web

__all__ = [
    "Catalog",
    "ViewerUnavailable",
    "create_app",
    "is_loopback",
    "main",
    "require_web_stack",
]


class ViewerUnavailable(AgentkitError):
    """The viewer's web stack (aiohttp) is not installed."""


def require_web_stack() -> None:
    """Raise :class:`ViewerUnavailable` with the install hint when aiohttp is missing."""
    try:
        import aiohttp  # noqa: F401
    except ImportError:
        raise ViewerUnavailable(missing_extra("agentkit view", "aiohttp", "view")) from None


def create_app(root: str | os.PathLike[str]) -> web.Application:
    """The viewer as an aiohttp application over ``root`` (for embedding or tests)."""
    require_web_stack()
    # deferred: the web stack (aiohttp, an extra) loads after require_web_stack's check
    from agentkit.view._server import create_app as make

    return make(os.fspath(root))


def main(
    root: str | os.PathLike[str],
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    open_browser: bool = True,
    on_ready: Callable[[str], Any] | None = None,
) -> None:
    """Serve ``root`` until Ctrl-C; ``on_ready(url)`` is called once it listens.

    ``port`` 0 takes a free port. The browser is opened on the URL unless
    ``open_browser`` is false.
    """
    require_web_stack()
    import asyncio

    # deferred: the web stack (aiohttp, an extra) loads after require_web_stack's check
    from agentkit.view._server import serve

    def ready(url: str) -> None:
        if on_ready is not None:
            on_ready(url)
        if open_browser:
            import threading
            import webbrowser

            threading.Thread(target=webbrowser.open, args=(url,), daemon=True).start()

    asyncio.run(serve(os.fspath(root), host=host, port=port, on_ready=ready))
