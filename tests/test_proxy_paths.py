"""The model proxy lends the real key to model calls only: every other method and path, and
every path that climbs out of the endpoint's base path, is refused before anything goes
upstream, and recorded on the rollout (agentkit.proxy._paths).

The upstream is a catch-all aiohttp server (tests/_upstream.py) that answers 200 to anything
and records what reached it (with the key it was sent), so a request the proxy let through
would show.
Requests are written on a raw socket, so no client normalises their paths first."""

from __future__ import annotations

import asyncio
import gzip
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from _upstream import Upstream
from aiohttp import web

from agentkit.proxy import WIRES, ModelProxy, ProxyRoute, Wire, register_wire

pytestmark = pytest.mark.anyio

REAL_KEY = "sk-paths-real-key-7c21aa90"
CHAT_ANSWER = {
    "id": "c1",
    "object": "chat.completion",
    "model": "m",
    "choices": [
        {"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}
    ],
    "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
}

#: The issue's five (#32), and every way of climbing out of the base path tried.
REFUSED = [
    ("DELETE", "/v1/files/file-abc"),
    ("POST", "/v1/fine_tuning/jobs"),
    ("GET", "/v1/organization/api_keys"),
    ("POST", "/v1/batches"),
    ("GET", "/v1/../../x"),
    ("POST", "/v1/../../x"),
    ("POST", "/v1/chat/completions/../../files"),
    ("POST", "/v1/%2e%2e/%2e%2e/x"),
    ("POST", "/v1/%2E%2E/chat/completions"),
    ("POST", "/v1/.%2e/v1/chat/completions"),
    ("POST", "/v1/..%2fv2/chat/completions"),
    ("POST", "/v1%2fchat/completions"),
    ("POST", "/v1/chat%2fcompletions"),
    ("POST", "/v1/%252e%252e/chat/completions"),
    ("POST", "/v1//chat/completions"),
    ("POST", "/v1/./chat/completions"),
    ("POST", "/v1/chat/completions;x=1"),
    ("POST", "/v1\\..\\x/chat/completions"),
    ("POST", "/chat/completions"),  # outside the base path
    ("POST", "/v2/chat/completions"),
    ("POST", "/v1x/chat/completions"),
    ("POST", "http://127.0.0.1:1/v1/chat/completions"),  # absolute form
    ("GET", "/v1/chat/completions"),  # a model path with another method
    ("DELETE", "/v1/responses"),
    ("PUT", "/v1/messages"),
    ("POST", "/v1/models"),
    ("POST", "/v1/chat/completions/chatcmpl-1"),  # stored completions' update
    ("POST", "/v1/responses/resp_1/cancel"),
    ("POST", "/v1/messages/batches"),
    ("GET", "/v1"),
]

#: What agents need, with the path the upstream must see.
ALLOWED = [
    ("POST", "/v1/chat/completions", {"model": "m", "messages": []}),
    ("POST", "/v1/chat/completions/", {"model": "m", "messages": []}),
    ("POST", "/v1/v1/chat/completions", {"model": "m", "messages": []}),
    ("POST", "/v1/completions", {"model": "m", "prompt": "x"}),
    ("POST", "/v1/responses", {"model": "m", "input": "x"}),
    ("POST", "/v1/messages?beta=true", {"model": "m", "max_tokens": 5, "messages": []}),
    ("POST", "/v1/messages/count_tokens?beta=true", {"model": "m", "messages": []}),
    ("GET", "/v1/models", None),
    ("GET", "/v1/models/Qwen/Qwen3-8B", None),
    ("GET", "/v1/models/gpt%3A4o", None),
]


async def answer_anything(request: web.BaseRequest) -> web.StreamResponse:
    await request.read()
    return web.json_response(CHAT_ANSWER)


@pytest.fixture
async def upstream() -> AsyncIterator[Upstream]:
    async with Upstream(answer_anything) as server:
        yield server


def open_route(proxy: ModelProxy, upstream: Upstream) -> ProxyRoute:
    return proxy.open_route(rollout_id="r0", upstream=upstream.url, api_key=REAL_KEY)


async def raw(
    proxy: ModelProxy,
    method: str,
    target: str,
    key: str,
    body: bytes | None = None,
    headers: dict[str, str] | None = None,
) -> tuple[int, Any]:
    """One request written as it is on a socket; the status and the JSON body back."""
    reader, writer = await asyncio.open_connection(proxy.host, proxy.port)
    lines = [f"{method} {target} HTTP/1.1", f"Host: {proxy.host}:{proxy.port}"]
    lines += [f"Authorization: Bearer {key}", "Connection: close"]
    lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
    if body is not None:
        lines += ["Content-Type: application/json", f"Content-Length: {len(body)}"]
    writer.write(("\r\n".join(lines) + "\r\n\r\n").encode() + (body or b""))
    await writer.drain()
    data = await reader.read()
    writer.close()
    head, _, payload = data.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    if b"transfer-encoding: chunked" in head.lower():
        payload = _unchunk(payload)
    return status, json.loads(payload) if payload else None


def _unchunk(data: bytes) -> bytes:
    out = b""
    while data:
        size_line, _, data = data.partition(b"\r\n")
        size = int(size_line, 16)
        if size == 0:
            break
        out, data = out + data[:size], data[size + 2 :]
    return out


async def test_only_model_calls_and_start_up_requests_reach_the_server(
    proxy: ModelProxy, upstream: Upstream
) -> None:
    route = open_route(proxy, upstream)
    for method, target, body in ALLOWED:
        data = None if body is None else json.dumps(body).encode()
        status, _ = await raw(proxy, method, target, route.key, data)
        assert status == 200, (method, target)
    # each went upstream exactly as the agent wrote it, with the real key
    assert upstream.seen == [(m, t, f"Bearer {REAL_KEY}") for m, t, _ in ALLOWED]
    calls = route.close()
    # the model calls are recorded; the start-up requests (count_tokens, models) are not
    protocols = ["chat", "chat", "chat", "completions", "responses", "messages"]
    assert [c.protocol for c in calls] == protocols
    assert all(c.status == 200 and c.error is None for c in calls)


@pytest.mark.parametrize(("method", "target"), REFUSED)
async def test_everything_else_is_refused_before_the_server_and_recorded(
    proxy: ModelProxy, upstream: Upstream, method: str, target: str
) -> None:
    route = open_route(proxy, upstream)
    body = json.dumps({"model": "m", "messages": []}).encode() if method != "GET" else None
    status, answer = await raw(proxy, method, target, route.key, body)
    assert status == 403
    assert answer["error"]["type"] == "permission_error"
    if target.endswith("/messages"):  # Anthropic's shape
        assert answer["type"] == "error"
    else:  # OpenAI's
        assert answer["error"]["code"] == "path_not_allowed"
    assert answer["error"]["message"].startswith("agentkit model proxy: ")
    assert upstream.seen == []  # nothing reached the server
    [call] = route.close()
    assert call.protocol == "other" and call.method == method and call.path == target
    assert call.status == 403 and call.request is None and call.upstream_request is None
    assert "nothing was sent" in (call.error or "")
    assert call.response == answer
    assert call.headers["authorization"] == "***"
    assert not call.has_tokens and "refused" in (call.token_note or "")


async def test_a_refusal_speaks_the_agents_protocol(proxy: ModelProxy, upstream: Upstream) -> None:
    """An Anthropic client (its version header, or a Messages path) gets Anthropic's error."""
    route = open_route(proxy, upstream)
    status, answer = await raw(
        proxy, "POST", "/v1/files", route.key, b"{}", {"anthropic-version": "2023-06-01"}
    )
    assert status == 403 and answer["type"] == "error"
    assert answer["error"]["type"] == "permission_error"
    status, answer = await raw(proxy, "GET", "/v1/messages", route.key)
    assert status == 403 and answer["error"]["type"] == "permission_error"
    assert answer["type"] == "error"
    assert upstream.seen == []
    assert [c.status for c in route.close()] == [403, 403]


async def test_a_model_call_the_proxy_cannot_read_is_refused_and_recorded(
    proxy: ModelProxy, upstream: Upstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A body that is not a JSON object, and a chunked body over the cap (no length to
    check first): answered by the proxy, nothing sent, both recorded as calls."""
    monkeypatch.setattr("agentkit.proxy._server.MAX_BODY", 1024)
    route = open_route(proxy, upstream)
    status, answer = await raw(proxy, "POST", "/v1/chat/completions", route.key, b"[1, 2]")
    assert status == 400 and answer["error"]["code"] == "invalid_body"
    reader, writer = await asyncio.open_connection(proxy.host, proxy.port)
    chunk = b"x" * 600
    writer.write(
        b"POST /v1/messages HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
        + f"x-api-key: {route.key}\r\nTransfer-Encoding: chunked\r\n\r\n".encode()
        + b"".join(b"%x\r\n%s\r\n" % (len(chunk), chunk) for _ in range(3))
        + b"0\r\n\r\n"
    )
    await writer.drain()
    head = (await reader.read()).partition(b"\r\n")[0]
    writer.close()
    assert b" 413 " in head
    assert upstream.seen == []
    bad, large = route.close()
    assert (bad.protocol, bad.status, bad.request) == ("chat", 400, None)
    assert (large.protocol, large.status, large.request) == ("messages", 413, None)
    assert large.response["error"]["type"] == "request_too_large"  # Anthropic's shape


#: Bodies of a model call the record could not show as a server reads them: refused.
UNREADABLE = {
    "not-json": (b"model=m&messages=[]", "it is not JSON"),
    "empty": (b"", "the body is empty"),
    "a-list": (b'[{"model": "m"}]', "it is a list"),
    "nan": (b'{"model": "m", "messages": [], "temperature": NaN}', "NaN is not a JSON number"),
    "infinity": (b'{"model": "m", "messages": [], "top_p": -Infinity}', "-Infinity is not"),
    "overflow": (b'{"model": "m", "messages": [], "temperature": 1e999}', "too large"),
    "utf-16": ('{"model": "m", "messages": []}'.encode("utf-16"), "not UTF-8"),
    "cesu-surrogate": (b'{"model": "m", "messages": [], "x": "\xed\xa0\x80"}', "not UTF-8"),
    "lone-surrogate": (
        b'{"model": "m", "messages": [{"role": "user", "content": "a\\ud800b"}]}',
        "lone UTF-16 surrogate",
    ),
}


@pytest.mark.parametrize("name", list(UNREADABLE))
async def test_a_model_call_whose_body_is_not_strict_json_is_refused_and_recorded(
    proxy: ModelProxy, upstream: Upstream, name: str
) -> None:
    """A body that is not JSON, not an object, not UTF-8, or holds NaN, Infinity, a number
    no float holds or a lone surrogate: a server may read it otherwise than the record
    would show it (or the record could not be written), so an agent could hide a call in
    it. The proxy answers 400 itself, sends nothing, and records the call."""
    body, why = UNREADABLE[name]
    route = open_route(proxy, upstream)
    status, answer = await raw(proxy, "POST", "/v1/chat/completions", route.key, body)
    assert status == 400 and answer["error"]["code"] == "invalid_body"
    message = answer["error"]["message"]
    assert message.startswith("agentkit model proxy: the body of a model call must be a JSON")
    assert why in message
    assert upstream.seen == []  # nothing reached the server
    [call] = route.close()
    assert (call.protocol, call.method, call.status) == ("chat", "POST", 400)
    assert call.request is None and call.upstream_request is None
    assert call.response == answer and "nothing was sent" in (call.error or "")
    assert not call.has_tokens and "refused" in (call.token_note or "")


async def test_a_strict_json_body_with_escaped_text_goes_upstream(
    proxy: ModelProxy, upstream: Upstream
) -> None:
    """Escapes a client writes for non-ASCII text (a surrogate pair: one emoji) and finite
    numbers in every form pass."""
    route = open_route(proxy, upstream)
    body = (
        b'{"model": "m", "temperature": 0.7e0, "top_p": 1E-1, "n": 1, "messages": '
        b'[{"role": "user", "content": "smile \\ud83d\\ude00 \\u00e9"}]}'
    )
    status, _ = await raw(proxy, "POST", "/v1/chat/completions", route.key, body)
    assert status == 200 and len(upstream.seen) == 1
    [call] = route.close()
    assert call.request["messages"][0]["content"] == "smile \U0001f600 \u00e9"
    assert call.request["top_p"] == 0.1


async def test_a_compressed_body_is_read_decoded_and_capped_decoded(
    proxy: ModelProxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A gzip body (Content-Encoding) is a model call like another: read decoded, recorded,
    sent upstream decoded (no Content-Encoding). One that expands past the cap (64 MiB;
    2 KiB here) is refused with a 413 once its decoded bytes pass it: a gzip bomb of a few
    hundred bytes is never held whole, nor sent."""
    monkeypatch.setattr("agentkit.proxy._server.MAX_BODY", 2048)
    got: list[tuple[str | None, bytes]] = []

    async def keep(request: web.BaseRequest) -> web.StreamResponse:
        got.append((request.headers.get("content-encoding"), await request.read()))
        return web.json_response(CHAT_ANSWER)

    plain = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]})
    bomb = json.dumps({"model": "m", "messages": [], "pad": "a" * 1_000_000})
    async with Upstream(keep) as server:
        route = open_route(proxy, server)
        headers = {"Content-Encoding": "gzip"}
        ok, _ = await raw(
            proxy, "POST", "/v1/chat/completions", route.key, gzip.compress(plain.encode()), headers
        )
        small = gzip.compress(bomb.encode())
        assert len(small) < 2048
        refused, answer = await raw(
            proxy, "POST", "/v1/chat/completions", route.key, small, headers
        )
        assert server.seen[1:] == []
    assert ok == 200 and got == [(None, plain.encode())]
    assert refused == 413 and answer["error"]["code"] == "request_too_large"
    sent, large = route.close()
    assert sent.request == json.loads(plain) and sent.status == 200
    assert (large.status, large.request) == (413, None)


