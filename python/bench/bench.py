"""Closed-loop benchmark: the polygateway package vs a bare aiohttp client, same mock upstream.

For each client (``polygateway`` — ``chat()`` —, ``polygateway.chat_stream`` — the delta iterator,
streaming only — and ``aiohttp``), streaming and not, concurrency 1 and 64: N
workers each send their next call as soon as the previous one returns, for ``--seconds`` after
a warm-up. Prints one JSON line per configuration — calls/s, CPU ms per call (this process:
Python and the runtime's threads; the mock runs in a child process), p50 — and one line with
the package/aiohttp ratios.

    maturin develop --release   # in a virtual environment with aiohttp
    python bench/bench.py --seconds 5

Governance is on for the package (memory limiter and breaker, adaptive pacer, retries, stream
watchdogs); telemetry is off unless ``--telemetry sqlite``.
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

MOCK = """
import sys
from polygateway.testing import MockUpstream
mock = MockUpstream("healthy", chunks=int(sys.argv[1]))
print(mock.base_url, flush=True)
sys.stdin.read()
"""

MESSAGES = [{"role": "user", "content": "Say hello."}]


async def closed_loop(call, concurrency: int, seconds: float, warmup: float):
    latencies = []
    stop_at = 0.0
    measuring = False

    async def worker():
        while True:
            started = time.perf_counter()
            if started >= stop_at:
                return
            await call()
            if measuring:
                latencies.append(time.perf_counter() - started)

    stop_at = time.perf_counter() + warmup
    await asyncio.gather(*[worker() for _ in range(concurrency)])
    measuring = True
    cpu0, t0 = time.process_time(), time.perf_counter()
    stop_at = t0 + seconds
    await asyncio.gather(*[worker() for _ in range(concurrency)])
    wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    n = len(latencies)
    return {
        "calls": n,
        "calls_per_s": round(n / wall, 1),
        "cpu_ms_per_call": round(cpu * 1000 / n, 4),
        "p50_ms": round(statistics.median(latencies) * 1000, 3),
    }


async def package_client(base_url: str, telemetry: str, tmp: str, iterate: bool = False):
    from polygateway import GatewayClient
    from polygateway.testing import mock_env

    extra = {}
    if telemetry == "sqlite":
        extra = {"PGW_TELEMETRY_BACKEND": "sqlite",
                 "PGW_TELEMETRY_SQLITE_PATH": os.path.join(tmp, "bench.sqlite")}
    client = GatewayClient.from_settings(mock_env("LLM", base_url, **extra))

    def make(stream: bool):
        async def call():
            reply = await client.chat(MESSAGES, stream=stream)
            assert reply.content
        return call

    def make_iter(stream: bool):
        async def call():
            text = "".join([d.content async for d in client.chat_stream(MESSAGES)])
            assert text
        return call

    return client, (make_iter if iterate else make)


async def aiohttp_client(base_url: str):
    import aiohttp

    session = aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=0),
        headers={"Authorization": "Bearer sk-test"},
    )
    url = f"{base_url}/chat/completions"

    def make(stream: bool):
        body = {"model": "test-model", "messages": MESSAGES, "stream": stream}
        if stream:
            body["stream_options"] = {"include_usage": True}

            async def call():
                parts = []
                async with session.post(url, json=body) as resp:
                    resp.raise_for_status()
                    async for line in resp.content:
                        line = line.strip()
                        if not line.startswith(b"data:"):
                            continue
                        data = line[5:].strip()
                        if data == b"[DONE]":
                            break
                        chunk = json.loads(data)
                        for choice in chunk.get("choices") or ():
                            parts.append((choice.get("delta") or {}).get("content") or "")
                assert "".join(parts)
        else:
            async def call():
                async with session.post(url, json=body) as resp:
                    resp.raise_for_status()
                    answer = await resp.json()
                assert answer["choices"][0]["message"]["content"]
        return call

    return session, make


async def main(args) -> None:
    mock = subprocess.Popen([sys.executable, "-c", MOCK, str(args.chunks)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    base_url = mock.stdout.readline().strip()
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        try:
            for name in ("polygateway", "polygateway.chat_stream", "aiohttp"):
                if name == "aiohttp":
                    owner, make = await aiohttp_client(base_url)
                else:
                    owner, make = await package_client(base_url, args.telemetry, tmp,
                                                       iterate=name.endswith("chat_stream"))
                # chat_stream() always streams: measured in the streaming rows only.
                for stream in (True,) if name.endswith("chat_stream") else (False, True):
                    for concurrency in (1, 64):
                        figures = await closed_loop(make(stream), concurrency, args.seconds,
                                                    args.warmup)
                        line = {"client": name, "stream": stream, "concurrency": concurrency,
                                "chunks": args.chunks, **figures}
                        results[(name, stream, concurrency)] = line
                        print(json.dumps(line), flush=True)
                await (owner.close() if name == "aiohttp" else owner.aclose())
        finally:
            mock.stdin.close()
            mock.wait()
    for ours_name, stream in (("polygateway", False), ("polygateway", True),
                              ("polygateway.chat_stream", True)):
        for concurrency in (1, 64):
            ours = results[(ours_name, stream, concurrency)]
            bare = results[("aiohttp", stream, concurrency)]
            print(json.dumps({
                "ratio": f"{ours_name}/aiohttp", "stream": stream, "concurrency": concurrency,
                "calls_per_s": round(ours["calls_per_s"] / bare["calls_per_s"], 3),
                "cpu_ms_per_call": round(ours["cpu_ms_per_call"] / bare["cpu_ms_per_call"], 3),
            }), flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--warmup", type=float, default=1.5)
    parser.add_argument("--chunks", type=int, default=16, help="content deltas per answer")
    parser.add_argument("--telemetry", choices=["none", "sqlite"], default="none")
    asyncio.run(main(parser.parse_args()))
