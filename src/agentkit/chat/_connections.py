"""Connection pools to model endpoints, kept per event loop and shared by many clients."""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Mapping
from typing import Any

from agentkit.chat._endpoint import ModelEndpoint

__all__ = ["ConnectionCache"]


class ConnectionCache(
    weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[tuple[Any, ...], ModelEndpoint]]
):
    """The connection pools of a harness (or any owner), per event loop and endpoint.

    A pool belongs to the event loop that opened it, so the cache maps each
    loop (weakly: a finished loop's entry goes with it) to its pools, one per
    base URL and header set (the API key goes with each request, so clients
    with different keys share a pool). Every :class:`~agentkit.chat.ChatClient`
    given ``connections=cache`` on one loop with the same endpoint shares one
    pool, so rollouts reuse each other's connections; the first of them sizes
    it (``max_connections``, ``request_timeout``).

    Keep one per harness, made in ``__init__``, and close it in the harness's
    ``aclose``::

        self._connections = ConnectionCache()
        ...
        client = ChatClient(url, model=m, connections=self._connections)
        ...
        await self._connections.aclose()

    A cache pickles empty (the Ray executor sends harnesses to worker
    processes, which open their own connections).
    """

    def pool(
        self,
        base_url: str,
        *,
        headers: Mapping[str, str],
        max_connections: int,
        timeout: float,
    ) -> ModelEndpoint:
        """The pool for this endpoint on the running loop (opened when there is none).

        Raises :class:`agentkit.chat._endpoint.EndpointError` for a base URL that is
        not http(s).
        """
        loop = asyncio.get_running_loop()
        per_loop = self.get(loop)
        if per_loop is None:
            per_loop = self[loop] = {}
        key = (base_url, tuple(sorted(headers.items())))
        endpoint = per_loop.get(key)
        if endpoint is None:
            endpoint = per_loop[key] = ModelEndpoint(
                base_url,
                api_key=None,
                headers=headers,
                max_connections=max_connections,
                timeout=timeout,
            )
        return endpoint

    async def aclose(self) -> None:
        """Close the pools opened on the running event loop (later calls open new ones)."""
        for endpoint in self.pop(asyncio.get_running_loop(), {}).values():
            await endpoint.aclose()

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), ())
