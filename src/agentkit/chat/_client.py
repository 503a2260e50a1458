"""The chat client: chat completions from an OpenAI-compatible endpoint, typed."""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from typing import Any

import anyio

from agentkit._context import RunContext, is_secret_header
from agentkit._proxy_settings import is_route_key
from agentkit._redact import MARKER, register_secret
from agentkit.chat._connections import ConnectionCache
from agentkit.chat._endpoint import EndpointError, ModelEndpoint
from agentkit.chat._errors import ModelCallError
from agentkit.chat._request import RequestShape
from agentkit.chat._response import Cap, ChatResponse, StreamReader, read_completion

__all__ = [
    "DEFAULT_BASE_URL",
    "DEFAULT_CONNECTIONS",
    "MAX_REPLY_BYTES",
    "MAX_REPLY_CHARS",
    "ChatClient",
]

#: The endpoint when neither the client nor ``OPENAI_BASE_URL`` names one.
DEFAULT_BASE_URL = "https://api.openai.com/v1"
#: Connections kept to an endpoint when the caller does not say (a run's concurrency).
DEFAULT_CONNECTIONS = 100
#: A reply's text (content, reasoning, each tool call's arguments) longer than
#: this many characters is cut to it (see :attr:`ChatResponse.cuts`).
MAX_REPLY_CHARS = 1_000_000
#: A reply body (not streamed) larger than this many bytes is refused as a bad
#: response: JSON cannot be cut, and reading it would hold it all in memory.
MAX_REPLY_BYTES = 64 * 1024 * 1024

_PATH = "/chat/completions"


