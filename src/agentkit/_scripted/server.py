"""A scripted model server on loopback, for tests and manual runs.

A real HTTP server (aiohttp's web server) that answers from a
:class:`~agentkit.testing.script.Script` in three wire protocols: OpenAI chat
completions (``POST /v1/chat/completions``), Anthropic Messages
(``POST /v1/messages``, and ``/v1/messages/count_tokens``) and the OpenAI
Responses API (``POST /v1/responses``), each streamed as server-sent events
or not; ``GET /v1/models`` lists the script's models. A scripted reply (text,
reasoning, tool calls, usage) is rendered in whichever protocol the request
used, and the same failures can be injected in all of them (429, 5xx, hangs,
malformed bodies, broken streams, dropped connections, latency). Given an
``api_key``, it answers only requests that carry exactly that key (401 in
the protocol's own error format otherwise), as a provider does. Every
request is logged with its secret headers redacted.

>>> with ScriptedModelServer("hi", api_key="sk-test") as server:  # doctest: +SKIP
...     client = openai.OpenAI(base_url=server.base_url, api_key=server.api_key)

From the command line: ``python -m agentkit.testing.model_server --script FILE --port N``.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import itertools
import json
import threading
from collections.abc import Iterable, Mapping
from pathlib import Path
from ssl import SSLContext
from typing import Any

from aiohttp import web

from agentkit._errors import AgentkitError
from agentkit._scripted import chat_wire, messages_wire, sglang_wire
from agentkit._scripted.answer import estimate_prompt_tokens
from agentkit._scripted.delivery import Gate, deliver, json_response
from agentkit._scripted.log import RecordedRequest, RequestLog, recorded
from agentkit._scripted.renderers import Engine, renderers
from agentkit._scripted.script import Api, RequestView, Script, load_script
from agentkit._serve import start_site

__all__ = ["RecordedRequest", "ScriptedModelServer", "main"]

_MAX_BODY = 64 * 1024 * 1024


#: Model routes (with and without the ``/v1`` prefix) and their protocol.
_ROUTES: dict[str, Api] = {}
for _prefix in ("/v1", ""):
    _ROUTES[f"{_prefix}/chat/completions"] = "chat"
    _ROUTES[f"{_prefix}/messages"] = "messages"
    _ROUTES[f"{_prefix}/responses"] = "responses"
del _prefix
_COUNT_TOKENS = ("/v1/messages/count_tokens", "/messages/count_tokens")


class ScriptedModelServer:
    """A real HTTP server on 127.0.0.1 that answers model requests from a script.

    Use it as ``with server:`` (it serves from a background thread, so
    sync and async code can call it) or ``async with server:`` (it serves on
    the running event loop). ``port=0`` lets the OS choose a free port;
    ``log_limit`` keeps only the newest N requests in the log (long benchmarks).
    ``api_key``: the one key the server accepts (as a bearer token, ``x-api-key``
    or ``api-key``); a model request (or ``/v1/models``, token counting) with
    another key or none gets a 401 in its protocol's error format. Without it,
    every request is answered whatever key it carries. ``ssl``: serve https with
    this server-side context (its certificate must name ``host``); ``base_url``
    then starts with ``https://``. ``apis``: the protocols served (``chat``,
    ``messages``, ``responses``; default all): a model request in another gets a
    404, as from a server without that endpoint (:meth:`set_apis` changes it).
    ``engine``: whose chat completions' token fields it answers in: ``vllm``
    (``return_token_ids``: ``prompt_token_ids`` at the top, ``token_ids`` on each
    choice and stream chunk) or ``sglang`` (``prompt_token_ids`` and
    ``response_token_ids`` on a whole completion's choice; a stream that asks for
    them refused with a 400, its ids in one ``sglext`` chunk when asked for
    SGLang's way; see :mod:`agentkit._scripted.sglang_wire`); ``GET /v1/models``
    says it in each model's ``owned_by``.
    """

    def __init__(
        self,
        script: Script | Mapping[str, Any] | str | Path | None = None,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        log_limit: int | None = None,
        api_key: str | None = None,
        ssl: SSLContext | None = None,
        apis: Iterable[Api] | None = None,
        engine: Engine = "vllm",
    ) -> None:
        if engine not in ("vllm", "sglang"):
            raise ValueError(f"unknown engine {engine!r}: expected 'vllm' or 'sglang'")
        self._engine: Engine = engine
        self._script = load_script(script)
        self._apis: frozenset[Api] | None = None
        self.set_apis(apis)
        self._ssl = ssl
        self._api_key = _checked_key(api_key)
        self.host = host
        self.port = port
        # the newest ``log_limit`` requests are kept (all of them by default)
        self._log = RequestLog(log_limit)
        self._ids = itertools.count(1)
        self._renderers = renderers(engine)
        self._runner: web.ServerRunner | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._stop_requested: asyncio.Event | None = None
        self._closing: asyncio.Event | None = None
        # whether model answers go out: hold() keeps them back until release()
        self._gate = Gate()

    # -- public API ---------------------------------------------------------

    @property
    def base_url(self) -> str:
        """The OpenAI-compatible base URL, ending in ``/v1``."""
        if self._runner is None:
            raise RuntimeError("the model server is not running; use 'with server:' or start()")
        scheme = "https" if self._ssl is not None else "http"
        return f"{scheme}://{self.host}:{self.port}/v1"

    @property
    def url(self) -> str:
        """``base_url`` without ``/v1`` (what Anthropic clients take as their base URL)."""
        return self.base_url[: -len("/v1")]

    @property
    def script(self) -> Script:
        """The script now in use."""
        return self._script

    @property
    def api_key(self) -> str | None:
        """The one key the server accepts (None: any key, or none)."""
        return self._api_key

    def set_api_key(self, api_key: str | None) -> None:
        """Accept only ``api_key`` from now on (None: answer whatever key comes); safe
        while serving."""
        self._api_key = _checked_key(api_key)

    @property
    def requests(self) -> list[RecordedRequest]:
        """A copy of the log of requests received so far, oldest first."""
        return self._log.entries()

    @property
    def model_requests(self) -> list[RecordedRequest]:
        """Only the model requests (chat completions, messages, responses), oldest first."""
        return [r for r in self.requests if r.api is not None]

    @property
    def chat_requests(self) -> list[RecordedRequest]:
        """Only the ``POST /v1/chat/completions`` requests."""
        return [r for r in self.requests if r.api == "chat"]

    def clear_requests(self) -> None:
        """Forget the logged requests."""
        self._log.clear()

    async def wait_for_requests(self, count: int = 1) -> list[RecordedRequest]:
        """Wait until at least ``count`` model requests have been received since the
        server started (or since :meth:`clear_requests`), and return the logged ones:
        one whose answer :meth:`hold` keeps back, or refused for its key, counts once
        received. It waits on the server's own signal, never on the clock: bound it
        with ``anyio.fail_after``."""
        await self._log.wait_for(count)
        return self.model_requests

    def hold(self, after_events: int = 0) -> None:
        """Keep every model answer back (requests are still received and logged) until
        :meth:`release`: a test can then wait until N requests are in flight at once.

        With ``after_events=N``, streamed answers send their first N events and then
        wait (answers that are not streamed go out at once): a test can see that the
        first events reached a client while the server still holds the rest."""
        if after_events < 0:
            raise ValueError("after_events must be 0 or more")
        self._gate.hold(after_events)

    def release(self) -> None:
        """Let the answers held back by :meth:`hold` (and all later ones) go out."""
        self._log.release()
        self._gate.release()

    @property
    def held(self) -> list[RecordedRequest]:
        """The model requests whose answers :meth:`hold` (without ``after_events``) has
        kept back since the last :meth:`release`, oldest first: received and never
        answered, whether their client still waits or has given up (a program killed
        while it waited, say)."""
        return self._log.held()

    @property
    def events_sent(self) -> int:
        """Stream events written so far, all streams together (see ``hold(after_events=)``)."""
        return self._gate.events_sent

    def set_apis(self, apis: Iterable[Api] | None) -> None:
        """Serve only these protocols (None: all); a model request in another gets a 404."""
        if apis is None:
            self._apis = None
            return
        chosen = frozenset(apis)
        unknown = sorted(chosen - {"chat", "messages", "responses"})
        if unknown:
            raise ValueError(
                f"apis: unknown protocol(s) {unknown}; known: chat, messages, responses"
            )
        self._apis = chosen

    def set_script(self, script: Script | Mapping[str, Any] | str | Path | None) -> None:
        """Replace the script (its ``times`` counters start from zero); safe while serving."""
        self._script = load_script(script)

    def start(self) -> ScriptedModelServer:
        """Start serving from a background thread; returns once the port is bound."""
        if self._thread is not None or self._runner is not None:
            raise RuntimeError("the model server is already running")
        started = threading.Event()
        failure: list[BaseException] = []

        def run() -> None:
            async def serve() -> None:
                try:
                    await self._start_async()
                except BaseException as exc:
                    failure.append(exc)
                    started.set()
                    return
                started.set()
                assert self._stop_requested is not None
                await self._stop_requested.wait()
                await self._stop_async()

            asyncio.run(serve())

        self._thread = threading.Thread(target=run, name="agentkit-model-server", daemon=True)
        self._thread.start()
        started.wait()
        if failure:
            self._thread.join()
            self._thread = None
            raise failure[0]
        return self

    def stop(self) -> None:
        """Stop the background server: open connections (hanging ones too) are closed."""
        thread, loop, stop = self._thread, self._loop, self._stop_requested
        if thread is None:
            return
        if loop is not None and stop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(stop.set)
        thread.join()
        self._thread = None

    def __enter__(self) -> ScriptedModelServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    async def __aenter__(self) -> ScriptedModelServer:
        await self._start_async()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._stop_async()

    def __repr__(self) -> str:
        where = self.base_url if self._runner is not None else "not running"
        return f"ScriptedModelServer({where}, {len(self._script.rules)} rules)"

    # -- serving ------------------------------------------------------------

    async def _start_async(self) -> None:
        if self._runner is not None:
            raise RuntimeError("the model server is already running")
        self._loop = asyncio.get_running_loop()
        self._stop_requested = asyncio.Event()
        self._closing = asyncio.Event()
        # aiohttp's low-level server: one handler routes every request itself
        runner = web.ServerRunner(
            web.Server(
                self._handle,
                access_log=None,
                # a client that gives up cancels its handler (a hang, a latency)
                handler_cancellation=True,
            ),
            handle_signals=False,
            # stop() closes in-flight connections at once, as a crashed server would
            # (aiohttp reads 0 as "no timeout")
            shutdown_timeout=0.01,
        )
        self.port = await start_site(
            runner, self.host, self.port, backlog=4096, ssl_context=self._ssl
        )
        self._runner = runner

    async def _stop_async(self) -> None:
        runner = self._runner
        if runner is None:
            return
        assert self._closing is not None
        self._closing.set()
        await runner.cleanup()
        self._runner = None

    def _record(
        self,
        request: web.BaseRequest,
        body: bytes,
        rule: int | None = None,
        api: Api | None = None,
        parsed: Any = None,
        *,
        held: bool = False,
    ) -> RecordedRequest:
        entry = recorded(
            request, body, rule, api, parsed, key_sent=self._key_accepted(request) is True
        )
        self._log.add(entry, held=held)
        return entry

    def _key_accepted(self, request: web.BaseRequest) -> bool | None:
        """Whether ``request`` carries exactly the server's key (and no other key):
        None when the server has no key to check."""
        expected = self._api_key
        if expected is None:
            return None
        sent = _keys_sent(request.headers)
        return bool(sent) and all(
            hmac.compare_digest(key.encode(), expected.encode()) for key in sent
        )

    def _refuse_key(self, request: web.BaseRequest, body: bytes, api: Api | None) -> web.Response:
        """The 401 a provider gives a request with a wrong key or none, in the
        protocol's own error format (the key itself is never echoed)."""
        self._record(request, body, None, api)
        if api == "messages" or (api is None and request.path.startswith(_MESSAGES_PATHS)):
            message = "invalid x-api-key (scripted): not the key this server was given"
            return json_response(401, messages_wire.error_body(401, message))
        message = "Incorrect API key provided (scripted): not the key this server was given."
        return json_response(401, chat_wire.error_body(401, message))

    async def _handle(self, request: web.BaseRequest) -> web.StreamResponse:
        if (request.content_length or 0) > _MAX_BODY:
            return json_response(413, chat_wire.error_body(413, "request body too large"))
        body = await request.content.read() if request.body_exists else b""
        if len(body) > _MAX_BODY:  # a chunked body has no content-length to check first
            return json_response(413, chat_wire.error_body(413, "request body too large"))
        route = request.raw_path.partition("?")[0].rstrip("/")
        api = _ROUTES.get(route)
        known = api is not None or route in (*_COUNT_TOKENS, "/v1/models", "/models")
        if known and self._key_accepted(request) is False:
            return self._refuse_key(request, body, api)
        if route in ("/v1/models", "/models"):
            self._record(request, body)
            if request.method != "GET":
                return json_response(405, chat_wire.error_body(405, "use GET"))
            data = [
                {"id": m, "object": "model", "created": 0, "owned_by": self._engine}
                for m in self._script.models
            ]
            return json_response(200, {"object": "list", "data": data})
        if route in _COUNT_TOKENS and (self._apis is None or "messages" in self._apis):
            return self._count_tokens(request, body)
        if api is None or (self._apis is not None and api not in self._apis):
            self._record(request, body)
            message = f"no route {request.method} {request.path}"
            return json_response(404, chat_wire.error_body(404, message))
        renderer = self._renderers[api]
        if request.method != "POST":
            self._record(request, body)
            return json_response(405, renderer.error_body(405, "use POST"))
        try:
            parsed = json.loads(body) if body else None
        except ValueError:
            parsed = None
        if not isinstance(parsed, dict):
            self._record(request, body)
            return json_response(400, renderer.error_body(400, "the body is not a JSON object"))
        view = RequestView.from_body(parsed, api)
        refused = (
            sglang_wire.refusal(parsed) if api == "chat" and self._engine == "sglang" else None
        )
        if refused is not None:
            self._record(request, body, None, api, parsed)
            return json_response(400, sglang_wire.error_body(400, refused))
        reply, rule = self._script.choose(view)
        holding = self._gate.holds_answers()  # hold() until release()
        entry = self._record(request, body, rule, api, parsed, held=holding)
        if holding:
            # a client that gives up cancels this wait: its request stays held (never
            # answered) until release()
            while self._gate.holds_answers():
                await asyncio.sleep(0.005)
            self._log.unhold(entry)  # this one (by identity: an equal one may be held too)
        if reply.latency:
            await asyncio.sleep(reply.latency)
        return await deliver(
            request,
            renderer,
            reply,
            view,
            parsed,
            entry,
            gate=self._gate,
            closing=self._closing,
            ids=self._ids,
            engine=self._engine,
        )

    def _count_tokens(self, request: web.BaseRequest, body: bytes) -> web.Response:
        """Anthropic's token counting: the estimate a reply's usage would report."""
        self._record(request, body)
        try:
            parsed = json.loads(body) if body else None
        except ValueError:
            parsed = None
        if request.method != "POST" or not isinstance(parsed, dict):
            status, message = (405, "use POST") if request.method != "POST" else (400, "not JSON")
            return json_response(status, messages_wire.error_body(status, message))
        view = RequestView.from_body(parsed, "messages")
        return json_response(200, {"input_tokens": estimate_prompt_tokens(view)})


_MESSAGES_PATHS = ("/v1/messages", "/messages")


def _checked_key(api_key: str | None) -> str | None:
    if api_key is not None and (not api_key or api_key != api_key.strip()):
        raise ValueError("api_key must be a non-empty string without surrounding spaces")
    return api_key


def _keys_sent(headers: Mapping[str, str]) -> list[str]:
    """Every key the request carries: a bearer token, ``x-api-key``, ``api-key``."""
    keys: list[str] = []
    authorization = headers.get("authorization")
    if authorization is not None:
        scheme, _, token = authorization.strip().partition(" ")
        keys.append(token.strip() if scheme.lower() == "bearer" else authorization)
    keys += [v for v in (headers.get("x-api-key"), headers.get("api-key")) if v is not None]
    return keys


def main(argv: list[str] | None = None) -> None:
    """``python -m agentkit.testing.model_server --script FILE --port N``."""
    import argparse
    import signal
    import sys

    parser = argparse.ArgumentParser(
        prog="python -m agentkit.testing.model_server",
        description=(
            "Serve a scripted model (OpenAI chat completions and Responses, Anthropic "
            "Messages) on loopback until Ctrl-C."
        ),
    )
    parser.add_argument("--script", type=Path, help="JSON model script (default: reply 'ok')")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=0, help="port (default 0: chosen by the OS)")
    args = parser.parse_args(argv)
    try:
        server = ScriptedModelServer(args.script, host=args.host, port=args.port)
    except AgentkitError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None

    async def serve() -> None:
        try:
            await server.__aenter__()
        except OSError as exc:
            print(f"error: cannot listen on {args.host}:{args.port}: {exc}", file=sys.stderr)
            raise SystemExit(2) from None
        print(server.base_url, flush=True)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()
        await server.__aexit__(None, None, None)

    asyncio.run(serve())


if __name__ == "__main__":
    main()
