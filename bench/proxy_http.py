"""The model proxy's HTTP: what its libraries cost a call, against aiohttp's.

The figures behind the proxy's HTTP layer (docs/model-proxy.md, speed): the
proxy serves agents and calls servers with h11 on asyncio streams, because
the 5% a proxied ``agentkit run`` of 200 one-call rollouts may cost (issue
#32, ``bench/proxy_run.py``) leaves about 60 ms of CPU for the proxy in all.

1. Starting: CPU (and modules newly imported) to start and stop a
   ``ModelProxy`` in a fresh interpreter that has imported what a run without
   the proxy imports (``agentkit.env``, the chat client: httpcore, h11), and to
   import there ``aiohttp.web`` (what the proxy's start imported before),
   httpcore (nothing: the chat client has it) and the proxy's own pool
   (``agentkit.proxy._upstream``).
2. The client side: CPU per call (a JSON body, a whole JSON answer, one call
   at a time on a kept-alive connection) against a bare loopback server in
   this process: httpcore's connection pool (as agentkit's chat client uses
   it), the proxy's ``UpstreamClient`` (h11 on asyncio streams) and aiohttp's
   ``ClientSession``; the ratio of the proxy's pool to httpcore's, and what
   each costs the 200 calls of issue #32's run.
3. The server side: CPU per request answered at once by the proxy's
   ``HttpServer`` (h11 on asyncio streams) and by aiohttp's low-level
   ``web.Server``, a bare client in this process.
4. The whole proxy: CPU per call through ``ModelProxy`` (a route to the bare
   server; the call recorded) less calling the server straight.

Each figure is the median of ``--repeat`` rounds of ``--calls`` calls, the ways
interleaved round by round; the bare server's or client's own share (a few
hundredths of a millisecond) is in every figure alike. Figures only, never
asserted.

    python bench/proxy_http.py [--calls 2000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import statistics
import subprocess
import sys
from collections.abc import Awaitable, Callable
from typing import Any

ANSWER = json.dumps(
    {
        "id": "c1",
        "object": "chat.completion",
        "model": "m",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "42"},
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 9, "completion_tokens": 1, "total_tokens": 10},
    }
).encode()
ANSWER_BYTES = (
    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
    % (
        len(ANSWER),
        ANSWER,
    )
)
BODY = json.dumps({"model": "m", "messages": [{"role": "user", "content": "6 times 7?"}]}).encode()
HEADERS = [("Content-Type", "application/json"), ("Authorization", "Bearer sk-bench")]
PATH = "/v1/chat/completions"
UPSTREAM = "UpstreamClient (h11 on asyncio streams)"
#: The calls of the run issue #32's target is set on (200 one-call rollouts).
RUN_CALLS = 200


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


#: What a run without the proxy imports (its HTTP client included), then a mark.
_BASE = "import sys, asyncio, agentkit.env, agentkit.chat, httpcore, h11; before = set(sys.modules)"
#: Starting and stopping the loop's model proxy.
START = (
    "from agentkit.proxy import ModelProxy\n"
    "async def main():\n"
    "    await (await ModelProxy().start()).close()\n"
    "asyncio.run(main())"
)


def start_cost(code: str, repeat: int) -> tuple[float, int]:
    """Median CPU seconds ``code`` adds to an interpreter that imported what a run
    without the proxy does, and how many modules it imports there."""

    def run(extra: str) -> tuple[float, int]:
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        script = f"{_BASE}\n{extra}\nprint(len(set(sys.modules) - before))"
        done = subprocess.run([sys.executable, "-c", script], check=True, capture_output=True)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
        return cpu, int(done.stdout)

    rounds = [(run(code), run("")) for _ in range(repeat)]
    return statistics.median(a[0] - b[0] for a, b in rounds), rounds[0][0][1]


async def bare_server(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Answers each request with ANSWER at once (reads the head and its Content-Length)."""
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n"):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.partition(b":")[2])
            if length:
                await reader.readexactly(length)
            writer.write(ANSWER_BYTES)
    except (asyncio.IncompleteReadError, OSError):
        writer.close()


async def bare_client(port: int, calls: int, key: str = "sk-bench") -> None:
    """``calls`` POSTs on one kept-alive connection, each answer read whole."""
    request = (
        f"POST {PATH} HTTP/1.1\r\nHost: bench\r\nAuthorization: Bearer {key}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(BODY)}\r\n\r\n"
    ).encode() + BODY
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    for _ in range(calls):
        writer.write(request)
        head = (await reader.readuntil(b"\r\n\r\n")).lower()
        if b"content-length:" in head:
            await reader.readexactly(int(head.split(b"content-length:")[1].split(b"\r\n")[0]))
        else:  # chunked
            while size := int((await reader.readuntil(b"\r\n"))[:-2], 16):
                await reader.readexactly(size + 2)
            await reader.readexactly(2)
    writer.close()


async def httpcore_calls(port: int, calls: int) -> None:
    import httpcore

    pool = httpcore.AsyncConnectionPool(max_connections=None, keepalive_expiry=30)
    url = f"http://127.0.0.1:{port}{PATH}"
    headers = [(k.encode(), v.encode()) for k, v in HEADERS]
    for _ in range(calls):
        async with pool.stream("POST", url, headers=headers, content=BODY) as response:
            async for _chunk in response.aiter_stream():
                pass
    await pool.aclose()