class ChatClient:
    """Chat completions from one OpenAI-compatible endpoint, as plain JSON over pooled
    connections (``httpcore``; the ``openai`` package is never imported).

    >>> async with ChatClient("http://127.0.0.1:8000/v1", model="m") as client:  # doctest: +SKIP
    ...     response = await client.complete([{"role": "user", "content": "2+2?"}])
    >>> response.text, response.usage.output_tokens  # doctest: +SKIP

    - ``base_url``: the endpoint (else ``OPENAI_BASE_URL``, else
      :data:`DEFAULT_BASE_URL`); ``model``: the model every call names.
    - ``api_key``: sent as ``Authorization: Bearer`` with each request (not
      with the connection pool, which clients with other keys share); none, no
      header. It is
      registered with agentkit's redactor (as are the values of secret-looking
      ``headers``), so nothing agentkit writes shows it, and it is blanked out
      of every error message, even when the server echoes it.
    - ``headers``: sent with every call.
    - ``sampling``: the run's sampling arguments, read as the ``openai``
      client reads ``chat.completions.create`` keywords: ``temperature``,
      ``seed``, ``tools``... go in the body; ``extra_body``, then any other
      argument (``top_k``, ``min_p``), are merged in over them;
      ``extra_headers`` and ``extra_query`` become headers and query;
      ``model``, ``messages``, ``stream``, ``stream_options`` and ``timeout``
      are the client's own and ignored.
    - ``max_tokens``: sent over a sampling argument of that name when given.
    - ``token_ids``: ask for vLLM's token ids and logprobs (``return_token_ids``,
      ``logprobs``) unless the sampling arguments set them; token fields a
      server returns are in the response either way.
    - ``stream``: stream calls by default (``stream_options.include_usage``
      gives the usage); :meth:`complete` may say otherwise per call.
    - ``request_timeout``: seconds one call may take, start to end
      (connecting, sending, and reading the whole reply or stream), so a
      server that drips its answer cannot hold a call past it.
    - ``max_connections``: connections kept open to the endpoint (the run's
      concurrency); ``connections``: a :class:`~agentkit.chat.ConnectionCache`
      to share pools with other clients on the running loop (the client is then
      made on that loop, and :meth:`aclose` leaves the pools to the cache's
      owner). Without one, the client opens its own, closed by :meth:`aclose`.
    - ``max_reply_chars``: texts longer than this are cut to it (None: never);
      ``max_reply_bytes``: a larger body (not streamed) is refused unread.

    A base URL that is not http(s) raises :class:`~agentkit.chat.ModelCallError`
    (``model_bad_request``) here; every failure of a call raises one from
    :meth:`complete`. The client never retries: retries belong to the runner,
    which reads ``retry_after``.
    """

    def __init__(
        self,
        base_url: str | None = None,
        *,
        model: str,
        api_key: str | None = None,
        headers: Mapping[str, str] | None = None,
        sampling: Mapping[str, Any] | None = None,
        max_tokens: int | None = None,
        token_ids: bool = False,
        stream: bool = False,
        request_timeout: float = 600.0,
        max_connections: int = DEFAULT_CONNECTIONS,
        max_reply_chars: int | None = MAX_REPLY_CHARS,
        max_reply_bytes: int | None = MAX_REPLY_BYTES,
        connections: ConnectionCache | None = None,
    ) -> None:
        if not request_timeout > 0:
            raise ValueError(f"request_timeout: expected > 0 seconds, got {request_timeout}")
        self.base_url = base_url or os.environ.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL
        self.model = model
        self.stream = stream
        self.request_timeout = request_timeout
        self.max_reply_chars = max_reply_chars
        self.max_reply_bytes = max_reply_bytes
        self._api_key = api_key
        headers = dict(headers or {})
        if not is_route_key(api_key):  # a proxy route's key opens nothing once it ends:
            register_secret(api_key)  # one each rollout would grow every later redaction
        for name, value in headers.items():
            if is_secret_header(name):
                register_secret(value)
        self._sampling = dict(sampling or {})
        self._max_tokens = max_tokens
        self._token_ids = token_ids
        self._shapes: dict[bool, RequestShape] = {}
        self._owns_pool = connections is None
        try:
            if connections is None:
                self._pool = ModelEndpoint(
                    self.base_url,
                    api_key=None,
                    headers=headers,
                    max_connections=max_connections,
                    timeout=request_timeout,
                )
            else:
                self._pool = connections.pool(
                    self.base_url,
                    headers=headers,
                    max_connections=max_connections,
                    timeout=request_timeout,
                )
        except EndpointError as exc:
            raise self._error(exc.kind, str(exc)) from None

    @classmethod
    def for_run(
        cls,
        context: RunContext,
        *,
        model: str | None = None,
        base_url: str | None = None,
        max_tokens: int | None = None,
        tools: bool = False,
        token_ids: bool = False,
        stream: bool = False,
        request_timeout: float = 600.0,
        max_reply_chars: int | None = MAX_REPLY_CHARS,
        max_reply_bytes: int | None = MAX_REPLY_BYTES,
        connections: ConnectionCache | None = None,
    ) -> ChatClient:
        """A client for a rollout's model calls, as its :class:`~agentkit.RunContext`
        says: the run's endpoint, model, API key (``resolved_api_key``), headers,
        sampling arguments, output-token limit and concurrency.

        >>> client = ChatClient.for_run(context, connections=self._connections)  # doctest: +SKIP

        - ``model``, ``base_url``: a harness's own option over the run's (the
          context's model, else ``""``; its base URL, else the client's default).
        - ``max_tokens``: sent over a ``max_tokens`` sampling argument; without
          it, a ``max_tokens`` sampling argument wins over the run's limit
          (``context.limits.max_tokens``), which is sent only when there is none.
        - ``tools``: send the run's ``tools`` sampling argument; by default it is
          left out (the harness gives the model tools of its own, or none).
        - The connections kept open: the run's ``max_connections``, else
          :data:`DEFAULT_CONNECTIONS`.
        - The other arguments are :class:`ChatClient`'s.

        Raises :class:`~agentkit.chat.ModelCallError` (``model_bad_request``) for a
        base URL that is not http(s), as :class:`ChatClient` does.
        """
        sampling = dict(context.sampling_args)
        if not tools:
            sampling.pop("tools", None)
        if max_tokens is None and "max_tokens" not in sampling:
            max_tokens = context.limits.max_tokens
        return cls(
            base_url or context.base_url,
            model=model or context.model or "",
            api_key=context.resolved_api_key,
            headers=context.headers,
            sampling=sampling,
            max_tokens=max_tokens,
            token_ids=token_ids,
            stream=stream,
            request_timeout=request_timeout,
            max_connections=context.max_connections or DEFAULT_CONNECTIONS,
            max_reply_chars=max_reply_chars,
            max_reply_bytes=max_reply_bytes,
            connections=connections,
        )

    def __repr__(self) -> str:
        return f"ChatClient({self.base_url!r}, model={self.model!r}, stream={self.stream!r})"

    async def __aenter__(self) -> ChatClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the client's own connections (shared ones stay open for the cache's owner)."""
        if self._owns_pool:
            await self._pool.aclose()

    def request_body(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        stream: bool | None = None,
    ) -> dict[str, Any]:
        """The JSON body :meth:`complete` sends for these arguments."""
        streamed = self.stream if stream is None else stream
        shape = self._shape(streamed)
        body: dict[str, Any] = {"model": self.model, "messages": list(messages), **shape.body}
        if tools is not None:
            body["tools"] = list(tools)
        return body

    async def complete(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        stream: bool | None = None,
    ) -> ChatResponse:
        """One chat completion of ``messages``; the reply read whole, or streamed.

        ``tools`` (OpenAI's function tools) are sent over a ``tools`` sampling
        argument; ``stream`` overrides the client's default for this call.
        Raises :class:`~agentkit.chat.ModelCallError` when the call fails.
        """
        streamed = self.stream if stream is None else stream
        body = self.request_body(messages, tools=tools, stream=streamed)
        shape = self._shape(streamed)
        started_at = time.time()
        start = time.monotonic()
        fields: dict[str, Any] | None = None
        first: list[float] = []
        try:
            # request_timeout bounds the whole call: the HTTP client's timeout is per
            # read, so a server dripping a byte a second would never reach it
            with anyio.move_on_after(self.request_timeout):
                if streamed:
                    fields = await self._streamed(body, shape, start, first)
                else:
                    fields = await self._plain(body, shape, start, first)
        except ModelCallError as exc:
            raise self._error(exc.kind, str(exc), exc.status, exc.retry_after) from None
        except EndpointError as exc:  # not chained: the server's text may hold the key
            raise self._error(exc.kind, str(exc), exc.status, exc.retry_after) from None
        except Exception as exc:
            message = f"the model call failed: {type(exc).__name__}: {exc}"
            raise self._error("model_error", message) from exc
        if fields is None:
            raise self._error(
                "model_connection",
                "the model request timed out: no complete answer within "
                f"request_timeout={self.request_timeout:g}s",
            )
        return ChatResponse(
            **fields,
            request=body,
            stream=streamed,
            started_at=started_at,
            ttft_s=first[0] if first else None,
            duration_s=time.monotonic() - start,
        )

    async def _plain(
        self, body: dict[str, Any], shape: RequestShape, start: float, first: list[float]
    ) -> dict[str, Any]:
        def first_byte() -> None:
            first.append(time.monotonic() - start)

        data = await self._pool.post_json(
            _PATH,
            body,
            query=shape.query,
            headers=shape.headers,
            max_bytes=self.max_reply_bytes,
            first_byte=first_byte,
        )
        return read_completion(data, Cap(self.max_reply_chars))

    async def _streamed(
        self, body: dict[str, Any], shape: RequestShape, start: float, first: list[float]
    ) -> dict[str, Any]:
        reader = StreamReader(Cap(self.max_reply_chars))
        async for chunk in self._pool.stream_events(
            _PATH, body, query=shape.query, headers=shape.headers
        ):
            if not first:
                first.append(time.monotonic() - start)
            reader.add(chunk)
        return reader.finish_reading()

    def _shape(self, stream: bool) -> RequestShape:
        shape = self._shapes.get(stream)
        if shape is None:
            shape = self._shapes[stream] = RequestShape.build(
                self._sampling, self._max_tokens, stream=stream, token_ids=self._token_ids
            )
            # the key goes with each request, not with the pool: through the model
            # proxy every rollout has a key of its own and one pool serves them all;
            # an Authorization in the sampling's extra_headers wins, as in openai's client
            if self._api_key and not any(k.lower() == "authorization" for k in shape.headers):
                shape.headers = {"Authorization": f"Bearer {self._api_key}", **shape.headers}
        return shape

    def _error(
        self,
        kind: str,
        message: str,
        status: int | None = None,
        retry_after: float | None = None,
    ) -> ModelCallError:
        """The error to raise: its message without the API key."""
        if self._api_key:
            message = message.replace(self._api_key, MARKER)
        return ModelCallError(kind, message, status=status, retry_after=retry_after)
