"""Stream events through the model proxy: cut in linear work, one event capped
(agentkit._sse), and a server that sends an event over the cap, or a compressed
body that expands past it, fails the call as model_bad_response while the agent's
stream ends with an error event (no waiting for the server to finish).

Work is counted (bytes searched for event boundaries), never timed: the timing of one
large event is in bench/proxy.py."""

from __future__ import annotations

import asyncio
import json
import zlib
from typing import Any

import anyio
import httpx
import pytest
from _upstream import Upstream
from aiohttp import web
from hypothesis import given
from hypothesis import strategies as st

from agentkit._sse import MAX_EVENT_BYTES, EventSizes, EventSplitter, EventTooLarge
from agentkit.chat import ChatClient, ModelCallError
from agentkit.proxy import ModelProxy, ProxySettings

MB = 1024 * 1024


def feed_all(splitter: EventSplitter, data: bytes, size: int) -> list[Any]:
    events = []
    for start in range(0, len(data), size):
        events += splitter.feed(data[start : start + size])
    return events


# -- the splitter on its own --------------------------------------------------------


def test_one_large_event_is_searched_once() -> None:
    """A 50 MB event in 64 KiB chunks: each byte searched for a boundary once (plus three
    bytes a chunk where a cut boundary may start), not the whole buffer again per chunk."""
    event = b'data: {"x": "' + b"a" * (50 * MB) + b'"}\n\n'
    splitter = EventSplitter(limit=64 * MB)
    chunk = 64 * 1024
    [parsed] = feed_all(splitter, event, chunk)
    assert parsed.raw == event and len(parsed.data) == len(event) - 8
    chunks = -(-len(event) // chunk)
    assert splitter.searched <= len(event) + 3 * chunks


def test_an_event_over_the_cap_is_refused_once_it_passes_it() -> None:
    """The default cap: a 50 MB event is refused when its first bytes past 16 MiB arrive,
    after linear work, never held whole."""
    splitter = EventSplitter()
    chunk = b"a" * (64 * 1024)
    fed = len(b'data: {"x": "')
    splitter.feed(b'data: {"x": "')
    with pytest.raises(EventTooLarge) as refused:
        while fed < 50 * MB:
            fed += len(chunk)
            splitter.feed(chunk)
    assert MAX_EVENT_BYTES < fed <= MAX_EVENT_BYTES + len(chunk)
    assert splitter.searched <= fed + 3 * (fed // len(chunk) + 1)
    assert "MAX_EVENT_BYTES" in str(refused.value)
    # a complete event over the cap, arriving in one chunk, is refused too
    with pytest.raises(EventTooLarge):
        EventSplitter(limit=1000).feed(b"data: " + b"x" * 2000 + b"\n\n")


STREAM = st.lists(
    st.tuples(
        st.sampled_from([b"\n\n", b"\r\n\r\n", b"\r\r"]),
        st.binary(max_size=30).map(lambda b: b.replace(b"\r", b"").replace(b"\n", b"")),
        st.sampled_from([b"data: ", b"event: x\ndata: ", b": note\r\ndata:"]),
    ),
    max_size=12,
).map(lambda events: b"".join(head + body + end for end, body, head in events))


@given(stream=STREAM, cuts=st.lists(st.integers(min_value=0, max_value=400), max_size=20))
def test_however_a_stream_is_cut_the_same_events_come_out(stream: bytes, cuts: list[int]) -> None:
    whole = EventSplitter()
    expected = whole.feed(stream)
    splitter = EventSplitter()
    sizes = EventSizes(limit=len(stream))
    got = []
    previous = 0
    for cut in [*sorted(c for c in cuts if c <= len(stream)), len(stream)]:
        got += splitter.feed(stream[previous:cut])
        sizes.feed(stream[previous:cut])
        previous = cut
    assert got == expected
    assert splitter.tail() == whole.tail()
    assert sizes._open == len(whole.tail())  # the watcher agrees on the unended event


def test_the_size_watcher_refuses_an_event_over_the_cap() -> None:
    sizes = EventSizes(limit=100)
    sizes.feed(b"data: 1\n\ndata: " + b"x" * 60)
    sizes.feed(b"x" * 30 + b"\r\n\r\ndata: ")  # ended under the cap
    with pytest.raises(EventTooLarge):
        for _ in range(3):
            sizes.feed(b"y" * 40)


# -- through the proxy ---------------------------------------------------------------


class Endless:
    """Streams one event that never ends (``body`` bytes, optionally gzip), then holds
    the connection open until the client goes: only a proxy that stops at the cap ever
    answers the agent."""

    def __init__(self, gzip: bool) -> None:
        self.gzip = gzip
        self.gone = asyncio.Event()

    async def __call__(self, request: web.BaseRequest) -> web.StreamResponse:
        await request.read()
        headers = {"content-type": "text/event-stream"}
        if self.gzip:
            headers["content-encoding"] = "gzip"
        response = web.StreamResponse(headers=headers)
        await response.prepare(request)
        first = b'data: {"id":"c","choices":[{"index":0,"delta":{"role":"assistant"}}]}\n\n'
        start = first + b'data: {"id":"c","choices":[{"index":0,"delta":{"content":"'
        try:
            if self.gzip:  # 64 MiB of event in about 64 KiB
                packer = zlib.compressobj(6, zlib.DEFLATED, 31)
                await response.write(packer.compress(start))
                block = b"a" * MB
                for _ in range(64):
                    await response.write(packer.compress(block))
                await response.write(packer.flush(zlib.Z_SYNC_FLUSH))
            else:
                await response.write(start)
                for _ in range(MAX_EVENT_BYTES // MB + 4):
                    await response.write(b"a" * MB)
            await asyncio.Event().wait()  # the event never ends: held until cancelled
        finally:
            self.gone.set()
        return response


BODY = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]}


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("gzip", "usage"),
    [(False, False), (False, True), (True, False)],
    ids=["rewritten", "passed-on", "gzip-bomb"],
)
async def test_an_event_over_the_cap_fails_the_call_and_ends_the_agents_stream(
    proxy: ModelProxy, gzip: bool, usage: bool
) -> None:
    """Rewritten (the proxy asks for the usage): the agent gets the first event, then an
    error event (code model_bad_response) and the end of the stream. Passed on as it
    comes (the agent asked for its usage itself): the stream ends where the proxy cut it.
    A gzip body of 64 KiB that expands to 64 MiB in one event is cut at the same cap."""
    server = Endless(gzip)
    body = {**BODY, "stream_options": {"include_usage": True}} if usage else BODY
    async with Upstream(server) as upstream:
        route = proxy.open_route(
            rollout_id="r", upstream=upstream.url, api_key=None, settings=ProxySettings()
        )
        head = b""  # the stream's first and last bytes (what a client parses)
        tail = b""
        size = 0
        with anyio.fail_after(60):  # a hang guard: a proxy without the cap never answers
            async with (
                httpx.AsyncClient(timeout=60) as client,
                client.stream(
                    "POST",
                    route.base_url + "/chat/completions",
                    json=body,
                    headers={"Authorization": f"Bearer {route.key}"},
                ) as response,
            ):
                assert response.status_code == 200
                async for chunk in response.aiter_bytes():
                    size += len(chunk)
                    head = head or chunk
                    tail = (tail + chunk)[-2000:]
            await server.gone.wait()  # the proxy let go of the server's connection
        [call] = route.close()
    first = head.split(b"\n\n")[0]
    assert json.loads(first[5:])["choices"][0]["delta"]["role"] == "assistant"
    assert size <= MAX_EVENT_BYTES + 2 * MB  # never more than the cap and a chunk
    if usage:  # passed on as it came: the stream ends in the unended event, which a
        # client's event parser drops (no blank line ever ends it)
        assert tail.endswith(b"a") and size > MB
    else:
        assert tail.endswith(b"\n\n")
        error = json.loads(tail.rstrip(b"\n").rsplit(b"\n\n", 1)[-1][5:])["error"]
        assert error["code"] == "model_bad_response" and "MAX_EVENT_BYTES" in error["message"]
    assert call.error is not None and call.error.startswith("model_bad_response: ")
    assert "MAX_EVENT_BYTES" in call.error and call.status == 200
    assert not call.has_tokens


