"""A pooled HTTP client for one OpenAI-compatible model endpoint.

Built on ``httpcore`` (the transport under httpx), which imports in a
fraction of the time the ``openai`` package takes: a one-task chat run is
then mostly Python's own start-up. Requests are plain JSON; errors become
:class:`EndpointError` with the ``error_kind`` the runner understands
(``model_rate_limit``, ``model_server_error``, ``model_connection``...).

Connections are kept per endpoint and reused across rollouts; the pool is
sized from the run's concurrency and split into a few smaller pools, because
a pool scans all of its connections on every request.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

from agentkit._errors import status_error_kind
from agentkit._limits import loads_bounded
from agentkit._sse import EventSplitter
from agentkit._version import __version__

__all__ = ["EndpointError", "ModelEndpoint", "retry_after_seconds"]

#: Connections per pool before the endpoint opens another pool.
_PER_POOL = 32
_MAX_POOLS = 8


class EndpointError(Exception):
    """A request to the model endpoint failed; ``kind`` is the result's ``error_kind``.

    ``retry_after``: the seconds the server asked to wait (its ``Retry-After``), if any.
    """

    def __init__(
        self, kind: str, message: str, status: int | None = None, retry_after: float | None = None
    ) -> None:
        super().__init__(message)
        self.kind = kind
        self.status = status
        self.retry_after = retry_after


def retry_after_seconds(headers: Any) -> float | None:
    """The wait a server asked for: ``retry-after-ms``, else ``Retry-After`` (seconds or
    an HTTP date), as the openai client reads them; None when absent or unreadable.

    ``headers`` is a mapping or a list of ``(name, value)`` pairs (bytes or text).
    """
    import email.utils
    import math
    import time

    pairs = headers.items() if isinstance(headers, Mapping) else headers
    found: dict[str, str] = {}
    for name, value in pairs:
        key = name.decode("latin-1") if isinstance(name, bytes) else str(name)
        found[key.lower()] = value.decode("latin-1") if isinstance(value, bytes) else str(value)
    raw_ms = found.get("retry-after-ms")
    if raw_ms is not None:
        try:
            value = float(raw_ms) / 1000
        except ValueError:
            value = math.nan
        if math.isfinite(value) and value >= 0:
            return value
    raw = found.get("retry-after")
    if raw is None:
        return None
    try:
        value = float(raw)
    except ValueError:
        when = email.utils.parsedate_tz(raw)
        if when is None:
            return None
        return max(0.0, email.utils.mktime_tz(when) - time.time())
    return value if math.isfinite(value) and value >= 0 else None


def _code(body: bytes) -> str | None:
    """An OpenAI-shaped error body's ``error.code`` (the model proxy's own errors say
    ``model_bad_response`` for an answer it could not pass on)."""
    if b"model_bad_response" not in body:
        return None
    try:
        data = loads_bounded(body)
    except ValueError:
        return None
    inner = data.get("error") if isinstance(data, dict) else None
    code = inner.get("code") if isinstance(inner, dict) else None
    return code if isinstance(code, str) else None


def _detail(body: bytes) -> str:
    try:
        data = loads_bounded(body)
    except ValueError:
        return body.decode("utf-8", "replace").strip()[:500] or "no message"
    if isinstance(data, dict):
        inner = data.get("error", data)
        if isinstance(inner, dict) and isinstance(inner.get("message"), str):
            return str(inner["message"])
        if isinstance(inner, str):
            return inner
        if isinstance(data.get("message"), str):
            return str(data["message"])
    return json.dumps(data)[:500]


class ModelEndpoint:
    """Connection pools to one base URL, with its API key and headers.

    ``max_connections`` bounds the connections kept open (the run's
    concurrency); ``timeout`` bounds each phase of a request (connect, each
    read, each write), as the openai client does. Proxy settings from the
    environment (``HTTPS_PROXY``, ``NO_PROXY``...) are honoured.
    """

    def __init__(
        self,
        base_url: str,
        *,
        api_key: str | None = None,
        headers: Mapping[str, str] | None = None,
        max_connections: int = 8,
        timeout: float = 600.0,
        pools: int | None = None,
    ) -> None:
        from urllib.parse import urlsplit

        self.base_url = base_url.rstrip("/")
        parts = urlsplit(self.base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise EndpointError(
                "model_bad_request", f"the base URL {base_url!r} is not an http(s) URL"
            )
        self.timeout = timeout
        self.max_connections = max(1, max_connections)
        count = pools or min(_MAX_POOLS, max(1, -(-self.max_connections // _PER_POOL)))
        self._pool_size = max(1, -(-self.max_connections // count))
        self._count = count
        self._pools: list[Any] | None = None
        self.in_flight = [0] * count
        self.served = [0] * count
        base = [(b"Accept", b"application/json"), (b"User-Agent", _user_agent())]
        if api_key is not None:
            base.append((b"Authorization", f"Bearer {api_key}".encode()))
        self._headers = base + [(k.encode(), str(v).encode()) for k, v in (headers or {}).items()]
        self._proxy = _proxy_for(parts.scheme, parts.hostname)
        self.closed = False

    def __repr__(self) -> str:
        return f"ModelEndpoint({self.base_url!r}, max_connections={self.max_connections})"

    def _pool(self) -> tuple[int, Any]:
        import httpcore

        if self._pools is None:
            size = self._pool_size
            if self._proxy is not None:
                self._pools = [
                    httpcore.AsyncHTTPProxy(
                        proxy_url=self._proxy,
                        max_connections=size,
                        max_keepalive_connections=size,
                        keepalive_expiry=5.0,
                    )
                    for _ in range(self._count)
                ]
            else:
                self._pools = [
                    httpcore.AsyncConnectionPool(
                        max_connections=size, max_keepalive_connections=size, keepalive_expiry=5.0
                    )
                    for _ in range(self._count)
                ]
        in_flight = self.in_flight
        index = in_flight.index(min(in_flight))  # the least busy pool; the first on a tie
        return index, self._pools[index]

    def url(self, path: str, query: Mapping[str, Any] | None = None) -> str:
        """The full URL of ``path`` (``/chat/completions``) with an optional query."""
        url = self.base_url + path
        if query:
            from urllib.parse import urlencode

            url += "?" + urlencode({k: str(v) for k, v in query.items()})
        return url

    def _request_args(
        self, body: Any, headers: Mapping[str, Any] | None, timeout: float | None
    ) -> dict[str, Any]:
        extra = list(self._headers)
        content = b""
        if body is not None:
            content = json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()
            extra.append((b"Content-Type", b"application/json"))
        for name, value in (headers or {}).items():
            extra = [h for h in extra if h[0].lower() != name.lower().encode()]
            extra.append((name.encode(), str(value).encode()))
        t = self.timeout if timeout is None else timeout
        return {
            "headers": extra,
            "content": content,
            "extensions": {"timeout": {"connect": t, "read": t, "write": t, "pool": t}},
        }

    async def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        query: Mapping[str, Any] | None = None,
        headers: Mapping[str, Any] | None = None,
        timeout: float | None = None,
    ) -> tuple[int, bytes]:
        """One request; returns the status and body (transport failures raise EndpointError)."""
        status, _headers, content = await self._request(
            method, path, body, query=query, headers=headers, timeout=timeout
        )
        return status, content

    async def _request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        query: Mapping[str, Any] | None = None,
        headers: Mapping[str, Any] | None = None,
        timeout: float | None = None,
        max_bytes: int | None = None,
        first_byte: Callable[[], object] | None = None,
    ) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
        index, pool = self._pool()
        self.in_flight[index] += 1
        self.served[index] += 1
        try:
            args = self._request_args(body, headers, timeout)
            if max_bytes is None and first_byte is None:
                response = await pool.request(method, self.url(path, query), **args)
                return response.status, response.headers, response.content
            async with pool.stream(method, self.url(path, query), **args) as response:
                parts: list[bytes] = []
                size = 0
                async for chunk in response.aiter_stream():
                    if first_byte is not None and not parts:
                        first_byte()
                    size += len(chunk)
                    if max_bytes is not None and size > max_bytes:  # never held whole
                        raise EndpointError(
                            "model_bad_response",
                            f"the model's reply is larger than {max_bytes} bytes; refused",
                        )
                    parts.append(chunk)
                return response.status, response.headers, b"".join(parts)
        except Exception as exc:
            raise _transport_error(exc) from exc
        finally:
            self.in_flight[index] -= 1

    async def post_json(
        self,
        path: str,
        body: Any,
        *,
        query: Mapping[str, Any] | None = None,
        headers: Mapping[str, Any] | None = None,
        max_bytes: int | None = None,
        first_byte: Callable[[], object] | None = None,
    ) -> Any:
        """POST JSON and return the JSON answer; a non-2xx status raises EndpointError.

        An answer that is not JSON, or is nested deeper than
        :data:`~agentkit._limits.MAX_NESTING_DEPTH` levels, is refused
        (``model_bad_response``). With ``max_bytes``, a larger answer is
        refused likewise without being held whole. ``first_byte`` is called
        when the first bytes of the answer's body arrive.
        """
        status, answer_headers, content = await self._request(
            "POST",
            path,
            body,
            query=query,
            headers=headers,
            max_bytes=max_bytes,
            first_byte=first_byte,
        )
        if status >= 300:
            message = f"model endpoint answered HTTP {status}: {_detail(content)}"
            wait = retry_after_seconds(answer_headers)
            kind = "model_bad_response" if _code(content) == "model_bad_response" else None
            raise EndpointError(kind or status_error_kind(status), message, status, wait)
        try:
            return loads_bounded(content)
        except ValueError as exc:
            raise EndpointError(
                "model_bad_response", f"the model endpoint sent a malformed response: {exc}"
            ) from None

    async def stream_events(
        self,
        path: str,
        body: Any,
        *,
        query: Mapping[str, Any] | None = None,
        headers: Mapping[str, Any] | None = None,
    ) -> AsyncIterator[dict[str, Any]]:
        """POST JSON and yield the JSON payloads of the server-sent event stream.

        Reads to the end after ``[DONE]`` so the connection can be reused; an
        ``error`` payload raises EndpointError (kind ``model_error``; ``model_bad_response``
        when its code says so, as the model proxy's does for an answer it cut off), and a
        payload that is not JSON or is nested too deep one of kind
        ``model_bad_response``.
        """
        index, pool = self._pool()
        self.in_flight[index] += 1
        self.served[index] += 1
        try:
            async with pool.stream(
                "POST", self.url(path, query), **self._request_args(body, headers, None)
            ) as response:
                if response.status >= 300:
                    content = await response.aread()
                    raise EndpointError(
                        status_error_kind(response.status),
                        f"model endpoint answered HTTP {response.status}: {_detail(content)}",
                        response.status,
                        retry_after_seconds(response.headers),
                    )
                async for event in _events(response.aiter_stream()):
                    yield event
        except EndpointError:
            raise
        except ValueError as exc:
            raise EndpointError(
                "model_bad_response", f"the model endpoint sent a malformed event: {exc}"
            ) from None
        except Exception as exc:
            raise _transport_error(exc) from exc
        finally:
            self.in_flight[index] -= 1

    async def aclose(self) -> None:
        """Close every connection."""
        self.closed = True
        pools, self._pools = self._pools, None
        for pool in pools or ():
            await pool.aclose()


async def _events(chunks: AsyncIterator[bytes]) -> AsyncIterator[dict[str, Any]]:
    """Server-sent events' JSON payloads, up to ``[DONE]`` (the stream is read to its
    end), cut with :class:`~agentkit._sse.EventSplitter`: one event holds at most
    :data:`~agentkit._sse.MAX_EVENT_BYTES`, and is UTF-8."""
    splitter = EventSplitter(errors="strict")
    done = False
    async for chunk in chunks:
        for event in splitter.feed(chunk):
            if not done and event.data is not None:
                done = event.data.startswith("[DONE]")
                payload = None if done else _payload(event.data)
                if payload is not None:
                    yield payload
    last = splitter.close()
    if last is not None and last.data is not None and not done:  # no blank line after it
        payload = None if last.data.startswith("[DONE]") else _payload(last.data)
        if payload is not None:
            yield payload


def _payload(text: str) -> dict[str, Any] | None:
    """One event's JSON object (None: not an object); an ``error`` object raises
    :class:`EndpointError`."""
    event = loads_bounded(text)
    if isinstance(event, dict) and event.get("error"):
        error = event["error"]
        message = error.get("message") if isinstance(error, dict) else None
        if not isinstance(message, str) or not message:
            message = "An error occurred during streaming"
        # the model proxy ends a stream it had to cut off with code model_bad_response
        code = error.get("code") if isinstance(error, dict) else None
        raise EndpointError(
            "model_bad_response" if code == "model_bad_response" else "model_error", message
        )
    return event if isinstance(event, dict) else None


def _transport_error(exc: BaseException) -> EndpointError:
    import httpcore

    if isinstance(exc, EndpointError):
        return exc
    if isinstance(exc, httpcore.TimeoutException):
        return EndpointError("model_connection", "the model request timed out")
    reason = str(exc) or "the connection was closed"
    if isinstance(exc, httpcore.ProxyError):
        return EndpointError("model_connection", f"the proxy failed: {reason}")
    return EndpointError(
        "model_connection", f"the connection to the model endpoint failed ({reason})"
    )


def _proxy_for(scheme: str, host: str) -> str | None:
    """The proxy URL the environment sets for this scheme and host, if any."""
    import os

    if not any(k.lower().endswith("_proxy") for k in os.environ):
        return None  # the common case, without importing urllib.request
    import urllib.request

    proxies = urllib.request.getproxies()
    proxy = proxies.get(scheme) or proxies.get("all")
    if not proxy or urllib.request.proxy_bypass(host):
        return None
    return proxy if "://" in proxy else f"http://{proxy}"


def _user_agent() -> bytes:
    return f"agentkit/{__version__}".encode()