@pytest.mark.parametrize("encoding", ["br", "zstd", "gzip, gzip", "compress"])
async def test_a_body_in_an_encoding_the_proxy_does_not_decode_is_refused_and_recorded(
    proxy: ModelProxy, upstream: Upstream, encoding: str
) -> None:
    """A body in an encoding the proxy does not undo (brotli, zstd, two encodings) is read
    as it came: not strict JSON, so it is refused with a 400 and recorded, and nothing
    goes upstream (the server would decode what the record could not show)."""
    route = open_route(proxy, upstream)
    packed = gzip.compress(gzip.compress(b'{"model": "m", "messages": []}'))
    headers = {"Content-Encoding": encoding}
    status, answer = await raw(proxy, "POST", "/v1/chat/completions", route.key, packed, headers)
    assert status == 400 and answer["error"]["code"] == "invalid_body"
    assert upstream.seen == []
    [call] = route.close()
    assert (call.status, call.request) == (400, None)


class GenerateWire(Wire):
    """A protocol of the test's own, served on any path under the base ending /generate."""

    @classmethod
    def matches(cls, path: str) -> bool:
        return path.endswith("/generate")


async def test_a_registered_protocol_is_forwarded_on_the_paths_it_matches(
    proxy: ModelProxy, upstream: Upstream
) -> None:
    register_wire(GenerateWire)
    try:
        route = open_route(proxy, upstream)
        ok, _ = await raw(proxy, "POST", "/v1/tiny/generate", route.key, b'{"prompt": "x"}')
        refused = [
            (await raw(proxy, "POST", target, route.key, b"{}"))[0]
            for target in (
                "/v1/../generate",
                "/v1/%2e%2e/%2e%2e/generate",
                "/v1//generate",
                "/v1/.%2E/generate",
                "/generate",
            )
        ]
    finally:
        WIRES.remove(GenerateWire)
    assert ok == 200 and refused == [403] * 5
    assert upstream.seen == [("POST", "/v1/tiny/generate", f"Bearer {REAL_KEY}")]
    assert [c.status for c in route.close()] == [200] + [403] * 5
