"""Time to first token of a failed-over request, against z.ai's time to say no.

One simulator answers with zero latency; before each failover request a fault makes the first attempt's
model say 1302 after `no_ms` (z.ai's time to say no), so the second attempt serves it. Beside it, plain
mitmdump streaming every body (`stream_large_bodies=1`) serves the same zero-latency stream with no
failover. Requests go one at a time, alternating sides (the machine is shared):

    failover TTFT - no_ms - plain TTFT = what the failover added (target: under 5 ms)

and whether the failed-over answer streamed (chunked) or came in one piece.
Run: `python -m chaos_mode.bench.failover_ttft [--requests 40] [--no-ms 300] [--json FILE]`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx

from chaos_mode.child import ProxyProcess
from chaos_mode.sim import SimProcess, SimSettings, default_limits

from .overhead import ADDON_MODEL, PLAIN_MODEL, ZERO_LATENCY, first_token, small_body

STREAM_TOKENS = 5


async def streamed_first_token(client: httpx.AsyncClient, model: str) -> tuple[float, bool]:
    """(seconds to the first content_block_delta, streamed) of one streamed request."""
    headers = {**ZERO_LATENCY, "x-sim-output-tokens": str(STREAM_TOKENS)}
    first, response = await first_token(client, small_body(model, True), headers)
    if response.status_code != 200 or first is None:
        raise RuntimeError(f"{model}: HTTP {response.status_code}, no first token")
    return first, "chunked" in response.headers.get("transfer-encoding", "")


async def measure(requests: int, no_ms: float) -> dict[str, Any]:
    settings = SimSettings(latency_ms=0, token_interval_ms=0, reject_delay_ms=0, limits=default_limits())
    with SimProcess(settings) as sim:
        config: dict[str, object] = {"upstreamHosts": ["127.0.0.1"], "chaosMode": {"enabled": True}}
        streaming = ("--set", "stream_large_bodies=1")
        with (
            ProxyProcess(upstream=sim.base_url, config=config) as addon,
            ProxyProcess(upstream=sim.base_url, addon=False, extra_args=streaming) as plain,
        ):
            async with (
                httpx.AsyncClient(base_url=addon.url, trust_env=False, timeout=30) as through_addon,
                httpx.AsyncClient(base_url=plain.url, trust_env=False, timeout=30) as through_plain,
                httpx.AsyncClient(trust_env=False, timeout=10) as control,
            ):
                for _ in range(5):  # warm both (connections, caches)
                    await streamed_first_token(through_addon, ADDON_MODEL)
                    await streamed_first_token(through_plain, PLAIN_MODEL)
                failover: list[float] = []
                baseline: list[float] = []
                one_piece = 0
                fault = {"model": "*", "code": "1302", "count": 1, "delayMs": no_ms}
                for i in range(requests):
                    for side in ("addon", "plain") if i % 2 == 0 else ("plain", "addon"):
                        if side == "plain":
                            baseline.append((await streamed_first_token(through_plain, PLAIN_MODEL))[0])
                            continue
                        # The fault is taken by the addon's first attempt, before plain's request comes.
                        (await control.post(sim.base_url + "/sim/faults", json=fault)).raise_for_status()
                        seconds, streamed = await streamed_first_token(through_addon, ADDON_MODEL)
                        failover.append(seconds)
                        one_piece += not streamed
                status = (await control.get(addon.status_url)).json()
    failover_ms = statistics.median(failover) * 1000
    plain_ms = statistics.median(baseline) * 1000
    return {
        "requests": requests,
        "zaiNoMs": no_ms,
        "failovers": status["failovers"],
        "onePiece": one_piece,
        "failoverTtftMedianMs": round(failover_ms, 2),
        "plainTtftMedianMs": round(plain_ms, 2),
        "addedMs": round(failover_ms - no_ms - plain_ms, 2),
    }


def render(doc: dict[str, Any]) -> str:
    return (
        f"failover TTFT, {doc['requests']} requests, z.ai says no after {doc['zaiNoMs']:g} ms "
        f"({doc['failovers']} failovers, {doc['onePiece']} answers in one piece):\n"
        f"  failed over through the addon: TTFT p50 {doc['failoverTtftMedianMs']:.2f} ms; "
        f"plain mitmdump streaming, no failover: {doc['plainTtftMedianMs']:.2f} ms\n"
        f"  added beyond z.ai's no: {doc['addedMs']:+.2f} ms (target: under 5 ms)"
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m chaos_mode.bench.failover_ttft", description=__doc__)
    parser.add_argument("--requests", type=int, default=40, help="failed-over requests (default 40)")
    parser.add_argument("--no-ms", type=float, default=300.0, help="z.ai's time to say 1302 (default 300)")
    parser.add_argument("--json", type=Path, help="write the figures as JSON")
    args = parser.parse_args(argv)
    doc = asyncio.run(measure(args.requests, args.no_ms))
    print(render(doc))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
