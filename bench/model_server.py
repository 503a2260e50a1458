"""Speed of the scripted model server: requests/s, latency and server CPU per request.

Each server runs in its own process; a load generator in this process sends
``POST /v1/chat/completions`` requests, non-streamed and streamed (a 400
character reply in 8-character chunks with ``include_usage``: 53 events),
and reads every answer to its end. For each server and workload it prints:

- requests/s with ``--concurrency`` requests in flight (``--requests`` of them),
- latency p50 and p99 of requests sent one at a time (``--sequential`` of them),
- the server process's CPU per request (user + system, from /proc): the
  figure that depends least on the load generator sharing the machine.

Servers measured, interleaved ``--repeat`` times (the best run of each is shown):

- ``scripted``: this tree's ``python -m agentkit.testing.model_server``;
- ``scripted@REV``: the server as it was at git revision ``--before`` (default:
  the last commit with the hand-written HTTP server), when git can show it;
- ``floor/aiohttp``: a trivial aiohttp server answering the same bytes,
  pre-rendered: the library's own cost, measured in the same run;
- ``floor/uvicorn``: the same on starlette and uvicorn, with ``--floors all``
  (the comparison that chose the library).

Ratios are printed against ``floor/aiohttp``. Figures only, never asserted.

    python bench/model_server.py [--requests 3000] [--concurrency 32]
                                 [--sequential 300] [--repeat 3]
                                 [--before REV] [--floors aiohttp|all]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

ROOT = Path(__file__).resolve().parents[1]
#: The last commit whose model server parsed HTTP by hand.
BEFORE_REV = "363a6b3"
STREAM_TEXT = "".join(f"word{i:03d} " for i in range(50))[:400]
SCRIPT = {
    "rules": [
        {
            "match": {"stream": True},
            "reply": {"content": STREAM_TEXT, "chunk_size": 8},
        }
    ],
    "default": {"content": "The answer to the question is forty-two, as computed before."},
}
PLAIN_BODY = {"model": "scripted-model", "messages": [{"role": "user", "content": "question"}]}
STREAM_BODY = {**PLAIN_BODY, "stream": True, "stream_options": {"include_usage": True}}


# -- trivial servers: the floor of each library ----------------------------------------------


def _canned() -> tuple[bytes, list[bytes]]:
    """The bytes a trivial server answers: a completion, and the SSE events of a stream."""
    envelope = {
        "id": "chatcmpl-000001",
        "created": 0,
        "model": "scripted-model",
        "system_fingerprint": "fp_agentkit",
    }
    usage = {"prompt_tokens": 6, "completion_tokens": 16, "total_tokens": 22}
    plain = {
        **envelope,
        "object": "chat.completion",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": SCRIPT["default"]["content"]},  # type: ignore[index]
                "logprobs": None,
                "finish_reason": "stop",
            }
        ],
        "usage": usage,
    }
    chunk = {**envelope, "object": "chat.completion.chunk"}
    deltas: list[dict[str, Any]] = [{"role": "assistant", "content": ""}]
    deltas += [{"content": STREAM_TEXT[i : i + 8]} for i in range(0, len(STREAM_TEXT), 8)]
    events = [
        {**chunk, "choices": [{"index": 0, "delta": d, "finish_reason": None}], "usage": None}
        for d in deltas
    ]
    events.append({**chunk, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    events.append({**chunk, "choices": [], "usage": usage})
    sse = [f"data: {json.dumps(e)}\n\n".encode() for e in events] + [b"data: [DONE]\n\n"]
    return json.dumps(plain).encode(), sse


def serve_floor_aiohttp(port: int) -> None:
    from aiohttp import web

    plain, events = _canned()

    async def chat(request: web.Request) -> web.StreamResponse:
        body = json.loads(await request.read())
        if not body.get("stream"):
            return web.Response(body=plain, content_type="application/json")
        response = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await response.prepare(request)
        for event in events:
            await response.write(event)
        await response.write_eof()
        return response

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)

    async def main() -> None:
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", port)
        await site.start()
        sockets = runner.addresses
        print(f"http://127.0.0.1:{sockets[0][1]}/v1", flush=True)
        await asyncio.Event().wait()

    asyncio.run(main())


def serve_floor_uvicorn(port: int) -> None:
    import socket

    import uvicorn
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response, StreamingResponse
    from starlette.routing import Route

    plain, events = _canned()

    async def chat(request: Request) -> Response:
        body = json.loads(await request.body())
        if not body.get("stream"):
            return Response(plain, media_type="application/json")

        async def gen() -> Any:
            for event in events:
                yield event

        return StreamingResponse(gen(), media_type="text/event-stream")

    app = Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])])
    sock = socket.socket()
    sock.bind(("127.0.0.1", port))
    sock.listen(4096)  # connections wait in the backlog until uvicorn serves
    print(f"http://127.0.0.1:{sock.getsockname()[1]}/v1", flush=True)
    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off")
    uvicorn.Server(config).run(sockets=[sock])


FLOORS: dict[str, Callable[[int], None]] = {
    "aiohttp": serve_floor_aiohttp,
    "uvicorn": serve_floor_uvicorn,
}


# -- servers under test ------------------------------------------------------------------------


class Server:
    """A server in its own process; ``base_url`` once it printed it."""

    def __init__(self, name: str, argv: list[str]) -> None:
        self.name = name
        self.argv = argv
        self.proc: subprocess.Popen[str] | None = None
        self.base_url = ""

    def __enter__(self) -> Server:
        self.proc = subprocess.Popen(self.argv, stdout=subprocess.PIPE, text=True, cwd=ROOT)
        assert self.proc.stdout is not None
        self.base_url = self.proc.stdout.readline().strip()
        if not self.base_url.startswith("http"):
            self.proc.kill()
            raise RuntimeError(f"{self.name} did not start: {self.base_url!r}")
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(10)

    def cpu(self) -> float:
        """User plus system CPU seconds the server process has used so far."""
        assert self.proc is not None
        with open(f"/proc/{self.proc.pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def before_server(rev: str, tmp: Path) -> Path | None:
    """The model server module as it was at ``rev`` written to ``tmp``; None without git."""
    try:
        text = subprocess.run(
            ["git", "show", f"{rev}:src/agentkit/testing/model_server.py"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    path = tmp / "model_server_before.py"
    path.write_text(text)
    return path


# -- the load generator ------------------------------------------------------------------------


class Figures(NamedTuple):
    """One measured run of one server on one workload."""

    rps: float
    p50_ms: float
    p99_ms: float
    cpu_us: float


async def _load(base_url: str, body: dict[str, Any], n: int, concurrency: int) -> list[float]:
    """Send ``n`` requests, ``concurrency`` at a time; the latency of each, in seconds."""
    import aiohttp

    url = f"{base_url}/chat/completions"
    data = json.dumps(body).encode()
    headers = {"content-type": "application/json", "authorization": "Bearer bench"}
    stream = bool(body.get("stream"))
    latencies: list[float] = []
    remaining = iter(range(n))
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def worker() -> None:
            for _ in remaining:
                start = time.perf_counter()
                async with session.post(url, data=data, headers=headers) as response:
                    payload = await response.read()
                if response.status != 200 or (stream and not payload.endswith(b"[DONE]\n\n")):
                    raise RuntimeError(f"bad answer {response.status}: {payload[:200]!r}")
                latencies.append(time.perf_counter() - start)

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    return latencies


def measure(server: Server, body: dict[str, Any], args: argparse.Namespace) -> Figures:
    asyncio.run(_load(server.base_url, body, 50, 4))  # warm up
    cpu0, t0 = server.cpu(), time.perf_counter()
    asyncio.run(_load(server.base_url, body, args.requests, args.concurrency))
    wall = time.perf_counter() - t0
    cpu = server.cpu() - cpu0
    sequential = sorted(asyncio.run(_load(server.base_url, body, args.sequential, 1)))
    p99 = sequential[min(len(sequential) - 1, int(len(sequential) * 0.99))]
    return Figures(
        rps=args.requests / wall,
        p50_ms=statistics.median(sequential) * 1e3,
        p99_ms=p99 * 1e3,
        cpu_us=cpu / args.requests * 1e6,
    )


def best(runs: list[Figures]) -> Figures:
    return Figures(
        rps=max(r.rps for r in runs),
        p50_ms=min(r.p50_ms for r in runs),
        p99_ms=min(r.p99_ms for r in runs),
        cpu_us=min(r.cpu_us for r in runs),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--sequential", type=int, default=300)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--before", default=BEFORE_REV, help="git revision to compare with")
    parser.add_argument("--floors", choices=["aiohttp", "all"], default="aiohttp")
    parser.add_argument("--serve-floor", choices=sorted(FLOORS), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_floor:
        FLOORS[args.serve_floor](0)
        return

    with tempfile.TemporaryDirectory(prefix="agentkit-bench-ms-") as tmp_name:
        tmp = Path(tmp_name)
        script = tmp / "script.json"
        script.write_text(json.dumps(SCRIPT))
        py = sys.executable
        servers = [
            Server("scripted", [py, "-m", "agentkit.testing.model_server", "--script", str(script)])
        ]
        old = before_server(args.before, tmp)
        if old is not None:
            servers.append(
                Server(f"scripted@{args.before}", [py, str(old), "--script", str(script)])
            )
        else:
            print(f"(git cannot show revision {args.before}: no before figures)")
        floors = ["aiohttp"] if args.floors == "aiohttp" else sorted(FLOORS)
        for name in floors:
            servers.append(Server(f"floor/{name}", [py, __file__, "--serve-floor", name]))

        workloads = {"plain": PLAIN_BODY, "stream": STREAM_BODY}
        runs: dict[tuple[str, str], list[Figures]] = {}
        for _ in range(args.repeat):
            for server in servers:
                with server:
                    for workload, body in workloads.items():
                        figures = measure(server, body, args)
                        runs.setdefault((server.name, workload), []).append(figures)

    print(
        f"{args.requests} requests at concurrency {args.concurrency}, {args.sequential} one at a "
        f"time for latency; best of {args.repeat} interleaved runs; ratios against floor/aiohttp"
    )
    for workload in workloads:
        print(f"\n{workload}:")
        print(f"  {'server':<22} {'req/s':>8} {'p50 ms':>8} {'p99 ms':>8} {'CPU us/req':>11}")
        floor = best(runs[("floor/aiohttp", workload)])
        for server in servers:
            f = best(runs[(server.name, workload)])
            print(
                f"  {server.name:<22} {f.rps:8.0f} {f.p50_ms:8.2f} {f.p99_ms:8.2f} "
                f"{f.cpu_us:11.0f}   x{f.rps / floor.rps:.2f} req/s, "
                f"x{f.cpu_us / floor.cpu_us:.2f} CPU"
            )


if __name__ == "__main__":
    main()
