"""The model proxy's HTTP on the wire (agentkit.proxy._http_server, _upstream): requests
written byte by byte on a raw socket, so no client tidies them first, against a proxy
forwarding to an aiohttp server of the test's own (tests/_upstream.py).

One request at a time per connection (a pipelined one waits its turn), a head that is
not HTTP/1.1 or too long, a body framed two ways, a client that leaves half-way through
a chunked body, ``Expect: 100-continue``, a connection idle too long, a server that
answers garbage or an encoded body; and a proxied ``agentkit run`` that never loads
aiohttp."""

from __future__ import annotations

import asyncio
import base64
import gzip
import json
import os
import ssl
import subprocess
import sys
import zlib
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import anyio
import httpx
import pytest
from _upstream import Upstream
from aiohttp import web

import agentkit.runs
from agentkit.proxy import ModelProxy, ProxyRoute
from agentkit.testing.model_server import ScriptedModelServer

pytestmark = pytest.mark.anyio

REAL_KEY = "sk-http-real-key-3f9e10"


def answer(content: str) -> dict[str, Any]:
    message = {"role": "assistant", "content": content}
    return {
        "id": "c1",
        "object": "chat.completion",
        "model": "m",
        "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
    }


async def echo_model(request: web.BaseRequest) -> web.StreamResponse:
    """Answers with the request's ``model`` as the reply's text."""
    body = json.loads(await request.read())
    return web.json_response(answer(body["model"]))


def open_route(proxy: ModelProxy, upstream: Upstream) -> ProxyRoute:
    return proxy.open_route(rollout_id="r0", upstream=upstream.url, api_key=REAL_KEY)


def chat_request(route: ProxyRoute, model: str, *, close: bool = False) -> bytes:
    body = json.dumps({"model": model, "messages": [{"role": "user", "content": "hi"}]})
    head = [
        "POST /v1/chat/completions HTTP/1.1",
        "Host: proxy",
        f"Authorization: Bearer {route.key}",
        "Content-Type: application/json",
        f"Content-Length: {len(body)}",
    ] + (["Connection: close"] if close else [])
    return ("\r\n".join(head) + "\r\n\r\n" + body).encode()


async def read_response(reader: asyncio.StreamReader) -> tuple[int, dict[str, str], bytes]:
    """One response off the socket: status, headers (lower-case names), body."""
    head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1")
    status_line, *lines = head.split("\r\n")
    headers = {}
    for line in lines:
        if line:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
    status = int(status_line.split(" ")[1])
    if "content-length" in headers:
        body = await reader.readexactly(int(headers["content-length"]))
    elif headers.get("transfer-encoding") == "chunked":
        body = b""
        while size := int((await reader.readuntil(b"\r\n"))[:-2], 16):
            body += (await reader.readexactly(size + 2))[:-2]
        await reader.readuntil(b"\r\n")
    else:
        body = await reader.read()
    return status, headers, body


def content(body: bytes) -> str:
    return str(json.loads(body)["choices"][0]["message"]["content"])


async def test_pipelined_requests_are_answered_in_turn_on_one_connection(
    proxy: ModelProxy,
) -> None:
    """Two requests written behind one the server still answers, then a fourth, on one
    kept-alive connection: they wait their turn (nothing of them reaches the server while
    the first is answered, and they are not lost), then each gets its own answer, in
    order, one call each."""
    arrived, release = asyncio.Event(), asyncio.Event()

    async def holds_the_first(request: web.BaseRequest) -> web.StreamResponse:
        body = json.loads(await request.read())
        if body["model"] == "first":
            arrived.set()
            await release.wait()
        return web.json_response(answer(body["model"]))

    async with Upstream(holds_the_first) as upstream:
        route = open_route(proxy, upstream)
        with anyio.fail_after(30):  # a hang guard: a lost pipelined request never answers
            reader, writer = await asyncio.open_connection(proxy.host, proxy.port)
            writer.write(chat_request(route, "first"))
            await arrived.wait()
            writer.write(chat_request(route, "second") + chat_request(route, "third"))
            await writer.drain()
            # a round trip on another connection, while the first is still answered: the
            # two pipelined requests were on the proxy's socket before it began
            assert (await raw_call(proxy, route, "aside"))[0] == 200
            assert [c.request["model"] for c in route.calls] == ["aside"]
            release.set()
            answers = [await read_response(reader) for _ in range(3)]
            writer.write(chat_request(route, "fourth", close=True))
            answers.append(await read_response(reader))
            assert await reader.read() == b""  # closed, as the fourth asked
            writer.close()
    assert [a[0] for a in answers] == [200] * 4
    models = ["first", "second", "third", "fourth"]
    assert [content(a[2]) for a in answers] == models
    assert answers[0][1].get("connection") != "close" and answers[3][1]["connection"] == "close"
    assert len(upstream.seen) == 5
    assert [c.request["model"] for c in route.close()] == ["first", "aside", *models[1:]]


