"""One call through the proxy: forwarded as it arrives, and recorded on the side.

The agent's request goes to the real endpoint with its key swapped for the
real one, the run's headers and the session header added, and, for a model
call, the body the protocol's :class:`~agentkit.proxy._wire.Wire` makes. The
answer goes back as it arrives: each chunk of a stream is written to the
agent as soon as it is read (or, when the proxy must take out fields the
agent did not ask for, as soon as the event it ends is complete), while the
wire reads the events to assemble what is recorded. A failure upstream is
passed on as the same failure: a connection that cannot be made, or breaks
mid-answer, is dropped on the agent's side too.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from typing import Any

from agentkit._calls import ModelCall, WireProtocol
from agentkit._context import public_headers
from agentkit._errors import ValidationError
from agentkit._limits import MAX_NESTING_DEPTH, json_type, loads_bounded
from agentkit._sse import (
    EventSizes,
    EventSplitter,
    EventTooLarge,
    SseEvent,
    event_payloads,
    last_event_end,
)
from agentkit.chat import MAX_REPLY_CHARS
from agentkit.proxy._chat import ENGINE, ChatWire
from agentkit.proxy._cuts import cut_texts
from agentkit.proxy._errors import error_body, protocol_of
from agentkit.proxy._http import Request, Response, StreamResponse
from agentkit.proxy._paths import Checked
from agentkit.proxy._route import ProxyRoute
from agentkit.proxy._translate import ChatTranslation
from agentkit.proxy._upstream import Answer, UpstreamClient, UpstreamError
from agentkit.proxy._wire import Recorded, Wire

__all__ = ["MAX_BODY", "forward", "key_of", "refuse"]

#: Request and (non-streamed) answer bodies larger than this are passed on unread.
MAX_BODY = 64 * 1024 * 1024

#: Headers that belong to one connection (RFC 9110), never passed on.
_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "trailers",
        "transfer-encoding",
        "upgrade",
    }
)
_KEY_HEADERS = ("authorization", "x-api-key", "api-key")
#: Headers that pick the account or project the real key's calls are billed to: the
#: agent holds no account, so only the run's own headers (``--header``) set these.
_ACCOUNT_HEADERS = ("openai-organization", "openai-project")
#: Request headers the proxy sets itself (the body goes upstream decoded: no
#: ``content-encoding``), and the agent's account headers.
_NOT_FORWARDED = _HOP | {
    "host",
    "content-length",
    "content-encoding",
    "accept-encoding",
    *_KEY_HEADERS,
    *_ACCOUNT_HEADERS,
}
#: Request headers left out of the record (the connection's own).
_NOT_SHOWN = _HOP | {"host", "content-length"}
#: Answer headers that describe the upstream body's encoding, not what the agent gets.
_NOT_RETURNED = _HOP | {"content-length", "content-encoding"}


def key_of(headers: Any) -> str | None:
    """The key a request carries: ``x-api-key``, ``api-key`` or a bearer token."""
    for name in ("x-api-key", "api-key"):
        value = headers.get(name)
        if value:
            return str(value).strip()
    authorization = headers.get("authorization")
    if authorization:
        scheme, _, token = str(authorization).strip().partition(" ")
        return token.strip() if scheme.lower() == "bearer" else None
    return None


def _upstream_headers(headers: Any, route: ProxyRoute) -> list[tuple[str, str]]:
    out = [(k, v) for k, v in headers.items() if k.lower() not in _NOT_FORWARDED]
    key = route.api_key
    if key is not None:
        for name in _KEY_HEADERS:
            value = headers.get(name)
            if value is None:
                continue
            if name == "authorization":
                scheme = str(value).strip().partition(" ")[0] or "Bearer"
                out.append(("Authorization", f"{scheme} {key}"))
            else:
                out.append((name, key))
    taken = {k.lower() for k in route.headers}
    session = route.settings.session_header
    if session:
        taken.add(session.lower())
    out = [(k, v) for k, v in out if k.lower() not in taken]
    out += list(route.headers.items())
    if session:
        out.append((session, route.session_id))
    out.append(("Accept-Encoding", "identity"))  # a stream is never held back to compress
    return out


def _shown_headers(headers: Any) -> dict[str, str]:
    """The agent's request headers as recorded: secret-looking values ``***``."""
    kept = {k.lower(): v for k, v in headers.items() if k.lower() not in _NOT_SHOWN}
    return public_headers(kept)


