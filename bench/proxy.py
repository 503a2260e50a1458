"""Overhead of the model proxy: streaming calls through it against calling the server directly.

The scripted model server (no latency; a 400-character reply streamed in
8-character chunks with usage: 53 events) runs in its own process, and so
does a model proxy (``agentkit.proxy``, one route). A load generator in this
process (aiohttp's client) starts ``--concurrency`` streaming chat
completions at once, each read to its end, and times every call: time to
its first chunk (TTFT) and in all. Rounds alternate, ``--rounds`` times:

- ``direct``: straight to the server, the baseline of the same run;
- ``floor``: through a trivial aiohttp proxy (server and client, bytes passed on,
  nothing read or recorded): what the library alone costs;
- ``proxy``: through the proxy, chunks passed on as they come (the agent
  asks for its usage itself, so the proxy adds nothing and rewrites nothing);
- ``direct+ids``: straight to the server, the call asking for vLLM's token ids
  and logprobs itself (the server's extra work, the baseline of the next);
- ``proxy+ids``: through the proxy with ``token_ids`` on: it asks for vLLM's
  token ids and logprobs and takes them out of every event again.

Printed per way: the median and p90 of per-call TTFT and total time, the
difference of the medians from its baseline (``direct``, or ``direct+ids``:
the proxy's overhead per call at that concurrency), calls per second and the
proxy process's CPU per call (user + system, from /proc); then the same
medians with one call at a time (``--sequential`` per round): the overhead
of one call without queueing. Targets (issue #25): under 1 ms of overhead at
the median and no change in TTFT beyond 2 ms, at 256 concurrent streaming
calls. Last, the event splitter on one large event (12 MiB, and 50 MB refused at
the 16 MiB cap): CPU time and bytes searched. Figures only, never asserted.

    python bench/proxy.py [--concurrency 256] [--rounds 5]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))
from _server import ServerProcess  # noqa: E402

STREAM_TEXT = "".join(f"word{i:03d} " for i in range(50))[:400]
SCRIPT = {"default": {"content": STREAM_TEXT, "chunk_size": 8}}
BODY = {
    "model": "scripted-model",
    "stream": True,
    "stream_options": {"include_usage": True},
    "messages": [{"role": "user", "content": "question"}],
}
#: The same call asking for vLLM's token fields itself (the baseline of ``proxy+ids``).
BODY_IDS = {**BODY, "return_token_ids": True, "logprobs": True}


def serve_floor(upstream: str) -> None:
    """``--serve-floor``: the least an aiohttp proxy does (aiohttp's server and client, the
    bytes passed on as they come, nothing read or recorded): the library's own cost."""
    from aiohttp import ClientSession, TCPConnector, web
    from yarl import URL

    origin = upstream.rsplit("/v1", 1)[0]

    async def main() -> None:
        session = ClientSession(connector=TCPConnector(limit=0))

        async def handle(request: web.BaseRequest) -> web.StreamResponse:
            body = await request.read()
            async with session.post(
                URL(origin + request.raw_path, encoded=True),
                data=body,
                headers={"Content-Type": "application/json"},
            ) as upstream_response:
                response = web.StreamResponse(status=upstream_response.status)
                response.content_type = upstream_response.content_type
                await response.prepare(request)
                async for chunk in upstream_response.content.iter_any():
                    await response.write(chunk)
                await response.write_eof()
                return response

        runner = web.ServerRunner(web.Server(handle, access_log=None), handle_signals=False)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0, backlog=4096)
        await site.start()
        port = runner.addresses[0][1]
        print(f"http://127.0.0.1:{port}/v1", "none", flush=True)
        await asyncio.Event().wait()

    asyncio.run(main())


def serve_proxy(upstream: str, token_ids: bool) -> None:
    """``--serve-proxy``: one proxy with one route; prints its base URL and key, serves."""
    from agentkit.proxy import ProxySettings, shared_proxy

    async def main() -> None:
        async with shared_proxy() as proxy:
            route = proxy.open_route(
                rollout_id="bench",
                upstream=upstream,
                api_key=None,
                settings=ProxySettings(token_ids=token_ids),
            )
            print(route.base_url, route.key, flush=True)
            await asyncio.Event().wait()

    asyncio.run(main())