#: Heads the proxy cannot read as HTTP/1.1, or will not: the status it answers with.
MALFORMED = {
    "not-http": (b"GARBAGE\r\n\r\n", 400),
    "bad-length": (b"Content-Length: ten\r\n\r\n", 400),
    "length-and-chunked": (
        b"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
        400,
    ),
    "other-coding": (b"Transfer-Encoding: gzip, chunked\r\n\r\n", 501),
    # h11 refuses a head once more than 64 KiB of it wait for their end (one read of up
    # to 64 KiB may complete a longer one)
    "head-too-long": (b"X-Padding: " + b"a" * 200_000 + b"\r\n\r\n", 431),
    "bad-header": (b"Bad Header: x\r\n\r\n", 400),
}


@pytest.mark.parametrize("name", list(MALFORMED))
async def test_a_request_the_proxy_cannot_read_is_answered_and_the_connection_closed(
    proxy: ModelProxy, name: str
) -> None:
    """Even with a route's key: nothing reaches the server, nothing is recorded (no call
    was read), and the proxy goes on serving."""
    tail, status = MALFORMED[name]
    async with Upstream(echo_model) as upstream:
        route = open_route(proxy, upstream)
        head = (
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: proxy\r\n"
            + f"Authorization: Bearer {route.key}\r\n".encode()
        )
        data = tail if name == "not-http" else head + tail
        with anyio.fail_after(30):
            reader, writer = await asyncio.open_connection(proxy.host, proxy.port)
            writer.write(data)
            got, headers, body = await read_response(reader)
            assert await reader.read() == b""  # and the connection closed
            writer.close()
            ok, *_ = await raw_call(proxy, route, "after")
        assert upstream.seen == [("POST", "/v1/chat/completions", f"Bearer {REAL_KEY}")]
    assert got == status and headers["connection"] == "close"
    error = json.loads(body)["error"]
    assert error["message"].startswith("agentkit model proxy: ")
    assert ok == 200
    assert [c.request["model"] for c in route.close()] == ["after"]


async def raw_call(
    proxy: ModelProxy, route: ProxyRoute, model: str
) -> tuple[int, dict[str, str], bytes]:
    reader, writer = await asyncio.open_connection(proxy.host, proxy.port)
    writer.write(chat_request(route, model, close=True))
    try:
        return await read_response(reader)
    finally:
        writer.close()


async def test_a_client_that_leaves_half_way_through_a_chunked_body_sends_nothing(
    proxy: ModelProxy,
) -> None:
    """The agent sends the head and part of a chunked body, then closes its side: the
    part is never sent upstream nor recorded (it is not the call the agent meant), the
    connection is dropped, and the proxy goes on serving."""
    async with Upstream(echo_model) as upstream:
        route = open_route(proxy, upstream)
        part = json.dumps({"model": "partial", "messages": []}).encode()
        with anyio.fail_after(30):
            reader, writer = await asyncio.open_connection(proxy.host, proxy.port)
            writer.write(
                b"POST /v1/chat/completions HTTP/1.1\r\nHost: proxy\r\n"
                + f"Authorization: Bearer {route.key}\r\n".encode()
                + b"Transfer-Encoding: chunked\r\n\r\n"
                + b"%x\r\n%s\r\n" % (len(part), part)  # a whole JSON body, never ended
            )
            await writer.drain()
            writer.write_eof()  # the agent is gone (its side of the connection closed)
            try:
                left = await reader.read()  # the proxy drops the connection
            except ConnectionResetError:
                left = b""
            writer.close()
            ok, *_ = await raw_call(proxy, route, "after")
        assert upstream.seen == [("POST", "/v1/chat/completions", f"Bearer {REAL_KEY}")]
    assert left == b"" and ok == 200
    assert [c.request["model"] for c in route.close()] == ["after"]