class _Recorder:
    """What is known of one call so far; makes its :class:`ModelCall`."""

    def __init__(
        self,
        route: ProxyRoute,
        request: Request,
        wire: Wire | None,
        *,
        protocol: WireProtocol | None = None,
    ) -> None:
        self.route = route
        self.wire = wire
        self.protocol: WireProtocol = protocol or (wire.protocol if wire is not None else "other")
        #: The proxy answered the request itself; nothing was sent upstream.
        self.refused = False
        self.method = request.method
        self.path = request.raw_path
        self.headers = _shown_headers(request.headers)
        self.started_at = time.time()
        self.t0 = time.perf_counter()
        self.ttft: float | None = None
        self.size = 0  # bytes of the answer read so far
        self.status: int | None = None
        self.error: str | None = None
        #: What went wrong, in a few words (the start of :attr:`error`; the token note's).
        self.what: str | None = None
        self.error_body: Any = None
        self.index = route.begin(self.snapshot)

    def fail(self, what: str, detail: str | None = None, *, first: bool = False) -> None:
        """The call did not complete: ``what`` happened (``detail``: more). ``first``:
        unless an earlier failure is recorded already."""
        if first and self.error is not None:
            return
        self.what = what
        self.error = what if detail is None else f"{what}: {detail}"

    def malformed(self, data: str) -> None:
        """A stream event whose data is not JSON: the call's error, unless it has one."""
        shown = data if len(data) <= 200 else data[:200] + "..."
        self.fail(_MALFORMED, f"{shown!r}", first=True)

    def chunk(self, size: int) -> None:
        """``size`` bytes of the answer arrived (the first: the time to first byte)."""
        if self.ttft is None:
            self.ttft = time.perf_counter() - self.t0
        self.size += size

    def snapshot(self, why: str | None = None) -> ModelCall:
        """The call's record (``why``: it is cut short by that, now)."""
        wire = self.wire
        recorded = Recorded()
        if wire is not None:
            try:
                recorded = wire.recorded()
            except Exception as exc:  # a record must never fail the call
                recorded = Recorded(token_note=f"the answer could not be read: {exc}")
        if why is not None and (self.error is not None or recorded.finish_reason is None):
            self.fail(why)  # cut short (a call the server had finished is complete)
        error, status = self.error, self.status
        response = recorded.response if self.error_body is None else self.error_body
        prompt_ids = recorded.prompt_token_ids
        completion_ids = recorded.completion_token_ids
        partial: list[int] | None = None
        note = recorded.token_note
        if self.refused:
            note = f"the proxy refused the request (HTTP {status}): nothing reached the server"
            prompt_ids = completion_ids = None
        elif status is not None and status >= 400:
            note = f"the call failed (HTTP {status}): no tokens"
            prompt_ids = completion_ids = None
        elif error is not None:
            # it did not complete: what was sampled is never a completion to train on
            partial, completion_ids = completion_ids or None, None
            what = self.what or error
            note = (
                f"{what} after {len(partial)} sampled tokens: kept as partial_token_ids, "
                "never trained"
                if partial
                else f"{what}: no tokens"
            )
        has_ids = prompt_ids is not None and completion_ids is not None
        if not has_ids and partial is None:
            prompt_ids = completion_ids = None  # both or neither (but for a failed call's)
        cuts: list[dict[str, Any]] = []
        if self.size > MAX_REPLY_CHARS:  # a text may be longer than a harness keeps
            response, cuts = cut_texts(response, MAX_REPLY_CHARS)
        return ModelCall(
            rollout_id=self.route.rollout_id,
            index=self.index,
            protocol=self.protocol,
            method=self.method,
            path=self.path,
            model=None if wire is None else wire.model,
            stream=False if wire is None else wire.stream,
            request=None if wire is None else wire.request,
            forwarded=dict(wire.forwarded) if wire is not None else {},
            headers=self.headers,
            status=status,
            response=response,
            error=error,
            started_at=self.started_at,
            ttft_s=self.ttft,
            duration_s=time.perf_counter() - self.t0,
            usage=recorded.usage,
            finish_reason=recorded.finish_reason,
            prompt_token_ids=prompt_ids,
            completion_token_ids=completion_ids,
            completion_logprobs=recorded.completion_logprobs if has_ids else None,
            partial_token_ids=partial,
            token_source="server" if has_ids else "none",
            token_note=note,
            session_id=self.route.session_id if self.route.settings.session_header else None,
            upstream_protocol=None if wire is None else wire.upstream_protocol,
            upstream_request=(  # what the server was sent (nothing, when the proxy refused)
                wire.body
                if wire is not None and wire.upstream_protocol is not None and not self.refused
                else None
            ),
            chat_answer=_chat_answer(wire, response),
            cuts=cuts,
        )