class ProxyProcess:
    def __init__(self, upstream: str, token_ids: bool, *, floor: bool = False) -> None:
        self.argv = [sys.executable, __file__, "--serve-floor" if floor else "--serve-proxy"]
        self.argv.append(upstream)
        if token_ids:
            self.argv.append("--token-ids")
        self.proc: subprocess.Popen[str] | None = None

    def __enter__(self) -> ProxyProcess:
        self.proc = subprocess.Popen(self.argv, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        self.base_url, self.key = self.proc.stdout.readline().split()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(10)

    def cpu(self) -> float:
        assert self.proc is not None
        with open(f"/proc/{self.proc.pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def one_call(session: Any, url: str, key: str, body: dict[str, Any]) -> tuple[float, float]:
    t0 = time.perf_counter()
    async with session.post(
        url + "/chat/completions", json=body, headers={"Authorization": f"Bearer {key}"}
    ) as response:
        first: float | None = None
        async for _chunk in response.content.iter_any():
            if first is None:
                first = time.perf_counter() - t0
        if response.status != 200:
            raise RuntimeError(f"HTTP {response.status}")
    total = time.perf_counter() - t0
    return first or total, total


async def one_by_one(
    url: str, key: str, body: dict[str, Any], count: int
) -> list[tuple[float, float]]:
    """``count`` calls, each after the last: the overhead of one call, without queueing."""
    import aiohttp

    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        await one_call(session, url, key, body)
        return [await one_call(session, url, key, body) for _ in range(count)]


async def wave(
    url: str, key: str, body: dict[str, Any], concurrency: int
) -> tuple[list[tuple[float, float]], float]:
    import aiohttp

    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as session:
        await one_call(session, url, key, body)  # a warm pool is not what is measured
        start = time.perf_counter()
        calls = [one_call(session, url, key, body) for _ in range(concurrency)]
        results = await asyncio.gather(*calls)
        return list(results), time.perf_counter() - start


def large_events() -> None:
    """The event splitter on one large event fed in 64 KiB chunks (the issue #32 case: a
    50 MB event took 13 s of CPU when every chunk rescanned the buffer): a 12 MiB event
    (under the 16 MiB cap) read whole, and a 50 MB one refused at the cap."""
    from agentkit._sse import EventSplitter, EventTooLarge

    chunk = 64 * 1024
    for size in (12 * 1024 * 1024, 50 * 1024 * 1024):
        event = b'data: {"x": "' + b"a" * size + b'"}\n\n'
        splitter = EventSplitter()
        started = time.process_time()
        outcome = "read whole"
        try:
            for start in range(0, len(event), chunk):
                splitter.feed(event[start : start + chunk])
        except EventTooLarge:
            outcome = "refused at the cap"
        cpu = time.process_time() - started
        print(
            f"one {size / 1024 / 1024:.0f} MiB event in 64 KiB chunks: {outcome}, "
            f"{cpu * 1000:.0f} ms CPU, {splitter.searched / 1024 / 1024:.1f} MiB searched"
        )


def median(values: list[float]) -> float:
    return statistics.median(values)


def p90(values: list[float]) -> float:
    return statistics.quantiles(values, n=10)[-1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--concurrency", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--sequential", type=int, default=100, help="calls one at a time per round (0: none)"
    )
    parser.add_argument("--serve-proxy", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--serve-floor", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--token-ids", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_proxy:
        serve_proxy(args.serve_proxy, args.token_ids)
        return
    if args.serve_floor:
        serve_floor(args.serve_floor)
        return
    n = args.concurrency
    with (
        ServerProcess(SCRIPT) as server,
        ProxyProcess(server.base_url, False) as plain,
        ProxyProcess(server.base_url, True) as ids,
        ProxyProcess(server.base_url, False, floor=True) as floor,
    ):
        ways: dict[str, tuple[str, str, ProxyProcess | None, dict[str, Any]]] = {
            "direct": (server.base_url, "none", None, BODY),
            "floor": (floor.base_url, floor.key, floor, BODY),
            "proxy": (plain.base_url, plain.key, plain, BODY),
            "direct+ids": (server.base_url, "none", None, BODY_IDS),
            "proxy+ids": (ids.base_url, ids.key, ids, BODY),
        }
        baseline = {"direct": "direct", "floor": "direct", "proxy": "direct"}
        baseline |= {"direct+ids": "direct+ids", "proxy+ids": "direct+ids"}
        calls: dict[str, list[tuple[float, float]]] = {w: [] for w in ways}
        single: dict[str, list[tuple[float, float]]] = {w: [] for w in ways}
        wall: dict[str, list[float]] = {w: [] for w in ways}
        cpu: dict[str, float] = dict.fromkeys(ways, 0.0)
        for _ in range(args.rounds):
            for name, (url, key, proc, body) in ways.items():  # interleaved: load hits all alike
                before = proc.cpu() if proc is not None else 0.0
                results, seconds = asyncio.run(wave(url, key, body, n))
                if proc is not None:
                    cpu[name] += proc.cpu() - before
                calls[name] += results
                wall[name].append(seconds)
                if args.sequential:
                    single[name] += asyncio.run(one_by_one(url, key, body, args.sequential))
    print(f"model proxy: {n} concurrent streaming calls (53 events each), {args.rounds} rounds")
    print(f"load average {os.getloadavg()[0]:.1f}, {os.cpu_count()} CPUs")
    header = (
        f"{'':10} {'TTFT p50':>9} {'p90':>8} {'Δ p50':>8} {'total p50':>10} {'p90':>8} "
        f"{'Δ p50':>8} {'calls/s':>8} {'proxy CPU/call':>15}"
    )
    print(header)
    for name in ways:
        base_ttft = median([c[0] for c in calls[baseline[name]]])
        base_total = median([c[1] for c in calls[baseline[name]]])
        ttft = [c[0] for c in calls[name]]
        total = [c[1] for c in calls[name]]
        rate = n * len(wall[name]) / sum(wall[name])
        per_call = cpu[name] / len(total) * 1000 if ways[name][2] is not None else None
        print(
            f"{name:10} {median(ttft) * 1000:8.1f}ms {p90(ttft) * 1000:6.1f}ms "
            f"{(median(ttft) - base_ttft) * 1000:+7.1f}ms {median(total) * 1000:9.1f}ms "
            f"{p90(total) * 1000:6.1f}ms {(median(total) - base_total) * 1000:+7.1f}ms "
            f"{rate:8.0f} {'-' if per_call is None else f'{per_call:.2f}ms':>15}"
        )
    if args.sequential:
        print(f"one call at a time ({args.sequential} per round): median total, TTFT, Δ")
        for name in ways:
            base_one = median([c[1] for c in single[baseline[name]]])
            base_first = median([c[0] for c in single[baseline[name]]])
            total = median([c[1] for c in single[name]])
            first = median([c[0] for c in single[name]])
            print(
                f"{name:10} total {total * 1000:6.2f}ms ({(total - base_one) * 1000:+.2f}ms)  "
                f"TTFT {first * 1000:6.2f}ms ({(first - base_first) * 1000:+.2f}ms)"
            )
    large_events()
    print(json.dumps({"targets": "overhead < 1 ms at the median, TTFT change < 2 ms"}))


if __name__ == "__main__":
    main()
