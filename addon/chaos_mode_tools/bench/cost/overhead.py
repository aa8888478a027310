"""What the addon costs: mitmdump with the addon (chaos on, no contention) against plain mitmdump.

Both proxies run at once in front of one simulator answering with zero latency. Rounds alternate between
them, the order flipping every round (A B, B A, A B, ...), because the machine is shared and absolute
times drift; the report gives each side's median over rounds and the ratio of the medians.
(a) throughput: `concurrency` clients send `requests` small non-streamed requests per round;
    Each round also reads the proxy process's CPU time (user + system, from /proc) around the
    throughput part: CPU per request is far less sensitive to a shared machine than throughput.
(b) time to first token: `stream_concurrency` clients send `streams` streamed requests per round; the
    p50 of each round is kept, and the added TTFT is the difference of the medians of those p50s.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chaos_mode.zai.catalog import EARLY_2026_CATALOG, models_block
from chaos_mode_tools.bench.swarm.agents import DELTA, MESSAGES_PATH
from chaos_mode_tools.bench.swarm.figures import percentile
from chaos_mode_tools.devtools.client import httpx
from chaos_mode_tools.devtools.processes import ProxyProcess

# The addon routes Claude's name; plain mitmdump must send a model the simulator knows.
ADDON_MODEL = "claude-sonnet-4-5"
PLAIN_MODEL = "glm-4.5"
ZERO_LATENCY = {"x-sim-latency-ms": "0", "x-sim-token-interval-ms": "0", "x-api-key": "bench-key"}


@dataclass(frozen=True, slots=True)
class OverheadOptions:
    rounds: int = 6
    requests: int = 200
    concurrency: int = 8
    streams: int = 50
    stream_concurrency: int = 4
    stream_tokens: int = 5


@dataclass
class _Side:
    name: str
    proxy: ProxyProcess
    model: str
    throughput: list[float]
    ttft_p50: list[float]
    errors: int = 0
    cpu_per_request: list[float] = field(default_factory=list)


def small_body(model: str, stream: bool) -> dict[str, Any]:
    return {
        "model": model,
        "max_tokens": 16,
        "stream": stream,
        "messages": [{"role": "user", "content": "ping"}],
    }


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds a process has used so far (Linux /proc), else None."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def _throughput(client: httpx.AsyncClient, side: _Side, options: OverheadOptions) -> float:
    body = small_body(side.model, stream=False)
    headers = {**ZERO_LATENCY, "x-sim-output-tokens": "1"}
    remaining = options.requests

    async def worker() -> None:
        nonlocal remaining
        while remaining > 0:
            remaining -= 1
            response = await client.post(MESSAGES_PATH, json=body, headers=headers)
            if response.status_code != 200:
                side.errors += 1

    pid = side.proxy.proc.pid if side.proxy.proc is not None else None
    cpu_before = cpu_seconds(pid) if pid else None
    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(options.concurrency)))
    elapsed = time.perf_counter() - start
    cpu_after = cpu_seconds(pid) if pid else None
    if cpu_before is not None and cpu_after is not None:
        side.cpu_per_request.append((cpu_after - cpu_before) / options.requests)
    return options.requests / elapsed


async def first_token(
    client: httpx.AsyncClient, body: dict[str, Any], headers: dict[str, str]
) -> tuple[float | None, httpx.Response]:
    """(seconds from sending to the first content_block_delta, or None; the response) of one stream."""
    sent = time.perf_counter()
    first: float | None = None
    async with client.stream("POST", MESSAGES_PATH, json=body, headers=headers) as response:
        window = b""
        async for chunk in response.aiter_raw():
            window = window[-64:] + chunk
            if first is None and DELTA in window:
                first = time.perf_counter() - sent
    return first, response


async def _ttft(client: httpx.AsyncClient, side: _Side, options: OverheadOptions) -> float:
    body = small_body(side.model, stream=True)
    headers = {**ZERO_LATENCY, "x-sim-output-tokens": str(options.stream_tokens)}
    remaining = options.streams
    samples: list[float] = []

    async def worker() -> None:
        nonlocal remaining
        while remaining > 0:
            remaining -= 1
            first, response = await first_token(client, body, headers)
            if response.status_code != 200 or first is None:
                side.errors += 1
            else:
                samples.append(first)

    await asyncio.gather(*(worker() for _ in range(options.stream_concurrency)))
    p50 = percentile(samples, 50)
    return float("nan") if p50 is None else p50


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


async def measure_overhead(
    sim_url: str, options: OverheadOptions, log: Callable[[str], None] = lambda _: None
) -> dict[str, Any]:
    """Run both proxies side by side against `sim_url` (a zero-latency-capable simulator)."""
    config: dict[str, object] = {
        "chaosMode": {"enabled": True},
        "upstreamHosts": ["127.0.0.1"],
        "models": models_block(EARLY_2026_CATALOG),
    }
    addon = ProxyProcess(upstream=sim_url, config=config)
    plain = ProxyProcess(upstream=sim_url, addon=False)
    sides = [_Side("addon", addon, ADDON_MODEL, [], []), _Side("plain", plain, PLAIN_MODEL, [], [])]
    limits = httpx.Limits(max_connections=32, max_keepalive_connections=32)
    # Both start at once (each takes a second or two); both stop whatever happens (stop() is safe on a
    # proxy that never started).
    async with contextlib.AsyncExitStack() as stack:
        for proxy in (addon, plain):
            stack.push_async_callback(asyncio.to_thread, proxy.stop)
        await asyncio.gather(*(asyncio.to_thread(p.start) for p in (addon, plain)))
        clients = {
            s.name: httpx.AsyncClient(base_url=s.proxy.url, limits=limits, timeout=30.0) for s in sides
        }
        try:
            warm = OverheadOptions(
                rounds=1, requests=min(50, options.requests), streams=8, concurrency=options.concurrency
            )
            for side in sides:
                await _throughput(clients[side.name], side, warm)
                await _ttft(clients[side.name], side, warm)
            for round_ in range(options.rounds):
                order = sides if round_ % 2 == 0 else sides[::-1]
                for side in order:
                    side.throughput.append(await _throughput(clients[side.name], side, options))
                    side.ttft_p50.append(await _ttft(clients[side.name], side, options))
                log(
                    f"  overhead round {round_ + 1}/{options.rounds}: "
                    + ", ".join(
                        f"{s.name} {s.throughput[-1]:.0f} req/s, TTFT p50 {s.ttft_p50[-1] * 1000:.2f} ms"
                        for s in sides
                    )
                )
        finally:
            for client in clients.values():
                await client.aclose()
    a, p = sides
    tput_a, tput_p = _median(a.throughput), _median(p.throughput)
    ttft_a, ttft_p = _median(a.ttft_p50), _median(p.ttft_p50)
    cpu_a, cpu_p = _median(a.cpu_per_request), _median(p.cpu_per_request)
    return {
        "method": (
            "mitmdump -s chaos_addon.py (chaos on, least-loaded, no contention) vs plain mitmdump, "
            "one zero-latency simulator behind both, rounds alternating A B / B A; medians over rounds"
        ),
        "rounds": options.rounds,
        "requestsPerRound": options.requests,
        "concurrency": options.concurrency,
        "streamsPerRound": options.streams,
        "streamConcurrency": options.stream_concurrency,
        "throughput": {
            "addon": [round(x, 1) for x in a.throughput],
            "plain": [round(x, 1) for x in p.throughput],
            "addonMedian": round(tput_a, 1),
            "plainMedian": round(tput_p, 1),
            "ratio": round(tput_a / tput_p, 3),
            "costPercent": round(100 * (1 - tput_a / tput_p), 1),
        },
        "cpuMsPerRequest": {
            "addon": [round(x * 1000, 3) for x in a.cpu_per_request],
            "plain": [round(x * 1000, 3) for x in p.cpu_per_request],
            "addonMedian": round(cpu_a * 1000, 3),
            "plainMedian": round(cpu_p * 1000, 3),
            "ratio": round(cpu_a / cpu_p, 3) if cpu_p else None,
            "addedMs": round((cpu_a - cpu_p) * 1000, 3),
        },
        "ttftP50Ms": {
            "addon": [round(x * 1000, 2) for x in a.ttft_p50],
            "plain": [round(x * 1000, 2) for x in p.ttft_p50],
            "addonMedian": round(ttft_a * 1000, 2),
            "plainMedian": round(ttft_p * 1000, 2),
            "ratio": round(ttft_a / ttft_p, 3),
            "addedMs": round((ttft_a - ttft_p) * 1000, 2),
        },
        "errors": {"addon": a.errors, "plain": p.errors},
    }