def _chat_answer(wire: Wire | None, response: Any) -> dict[str, Any] | None:
    """The chat assistant message a translated call's answer (in the agent's protocol)
    stands for, as its translation says; None for any other call (a record never fails
    the call: an answer the translation cannot read has none)."""
    if not isinstance(wire, ChatTranslation):
        return None
    try:
        return type(wire).chat_message(response)
    except Exception:
        return None


#: What the recorder says of each way a call fails (the start of its error and note).
_MALFORMED = "the answer has a stream event that is not JSON (model_bad_response)"
_UNREACHED = "the model endpoint could not be reached"
_BROKE_OFF = "the answer broke off"
_AGENT_LEFT = "the agent closed the connection before the answer ended"
_NOT_JSON_ANSWER = "the answer is not JSON (model_bad_response)"


_NOT_JSON = object()


def _parse_all(texts: list[str]) -> list[Any]:
    """Each text's JSON value (``_NOT_JSON`` where it is none): one parse for all of them
    when they all are JSON, else one by one."""
    try:
        parsed = loads_bounded("[" + ",".join(texts) + "]", limit=MAX_NESTING_DEPTH + 1)
    except ValueError:  # one is not JSON, or is nested too deep (NestingError)
        parsed = None
    if isinstance(parsed, list) and len(parsed) == len(texts):
        return parsed
    out: list[Any] = []
    for text in texts:
        try:
            out.append(loads_bounded(text))
        except ValueError:
            out.append(_NOT_JSON)
    return out


def _rewritten(wire: Wire, events: list[SseEvent], recorder: _Recorder | None) -> bytes:
    """Read completed events into ``wire``; the bytes the agent gets for them (an event
    that is not JSON, or ``[DONE]``, goes on as it came)."""
    readable = [e for e in events if e.data is not None and not e.data.startswith("[DONE]")]
    values = dict(zip(map(id, readable), _parse_all([e.data or "" for e in readable]), strict=True))
    out: list[bytes] = []
    for event in events:
        value = values.get(id(event), _NOT_JSON)
        if value is _NOT_JSON:
            if recorder is not None and id(event) in values:
                recorder.malformed(event.data or "")
            out.append(wire.stream_other(event))
        else:
            out.append(wire.stream_event(event, value))
    return b"".join(out)


def _request_body(body: bytes) -> tuple[dict[str, Any] | None, str]:
    """A model call's body as a JSON object, or None and why it is not one. Strict where
    a server could read the body otherwise than the record shows it, or the record could
    not be written: UTF-8 only; no ``NaN``, ``Infinity`` or ``1e999``; no lone UTF-16
    surrogate (``"\\ud800"``, which is no text)."""
    if not body:
        return None, "the body is empty"
    try:
        text = body.decode("utf-8")  # json.loads would take UTF-16, and lone surrogates
    except UnicodeDecodeError as exc:
        return None, f"it is not UTF-8 ({exc.reason} at byte {exc.start})"
    try:
        parsed = loads_bounded(text, finite=True)
    except ValidationError as exc:
        return None, exc.reason
    except ValueError as exc:  # not JSON, or nested too deep
        return None, f"it is not JSON: {exc}"
    if not isinstance(parsed, dict):
        return None, f"it is {json_type(parsed)}"
    if _SURROGATE.search(body) is not None and _holds_lone_surrogate(parsed):
        return None, "a string holds a lone UTF-16 surrogate (such as \\ud800), which is no text"
    return parsed, ""


#: A JSON escape of a UTF-16 surrogate: the only way a UTF-8 body holds one.
_SURROGATE = re.compile(rb"\\u[dD][89a-fA-F]")