async def test_expect_100_continue_gets_its_interim_answer(proxy: ModelProxy) -> None:
    """An agent that asks ``Expect: 100-continue`` (curl does for large bodies) waits for
    ``100 Continue`` before it sends its body: the proxy sends it when it reads the body."""
    async with Upstream(echo_model) as upstream:
        route = open_route(proxy, upstream)
        body = json.dumps({"model": "patient", "messages": []}).encode()
        with anyio.fail_after(30):  # a hang guard: without the 100 both sides wait
            reader, writer = await asyncio.open_connection(proxy.host, proxy.port)
            writer.write(
                b"POST /v1/chat/completions HTTP/1.1\r\nHost: proxy\r\nConnection: close\r\n"
                + f"Authorization: Bearer {route.key}\r\nContent-Length: {len(body)}\r\n".encode()
                + b"Expect: 100-continue\r\n\r\n"
            )
            interim = await reader.readuntil(b"\r\n\r\n")
            writer.write(body)
            status, _, answered = await read_response(reader)
            writer.close()
    assert interim.startswith(b"HTTP/1.1 100 ")
    assert status == 200 and content(answered) == "patient"
    [call] = route.close()
    assert call.request["model"] == "patient" and call.status == 200


@pytest.mark.parametrize("sent", [b"", b"POST /v1/chat/completions HTTP/1.1\r\nHost: pro"])
async def test_a_connection_idle_too_long_is_closed(
    proxy: ModelProxy, monkeypatch: pytest.MonkeyPatch, sent: bytes
) -> None:
    """A connection that sends nothing, or a head it never finishes, is closed once the
    idle timeout passes (75 s; a fraction of a second here)."""
    monkeypatch.setattr("agentkit.proxy._http_server.IDLE_TIMEOUT", 0.2)
    with anyio.fail_after(30):  # a hang guard: without the timeout the proxy waits on
        reader, writer = await asyncio.open_connection(proxy.host, proxy.port)
        writer.write(sent)
        assert await reader.read() == b""
        writer.close()


#: Bodies encoded as a server may send them although the proxy asks for none.
ENCODED = {
    "gzip": ("gzip", gzip.compress),
    "deflate-zlib": ("deflate", zlib.compress),
    "deflate-raw": ("deflate", lambda data: zlib.compress(data, wbits=-zlib.MAX_WBITS)),
}


@pytest.mark.parametrize("name", list(ENCODED))
async def test_an_encoded_answer_is_read_decoded(proxy: ModelProxy, name: str) -> None:
    """The agent gets the answer decoded (without its Content-Encoding) and the record
    has it parsed."""
    encoding, encode = ENCODED[name]

    async def encoded(request: web.BaseRequest) -> web.StreamResponse:
        await request.read()
        data = encode(json.dumps(answer("squeezed")).encode())
        headers = {"Content-Encoding": encoding, "Content-Type": "application/json"}
        return web.Response(body=data, headers=headers)

    async with Upstream(encoded) as upstream:
        route = open_route(proxy, upstream)
        status, headers, body = await raw_call(proxy, route, "m")
    assert status == 200 and "content-encoding" not in headers
    assert content(body) == "squeezed"
    [call] = route.close()
    assert call.error is None and call.response["choices"][0]["message"]["content"] == "squeezed"