class WholeBomb:
    """A whole (not streamed) JSON answer, gzip, that expands to 8 MiB and never ends."""

    def __init__(self) -> None:
        self.gone = asyncio.Event()

    async def __call__(self, request: web.BaseRequest) -> web.StreamResponse:
        await request.read()
        headers = {"content-type": "application/json", "content-encoding": "gzip"}
        response = web.StreamResponse(headers=headers)
        await response.prepare(request)
        packer = zlib.compressobj(6, zlib.DEFLATED, 31)
        try:
            await response.write(packer.compress(b'{"choices": [{"message": {"content": "'))
            for _ in range(8):
                await response.write(packer.compress(b"a" * MB))
            await response.write(packer.flush(zlib.Z_SYNC_FLUSH))
            await asyncio.Event().wait()
        finally:
            self.gone.set()
        return response


@pytest.mark.anyio
@pytest.mark.parametrize("stream", [True, False], ids=["stream", "whole"])
async def test_the_chat_client_fails_such_a_call_as_model_bad_response(
    proxy: ModelProxy, monkeypatch: pytest.MonkeyPatch, stream: bool
) -> None:
    """agentkit's own chat client (every built-in harness's) reads the proxy's error as
    model_bad_response: the error event that ends a cut stream, and the 502 that answers a
    whole body past the proxy's cap (64 MiB; 1 MiB here)."""
    monkeypatch.setattr("agentkit.proxy._forward.MAX_BODY", MB)
    server: Any = Endless(gzip=False) if stream else WholeBomb()
    async with Upstream(server) as upstream:
        route = proxy.open_route(rollout_id="r", upstream=upstream.url, api_key=None)
        client = ChatClient(route.base_url, model="m", api_key=route.key, stream=stream)
        try:
            with anyio.fail_after(60), pytest.raises(ModelCallError) as failed:
                await client.complete([{"role": "user", "content": "hi"}])
        finally:
            await client.aclose()
        with anyio.fail_after(60):
            await server.gone.wait()
        [call] = route.close()
    assert failed.value.kind == "model_bad_response"
    assert call.error is not None and call.error.startswith("model_bad_response: ")
    if not stream:
        # the server said 200; the agent got the proxy's 502
        assert call.status == 200 and call.response["error"]["code"] == "model_bad_response"


@pytest.mark.anyio
async def test_the_chat_client_without_the_proxy_stops_at_the_same_cap() -> None:
    """The chat client reads streams with the proxy's splitter (agentkit._sse): straight to
    a server whose one event never ends, it stops at MAX_EVENT_BYTES with
    model_bad_response instead of holding the event as it grows."""
    server = Endless(gzip=False)
    async with Upstream(server) as upstream:
        client = ChatClient(upstream.url, model="m", api_key="sk-test", stream=True)
        try:
            with anyio.fail_after(60), pytest.raises(ModelCallError) as failed:
                await client.complete([{"role": "user", "content": "hi"}])
        finally:
            await client.aclose()
        with anyio.fail_after(60):
            await server.gone.wait()
    assert failed.value.kind == "model_bad_response"
    assert "MAX_EVENT_BYTES" in str(failed.value)