def _holds_lone_surrogate(value: Any) -> bool:
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def _parsed_error(body: bytes) -> Any:
    try:
        return loads_bounded(body)
    except ValueError:
        return body.decode("utf-8", "replace")[:10_000]


def _error_message(status: int, body: Any) -> str:
    """``HTTP 429: <the error body's message>`` (OpenAI's and Anthropic's error shapes)."""
    inner = body.get("error", body) if isinstance(body, dict) else None
    message = inner.get("message") if isinstance(inner, dict) else None
    return f"HTTP {status}" + (f": {message[:500]}" if isinstance(message, str) else "")


async def forward(
    client: UpstreamClient,
    route: ProxyRoute,
    request: Request,
    checked: Checked,
    body: bytes,
) -> Response | StreamResponse:
    """Send ``request`` (its ``body`` read; its path ``checked``) on to the route's
    endpoint; return the agent's response, written as the answer arrives. A model call is
    recorded on the route."""
    await route.refresh_policy()
    wire: Wire | None = None
    kind = checked.wire
    if kind is not None:
        parsed, why = _request_body(body)
        if parsed is None:
            # a body the record could not show as the server reads it: never sent
            message = (
                f"agentkit model proxy: the body of a model call must be a JSON object ({why})"
            )
            return refuse(route, request, 400, message, protocol=kind.protocol)
        if kind is ChatWire and route.settings.token_ids and parsed.get("stream") is True:
            await _know_the_engine(client, route, request)
        wire = kind(parsed, route.settings, route.memory)
        if wire.body is not wire.request:
            body = json.dumps(wire.body, ensure_ascii=False, separators=(",", ":")).encode()
    recorder = _Recorder(route, request, wire) if wire is not None else None
    if wire is not None and wire.refusal is not None and recorder is not None:
        recorder.refused = True
        return _refuse(route, recorder, *wire.refusal)
    # the path goes exactly as checked (no dot segments resolved, no percent-encoding
    # changed on the way)
    path = checked.path if wire is None else wire.upstream_path_for(checked.path)
    response: StreamResponse | None = None
    try:
        async with client.request(
            request.method,
            route.origin,
            path,
            body=body if body or request.method not in ("GET", "HEAD") else None,
            headers=_upstream_headers(request.headers, route),
            proxy=route.http_proxy,
        ) as upstream:
            if recorder is not None:
                recorder.status = upstream.status
            headers = [
                (k, v) for k, v in upstream.headers.items() if k.lower() not in _NOT_RETURNED
            ]
            sse = (upstream.headers.get("content-type") or "").startswith("text/event-stream")
            if wire is not None and (upstream.status >= 400 or not sse):
                # read whole, then sent whole (its headers and body in one write)
                return await _whole(upstream, headers, wire, recorder)
            response = StreamResponse(status=upstream.status, reason=upstream.reason)
            response.headers.extend(headers)
            if wire is not None:
                await _stream(request, response, upstream, wire, recorder)
            else:
                await _pass(request, response, upstream)
            return response
    except (TimeoutError, UpstreamError, OSError) as exc:
        # the server cannot be reached, or broke off: so does the agent's connection
        if recorder is not None:
            recorder.fail(_why(exc, response), _detail(exc))
        request.abort()
        if response is None or not response.prepared:
            raise asyncio.CancelledError from None  # nothing sent: the client sees a drop
        return response
    except asyncio.CancelledError:
        # an agent may hang up once it has the answer's last event (codex does): a call
        # the server finished is complete; one it had not is the agent's leaving early
        if recorder is not None and not _finished(wire):
            recorder.fail(_AGENT_LEFT, first=True)
        raise
    finally:
        if recorder is not None:
            route.finish(recorder.snapshot())