async def upstream_calls(port: int, calls: int) -> None:
    from agentkit.proxy._upstream import UpstreamClient

    client = UpstreamClient()
    for _ in range(calls):
        async with client.request(
            "POST", f"http://127.0.0.1:{port}", PATH, headers=HEADERS, body=BODY
        ) as answer:
            async for _chunk in answer.chunks():
                pass
    await client.close()


async def aiohttp_calls(port: int, calls: int) -> None:
    from aiohttp import ClientSession, TCPConnector

    async with ClientSession(connector=TCPConnector(limit=0)) as session:
        for _ in range(calls):
            async with session.post(
                f"http://127.0.0.1:{port}{PATH}", data=BODY, headers=dict(HEADERS)
            ) as response:
                async for _chunk in response.content.iter_any():
                    pass


async def measure(
    ways: dict[str, Callable[[], Awaitable[None]]], calls: int, repeat: int
) -> dict[str, float]:
    """Median CPU milliseconds per call of each way, the ways interleaved per round."""
    rounds: dict[str, list[float]] = {way: [] for way in ways}
    for _ in range(repeat):
        for way, run in ways.items():
            before = _cpu()
            await run()
            rounds[way].append((_cpu() - before) / calls * 1000)
    return {way: statistics.median(ms) for way, ms in rounds.items()}


async def servers(calls: int, repeat: int) -> dict[str, float]:
    from aiohttp import web

    from agentkit.proxy._http import Request, Response
    from agentkit.proxy._http_server import HttpServer

    async def ours(request: Request) -> Response:
        async for _chunk in request.iter_body():
            pass
        return Response(200, ANSWER, content_type="application/json")

    async def theirs(request: web.BaseRequest) -> web.StreamResponse:
        await request.read()
        return web.Response(body=ANSWER, content_type="application/json")

    server = HttpServer(ours)
    port = await server.start()
    runner = web.ServerRunner(
        web.Server(theirs, access_log=None, handler_cancellation=True), handle_signals=False
    )
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    aio_port = runner.addresses[0][1]
    try:
        return await measure(
            {
                "HttpServer (h11 on asyncio streams)": lambda: bare_client(port, calls),
                "aiohttp web.Server": lambda: bare_client(aio_port, calls),
            },
            calls,
            repeat,
        )
    finally:
        await server.close()
        await runner.cleanup()


async def clients_and_proxy(calls: int, repeat: int) -> tuple[dict[str, float], dict[str, float]]:
    from agentkit.proxy import shared_proxy

    bare = await asyncio.start_server(bare_server, "127.0.0.1", 0)
    port = bare.sockets[0].getsockname()[1]
    try:
        clients = await measure(
            {
                "httpcore's pool (the chat client's)": lambda: httpcore_calls(port, calls),
                UPSTREAM: lambda: upstream_calls(port, calls),
                "aiohttp ClientSession": lambda: aiohttp_calls(port, calls),
            },
            calls,
            repeat,
        )
        async with shared_proxy() as proxy:
            upstream = f"http://127.0.0.1:{port}/v1"
            routes: list[Any] = []

            async def through() -> None:  # a route per round: its calls are recorded on it
                route = proxy.open_route(rollout_id="bench", upstream=upstream, api_key="k")
                routes.append(route)
                await bare_client(proxy.port, calls, route.key)
                route.close()

            whole = await measure(
                {"straight to the server": lambda: bare_client(port, calls), "through": through},
                calls,
                repeat,
            )
        return clients, whole
    finally:
        bare.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.1f}; {os.cpu_count()} CPUs")
    print("beyond what a run without the proxy imports (CPU, median; modules imported):")
    for label, code in (
        ("import aiohttp.web", "import aiohttp.web"),
        ("import httpcore", "import httpcore"),
        ("import the proxy's pool", "import agentkit.proxy._upstream"),
        ("start a ModelProxy", START),
    ):
        cpu, modules = start_cost(code, args.repeat)
        print(f"  {label:24} {cpu * 1000:6.0f} ms, {modules} modules")
    clients, whole = asyncio.run(clients_and_proxy(args.calls, args.repeat))
    served = asyncio.run(servers(args.calls, args.repeat))
    print(f"CPU per call, whole JSON answers, one at a time ({args.calls} calls, median):")
    print("  calling a bare server:")
    for way, ms in clients.items():
        print(f"    {way:42} {ms:.3f} ms")
    pool, ours = clients["httpcore's pool (the chat client's)"], clients[UPSTREAM]
    print(
        f"    UpstreamClient / httpcore's pool: {ours / pool:.2f}; over {RUN_CALLS} calls "
        f"(issue #32's run) {ours * RUN_CALLS:.0f} ms against {pool * RUN_CALLS:.0f} ms"
    )
    print("  serving a bare client:")
    for way, ms in served.items():
        print(f"    {way:42} {ms:.3f} ms")
    straight, through = whole["straight to the server"], whole["through"]
    print(
        f"  the model proxy: {through:.3f} ms a call through it, {straight:.3f} ms straight: "
        f"{through - straight:.3f} ms a call"
    )


if __name__ == "__main__":
    main()
