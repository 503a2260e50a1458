"""ProxyRoute: one rollout's way through the model proxy, and the calls it made.

A route is opened for each attempt of a rollout and closed when its harness
is done. It holds the rollout's key (what the agent is given as its API key:
the proxy finds the route by it), where its calls go (the real endpoint and
key, the run's headers), its session id and the :class:`ModelCall` records
of its calls, numbered in the order they started. Closing it refuses later
calls with that key and records the calls still in flight as cut short.
"""

from __future__ import annotations

import os
import secrets
import urllib.request
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import urlsplit

import attrs

from agentkit._calls import ModelCall
from agentkit._proxy_settings import ROUTE_KEY_PREFIX, ProxySettings

__all__ = ["KEY_PREFIX", "Endpoint", "ProxyRoute"]

#: How a rollout's proxy key starts (``akp-`` and 32 random URL-safe characters).
KEY_PREFIX = ROUTE_KEY_PREFIX


class ProxyRoute:
    """A rollout's route: give the agent :attr:`base_url` and :attr:`key`.

    ``upstream`` is the real endpoint's base URL (``http(s)://host[:port]/path``),
    ``api_key`` its key (None: the agent's key is dropped and none is sent),
    ``headers`` the run's request headers, sent with every call.
    """

    def __init__(
        self,
        *,
        proxy_url: str,
        rollout_id: str,
        upstream: str,
        api_key: str | None,
        headers: Mapping[str, str],
        settings: ProxySettings,
        on_close: Callable[[ProxyRoute], None],
        endpoint: Endpoint | None = None,
    ) -> None:
        where = endpoint or Endpoint.of(upstream)
        self.rollout_id = rollout_id
        self.key = KEY_PREFIX + secrets.token_urlsafe(24)
        self.upstream = where.upstream
        #: Where calls go: the endpoint's scheme, host and port (a call's path is kept).
        self.origin = where.origin
        #: The endpoint's path (``/v1``, or ``""``): the proxy forwards only requests under it.
        self.base_path = where.path
        #: The base URL the agent is given: the proxy, with the endpoint's path.
        self.base_url = proxy_url + where.path
        #: The HTTP proxy the environment names for the endpoint (HTTPS_PROXY, NO_PROXY...).
        self.http_proxy = where.http_proxy
        self.api_key = api_key
        self.headers = dict(headers)
        self.settings = settings
        self.session_id = f"{rollout_id or 'rollout'}-{secrets.token_hex(4)}"
        self.closed = False
        #: Protocol handlers' scratch space for this attempt's calls (``Wire.memory``).
        self.memory: dict[str, Any] = {}
        self._calls: list[ModelCall] = []
        self._open: dict[int, Callable[[str], ModelCall]] = {}
        self._next = 0
        self._on_close = on_close

    def __repr__(self) -> str:
        return f"ProxyRoute({self.rollout_id!r}, {self.upstream!r}, calls={len(self._calls)})"

    def begin(self, snapshot: Callable[[str], ModelCall]) -> int:
        """A call starts: its index; ``snapshot(why)`` records it if the route closes first."""
        index = self._next
        self._next += 1
        self._open[index] = snapshot
        return index

    def finish(self, call: ModelCall) -> None:
        """A call ended: keep its record (dropped when the route closed meanwhile)."""
        if self._open.pop(call.index, None) is not None and not self.closed:
            self._calls.append(call)

    @property
    def calls(self) -> list[ModelCall]:
        """The calls that ended so far, in the order they started."""
        return sorted(self._calls, key=lambda c: c.index)

    def close(self) -> list[ModelCall]:
        """Stop serving the key; every call, those in flight recorded as cut short."""
        if not self.closed:
            self.closed = True
            for snapshot in self._open.values():
                self._calls.append(snapshot("the rollout ended before the call did"))
            self._open.clear()
            self._on_close(self)
        return self.calls


@attrs.frozen
class Endpoint:
    """A model endpoint as routes use it, read once (the proxy keeps one per base URL)."""

    upstream: str
    origin: str
    path: str
    #: The HTTP proxy the environment names for it (HTTPS_PROXY, NO_PROXY...): read when
    #: the proxy first routes to the endpoint, not once per call or route.
    http_proxy: str | None

    @classmethod
    def of(cls, upstream: str) -> Endpoint:
        """The endpoint at ``upstream`` (``http(s)://host[:port]/path``); a ValueError
        when it is not an http(s) URL."""
        parts = urlsplit(upstream.rstrip("/"))
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"the model endpoint {upstream!r} is not an http(s) URL")
        return cls(
            upstream=upstream.rstrip("/"),
            origin=f"{parts.scheme}://{parts.netloc}",
            path=parts.path,
            http_proxy=_proxy_for(parts.scheme, parts.hostname),
        )


def _proxy_for(scheme: str, host: str) -> str | None:
    """The proxy the environment sets for ``scheme`` and ``host`` (None: none, or
    bypassed)."""
    if not any(k.lower().endswith("_proxy") for k in os.environ):
        return None
    proxies = urllib.request.getproxies()
    proxy = proxies.get(scheme) or proxies.get("all")
    if not proxy or urllib.request.proxy_bypass(host):
        return None
    return proxy if "://" in proxy else f"http://{proxy}"