async def _know_the_engine(client: UpstreamClient, route: ProxyRoute, request: Request) -> None:
    """Put the serving engine in the route's memory (``ENGINE``), asked once per route
    from the server's ``GET .../models`` (``owned_by``: ``sglang``, ``vllm``): SGLang
    refuses a stream that asks for ids in vLLM's fields, so a streamed chat call with
    token ids needs to know it first. No answer, or another: not SGLang."""
    if ENGINE in route.memory:
        return
    route.memory[ENGINE] = "unknown"
    headers = [(k, v) for k, v in _upstream_headers(request.headers, route)]
    headers = [(k, v) for k, v in headers if k.lower() not in ("content-type", "content-length")]
    try:
        async with asyncio.timeout(10), client.request(
            "GET", route.origin, route.base_path + "/models", headers=headers, body=None,
            proxy=route.http_proxy, timeout=10,
        ) as answer:  # fmt: skip
            raw = await answer.read(MAX_BODY) if answer.status == 200 else None
        data = None if raw is None else loads_bounded(raw)
    except (TimeoutError, UpstreamError, OSError, ValueError):
        return
    models = data.get("data") if isinstance(data, dict) else None
    owners = {m.get("owned_by") for m in models or [] if isinstance(m, dict)}
    if owners & {"sglang", "vllm"}:
        route.memory[ENGINE] = "sglang" if "sglang" in owners else "vllm"


def _finished(wire: Wire | None) -> bool:
    """Whether the server's answer was complete: it said why it stopped."""
    try:
        return wire is not None and wire.recorded().finish_reason is not None
    except Exception:  # a record must never fail the call
        return False


def refuse(
    route: ProxyRoute,
    request: Request,
    status: int,
    message: str,
    *,
    protocol: WireProtocol | None = None,
) -> Response:
    """Answer ``request`` with the proxy's own error (``status``, ``message``), nothing
    sent upstream, and record it on the route: as a call of ``protocol`` (a model call
    the proxy could not read), or, when None, as a request of protocol ``other`` (one
    the proxy does not forward), answered in the error shape its path suggests."""
    code = _CODES.get(status, "proxy_refused")
    shape = protocol or protocol_of(request.raw_path, request.headers)
    recorder = _Recorder(route, request, None, protocol=protocol or "other")
    recorder.refused = True
    return _refuse(route, recorder, status, error_body(shape, status, message, code))


_CODES = {400: "invalid_body", 403: "path_not_allowed", 413: "request_too_large"}


def _refuse(route: ProxyRoute, recorder: _Recorder, status: int, body: Any) -> Response:
    """A call the proxy does not send: answered with ``body``, recorded."""
    recorder.status = status
    recorder.error_body = body
    recorder.fail(_error_message(status, body), "the proxy answered; nothing was sent")
    route.finish(recorder.snapshot())
    return Response(
        status, json.dumps(body, ensure_ascii=False).encode(), content_type="application/json"
    )


def _why(exc: BaseException, response: StreamResponse | None) -> str:
    if isinstance(exc, UpstreamError):
        broke = exc.answered
    else:  # the agent's connection failed, or the server's was reset
        broke = isinstance(exc, ConnectionResetError)
    return _BROKE_OFF if broke or (response is not None and response.prepared) else _UNREACHED


def _detail(exc: BaseException) -> str:
    """What failed, as recorded after the call's error (httpcore's exception, or the
    connection's)."""
    return str(exc) if isinstance(exc, UpstreamError) else f"{type(exc).__name__}: {exc}"


async def _stream(
    request: Request,
    response: StreamResponse,
    upstream: Answer,
    wire: Wire,
    recorder: _Recorder | None,
) -> None:
    """A stream: each chunk to the agent as it comes. Events the agent gets as they are
    are read once the stream has ended (the agent never waits for the record); events
    the proxy rewrites are read as each one completes. An event larger than
    :data:`~agentkit._sse.MAX_EVENT_BYTES` cuts the stream off there: the
    answer fails as ``model_bad_response``."""
    await response.prepare(request)
    if not wire.rewrites:
        chunks: list[bytes] = []
        kept = 0
        sizes = EventSizes()
        try:
            async for chunk in upstream.chunks():
                if recorder is not None:
                    recorder.chunk(len(chunk))
                sizes.feed(chunk)
                await response.write(chunk)
                if kept <= MAX_BODY:  # a larger stream is recorded in part
                    chunks.append(chunk)
                    kept += len(chunk)
        except EventTooLarge as exc:
            _cut_off(recorder, exc)
        finally:  # what arrived is recorded, also when the stream broke off
            _read_stream(wire, b"".join(chunks), recorder, whole=kept <= MAX_BODY)
        # the agent's client drops an event the stream ended in the middle of
        await response.write_eof()
        return
    splitter = EventSplitter()
    try:
        async for chunk in upstream.chunks():
            if recorder is not None:
                recorder.chunk(len(chunk))
            out = _rewritten(wire, splitter.feed(chunk), recorder)
            if out:
                await response.write(out)
    except EventTooLarge as exc:
        message = _cut_off(recorder, exc)
        await response.write(wire.stream_error(f"agentkit model proxy: {message}"))
        await response.write_eof()
        return
    last = splitter.close()
    out = (b"" if last is None else _rewritten(wire, [last], recorder)) + wire.stream_end()
    if out:
        await response.write(out)
    await response.write_eof()


