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
from agentkit._policy import Policy, PolicyBoard
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
        self._endpoint = where
        #: The endpoint's path (``/v1``, or ``""``): the proxy forwards only requests under it.
        self.base_path = where.path
        #: The base URL the agent is given: the proxy, with the endpoint's path.
        self.base_url = proxy_url + where.path
        self.api_key = api_key
        self.headers = dict(headers)
        self._settings = settings
        # a policy board this route follows, and what it made of its current policy
        self._board: PolicyBoard | None = None
        self._policy: Policy | None = None
        self._policy_settings = settings
        self._policy_endpoint = where
        self._versions: dict[int, int] = {}  # call index -> the policy version it went to
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

    # -- where calls go: the endpoint's, or the current policy's --------------------
    def follow(self, board: PolicyBoard) -> None:
        """Send each call from now on to ``board``'s current policy (its endpoint, when it
        names one, and its model name) and record its version on the call. A policy's
        endpoint must have the same path as the route's (``/v1``): the agent's base URL
        stays what it was given (a ValueError otherwise, when the call is made)."""
        self._board = board

    async def refresh_policy(self) -> None:
        """Before a call: the board's policy brought up to date (it may ask another
        process, for a rollout on a Ray worker)."""
        if self._board is not None:
            await self._board.refresh()

    def _current(self) -> None:
        """Take the board's current policy, if it changed since the last call."""
        board = self._board
        if board is None or board.current is self._policy:
            return
        policy = board.current
        endpoint = self._endpoint
        if policy.base_url is not None:
            endpoint = Endpoint.of(policy.base_url)
            if endpoint.path != self._endpoint.path:
                raise ValueError(
                    f"policy {policy.version}'s endpoint {policy.base_url!r} has the path "
                    f"{endpoint.path!r}, not the run's {self._endpoint.path!r}"
                )
        self._policy_endpoint = endpoint
        self._policy_settings = (
            self._settings
            if policy.model is None
            else attrs.evolve(self._settings, model=policy.model)
        )
        self._policy = policy

    @property
    def upstream(self) -> str:
        """The real endpoint's base URL (the current policy's, when the route follows one)."""
        self._current()
        return self._policy_endpoint.upstream

    @property
    def origin(self) -> str:
        """Where calls go: the endpoint's scheme, host and port (a call's path is kept)."""
        self._current()
        return self._policy_endpoint.origin

    @property
    def http_proxy(self) -> str | None:
        """The HTTP proxy the environment names for the endpoint (HTTPS_PROXY, NO_PROXY...)."""
        self._current()
        return self._policy_endpoint.http_proxy

    @property
    def settings(self) -> ProxySettings:
        """How the proxy treats this route's calls (with the current policy's model name)."""
        self._current()
        return self._policy_settings

    @property
    def policy_version(self) -> int | None:
        """The version of the policy calls go to now (None: the route follows none)."""
        return None if self._board is None else self._board.version

    def begin(self, snapshot: Callable[[str], ModelCall]) -> int:
        """A call starts: its index; ``snapshot(why)`` records it if the route closes first."""
        index = self._next
        self._next += 1
        self._open[index] = snapshot
        if self._board is not None:
            self._current()
            assert self._policy is not None
            self._versions[index] = self._policy.version
            self._board.called(self.rollout_id, self._policy.version)
        return index

    def _stamped(self, call: ModelCall) -> ModelCall:
        """``call`` with the version of the policy it was sent to."""
        version = self._versions.pop(call.index, None)
        if version is None or call.policy_version == version:
            return call
        return attrs.evolve(call, policy_version=version)

    def finish(self, call: ModelCall) -> None:
        """A call ended: keep its record (dropped when the route closed meanwhile)."""
        if self._open.pop(call.index, None) is not None and not self.closed:
            self._calls.append(self._stamped(call))

    @property
    def calls(self) -> list[ModelCall]:
        """The calls that ended so far, in the order they started."""
        return sorted(self._calls, key=lambda c: c.index)

    def close(self) -> list[ModelCall]:
        """Stop serving the key; every call, those in flight recorded as cut short."""
        if not self.closed:
            self.closed = True
            for snapshot in self._open.values():
                self._calls.append(self._stamped(snapshot("the rollout ended before the call did")))
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