async def test_a_server_that_answers_garbage_is_a_dropped_connection(proxy: ModelProxy) -> None:
    """A server that answers what is not HTTP: the agent's connection drops, as if it had
    called the server itself, and the call is recorded with httpcore's reason."""
    got = asyncio.Event()

    async def garbage(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        got.set()
        writer.write(b"SPEAK FRIEND AND ENTER\r\n\r\n")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(garbage, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        route = proxy.open_route(
            rollout_id="r", upstream=f"http://127.0.0.1:{port}/v1", api_key=REAL_KEY
        )
        with anyio.fail_after(30):
            async with httpx.AsyncClient(timeout=30) as client:
                with pytest.raises(httpx.TransportError):
                    await client.post(
                        route.base_url + "/chat/completions",
                        json={"model": "m", "messages": []},
                        headers={"Authorization": f"Bearer {route.key}"},
                    )
        assert got.is_set()
    finally:
        server.close()
    [call] = route.close()
    assert call.status is None and call.error is not None
    assert "could not be reached" in call.error and "RemoteProtocolError" in call.error


#: Runs ``agentkit run`` (the arguments after the first) as ``python -m agentkit`` does,
#: and at the process's exit writes the names in ``sys.modules`` to the first argument.
_MODULES_AT_EXIT = """
import atexit, json, runpy, sys
out = sys.argv.pop(1)
atexit.register(lambda: open(out, "w").write(json.dumps(sorted(sys.modules))))
sys.argv[0] = "agentkit"
runpy.run_module("agentkit", run_name="__main__", alter_sys=True)
"""


def test_a_proxied_run_never_loads_aiohttp(
    tmp_path: Path, model_server: ScriptedModelServer
) -> None:
    """``agentkit run`` through the model proxy imports nothing of aiohttp: its server
    and client cost a process 0.2 s of CPU to import, more than the 5% the proxy may add
    to a run of 200 rollouts (issue #32). The command runs in its own process, which
    writes the modules it has loaded (``sys.modules``) as it exits."""
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("".join(json.dumps({"id": f"q{i}", "input": "hi"}) + "\n" for i in range(3)))
    run, modules = tmp_path / "run", tmp_path / "modules.json"
    proc = subprocess.run(
        [sys.executable, "-c", _MODULES_AT_EXIT, str(modules), "run", f"jsonl:{tasks}", "chat",
         "--model", "scripted-model", "--base-url", model_server.base_url, "--no-preflight",
         "--out", str(run)],
        capture_output=True, text=True, check=False, timeout=120,
        env={**os.environ, "OPENAI_API_KEY": "sk-test"},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    loaded = set(json.loads(modules.read_text()))
    assert {"agentkit.proxy._http_server", "agentkit.proxy._upstream", "h11"} <= loaded
    assert sorted(m for m in loaded if m.split(".")[0] in ("aiohttp", "yarl")) == []
    reader = agentkit.runs.open(run)
    calls = [c for r in reader.rollouts(0, 10) for c in reader.calls(r.rollout_id)]
    assert [c.status for c in calls] == [200, 200, 200]  # the calls went through the proxy


class ForwardProxy:
    """An HTTP proxy of the test's own: a ``CONNECT`` tunnel to the host it names, or a
    request with a whole URL passed on to its host as it came. ``seen``: each request's
    first line and ``Proxy-Authorization``; ``refuse``: answer CONNECT with a 403."""

    def __init__(self, *, refuse: bool = False) -> None:
        self.refuse = refuse
        self.seen: list[tuple[str, str | None]] = []
        self.url = ""
        self._server: asyncio.Server | None = None

    async def __aenter__(self) -> ForwardProxy:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        self.url = f"http://agent:p%40ss@127.0.0.1:{port}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        line, *fields = head.decode("latin-1").split("\r\n")
        auth = [f.partition(":")[2].strip() for f in fields if f.lower().startswith("proxy-auth")]
        self.seen.append((line, auth[0] if auth else None))
        method, target, _ = line.split(" ")
        if method == "CONNECT":
            if self.refuse:
                writer.write(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n")
                writer.close()
                return
            host, _, port = target.rpartition(":")
            up_reader, up_writer = await asyncio.open_connection(host, int(port))
            writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
        else:
            parts = urlsplit(target)
            up_reader, up_writer = await asyncio.open_connection(parts.hostname, parts.port)
            up_writer.write(head)
        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))


async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except OSError:
        pass
    finally:
        writer.close()


@pytest.fixture
def no_proxy_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in ("NO_PROXY", "no_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


async def test_calls_go_through_the_http_proxy_the_environment_names(
    proxy: ModelProxy, no_proxy_env: pytest.MonkeyPatch
) -> None:
    """HTTP_PROXY for an http endpoint: each call goes to the HTTP proxy with the whole
    URL, and its user and password as Proxy-Authorization."""
    async with Upstream(echo_model) as upstream, ForwardProxy() as forward:
        no_proxy_env.setenv("HTTP_PROXY", forward.url)
        route = open_route(proxy, upstream)
        assert route.http_proxy == forward.url
        status, _, body = await raw_call(proxy, route, "proxied")
        assert len(upstream.seen) == 1
    assert status == 200 and content(body) == "proxied"
    basic = "Basic " + base64.b64encode(b"agent:p@ss").decode()
    assert forward.seen == [(f"POST {upstream.url}/chat/completions HTTP/1.1", basic)]
    [call] = route.close()
    assert call.status == 200 and call.error is None


async def test_an_https_endpoint_is_reached_through_a_connect_tunnel(
    tmp_path: Path, proxy: ModelProxy, no_proxy_env: pytest.MonkeyPatch
) -> None:
    """HTTPS_PROXY for an https endpoint: a CONNECT tunnel to it, and TLS inside the
    tunnel with the endpoint's certificate checked against its host."""
    trustme = pytest.importorskip("trustme")
    authority = trustme.CA()
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    authority.issue_cert("127.0.0.1").configure_cert(context)
    bundle = tmp_path / "ca.pem"
    authority.cert_pem.write_to_path(str(bundle))
    no_proxy_env.setenv("SSL_CERT_FILE", str(bundle))
    script = {"default": {"content": "through the tunnel"}}
    with ScriptedModelServer(script, ssl=context) as server:
        port = server.base_url.split(":")[2].split("/")[0]
        async with ForwardProxy() as forward:
            no_proxy_env.setenv("HTTPS_PROXY", forward.url)
            route = proxy.open_route(rollout_id="r", upstream=server.base_url, api_key=REAL_KEY)
            status, _, body = await raw_call(proxy, route, "m")
        assert len(server.model_requests) == 1
    assert status == 200 and content(body) == "through the tunnel"
    assert [line for line, _ in forward.seen] == [f"CONNECT 127.0.0.1:{port} HTTP/1.1"]
    [call] = route.close()
    assert call.status == 200


async def test_a_tunnel_the_http_proxy_refuses_is_an_unreached_endpoint(
    proxy: ModelProxy, no_proxy_env: pytest.MonkeyPatch
) -> None:
    async with ForwardProxy(refuse=True) as forward:
        no_proxy_env.setenv("HTTPS_PROXY", forward.url)
        route = proxy.open_route(
            rollout_id="r", upstream="https://127.0.0.1:9/v1", api_key=REAL_KEY
        )
        with anyio.fail_after(30), pytest.raises(asyncio.IncompleteReadError):
            await raw_call(proxy, route, "m")  # the connection drops, as the server's would
    [call] = route.close()
    assert call.status is None and "could not be reached" in (call.error or "")
    assert "the HTTP proxy answered HTTP 403 to CONNECT" in (call.error or "")


async def test_a_connection_to_the_server_is_kept_while_the_server_keeps_it(
    proxy: ModelProxy,
) -> None:
    """Calls one after another reuse one connection to the server; one the server closes
    after its answer (Connection: close, or its socket closed) is not reused: the next
    call opens another and succeeds."""
    peers: list[int] = []

    async def closes_after_the_second(request: web.BaseRequest) -> web.StreamResponse:
        assert request.transport is not None
        peers.append(request.transport.get_extra_info("peername")[1])
        body = json.loads(await request.read())
        headers = {"Connection": "close"} if len(peers) == 2 else {}
        return web.json_response(answer(body["model"]), headers=headers)

    async with Upstream(closes_after_the_second) as upstream:
        route = open_route(proxy, upstream)
        statuses = [(await raw_call(proxy, route, f"call{i}"))[0] for i in range(3)]
    assert statuses == [200, 200, 200]
    assert peers[0] == peers[1] != peers[2]
    assert [c.error for c in route.close()] == [None, None, None]


async def test_a_connection_the_server_closed_while_idle_is_not_reused(
    proxy: ModelProxy,
) -> None:
    """A server that closes each connection once it has answered, without saying so in
    its headers (as one whose keep-alive time ran out): the proxy sees the connection's
    end and opens a new one for the next call, which succeeds."""
    connections = 0
    data = json.dumps(answer("fresh")).encode()

    async def answers_once(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        head = await reader.readuntil(b"\r\n\r\n")
        length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
        await reader.readexactly(length)
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
            + b"Content-Length: %d\r\n\r\n%s" % (len(data), data)
        )
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(answers_once, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        route = proxy.open_route(
            rollout_id="r", upstream=f"http://127.0.0.1:{port}/v1", api_key=REAL_KEY
        )
        with anyio.fail_after(30):
            statuses = [(await raw_call(proxy, route, f"call{i}"))[0] for i in range(3)]
    finally:
        server.close()
    assert statuses == [200, 200, 200] and connections == 3
    assert [c.error for c in route.close()] == [None, None, None]