def _cut_off(recorder: _Recorder | None, exc: EventTooLarge) -> str:
    """Record a stream cut off at an event over the cap; the message for the agent."""
    message = f"{exc}: the answer was cut off there (model_bad_response)"
    if recorder is not None:
        recorder.fail(_TOO_LARGE_EVENT, f"{exc}; the proxy cut the answer off there")
    return message


_TOO_LARGE_EVENT = "model_bad_response: a stream event over the proxy's cap"


def _read_stream(
    wire: Wire, stream: bytes, recorder: _Recorder | None, *, whole: bool = True
) -> None:
    """Read a whole stream's events into ``wire`` (one JSON parse for all of them); an
    event that is not JSON is the call's error. ``whole``: False when only the stream's
    start was kept (its last event may be cut: it is left out)."""
    if not whole:
        stream = stream[: last_event_end(stream)]
    payloads = [(n, d) for n, d in event_payloads(stream) if not d.startswith("[DONE]")]
    for (name, data), value in zip(payloads, _parse_all([d for _, d in payloads]), strict=True):
        if value is not _NOT_JSON:
            wire.event(name, value)
        elif recorder is not None:
            recorder.malformed(data)


async def _whole(
    upstream: Answer, headers: list[tuple[str, str]], wire: Wire, recorder: _Recorder | None
) -> Response:
    """A whole answer: read, recorded, rewritten if need be; the agent's response."""
    parts: list[bytes] = []
    size = 0
    async for chunk in upstream.chunks():
        if recorder is not None:
            recorder.chunk(len(chunk))
        size += len(chunk)
        if size > MAX_BODY:  # too large to hold (a compressed body may expand this far)
            return _too_large(wire, recorder)
        parts.append(chunk)
    body = b"".join(parts)
    if upstream.status >= 400:
        error = _parsed_error(body)
        view = wire.error_answer(upstream.status, error)
        if view is not error:  # the agent's protocol's error shape
            body = json.dumps(view, ensure_ascii=False).encode()
        if recorder is not None:
            recorder.error_body = view
            recorder.fail(_error_message(upstream.status, error))
    else:
        try:
            parsed = loads_bounded(body)
        except ValueError:
            parsed = None
            if recorder is not None:
                recorder.fail(_NOT_JSON_ANSWER)
                recorder.error_body = body.decode("utf-8", "replace")[:10_000]
        if parsed is not None:
            view = wire.answer(parsed)
            if wire.rewrites:
                body = json.dumps(view, ensure_ascii=False, separators=(",", ":")).encode()
    return Response(upstream.status, body, reason=upstream.reason, headers=headers)


def _too_large(wire: Wire, recorder: _Recorder | None) -> Response:
    """An answer over :data:`MAX_BODY`: the agent gets a 502 in its protocol's shape, the
    rest is left unread, and the call fails as ``model_bad_response``."""
    message = f"the model server's answer is larger than {MAX_BODY} bytes (MAX_BODY)"
    body = error_body(
        wire.protocol, 502, f"agentkit model proxy: {message} (model_bad_response)", _BAD
    )
    if recorder is not None:
        recorder.error_body = body  # what the agent got (the server said 200)
        recorder.fail(f"model_bad_response: {message}", "the proxy answered 502 and read no more")
    return Response(502, json.dumps(body, ensure_ascii=False).encode(), content_type=_JSON)


_JSON = "application/json"
_BAD = "model_bad_response"


async def _pass(request: Request, response: StreamResponse, upstream: Answer) -> None:
    """Not a model call: passed on as it comes, not recorded."""
    await response.prepare(request)
    async for chunk in upstream.chunks():
        await response.write(chunk)
    await response.write_eof()
